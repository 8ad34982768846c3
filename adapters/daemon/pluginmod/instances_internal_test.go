package pluginmod

import (
	"os"
	"os/exec"
	"testing"

	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/proc"
)

// ended returns the pid and start time of a process that has ended.
func ended(t *testing.T) (int, string) {
	t.Helper()
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	start, ok, err := proc.Start(c.Process.Pid)
	if err != nil || !ok {
		t.Fatalf("start time of %d: %v", c.Process.Pid, err)
	}
	c.Process.Kill()
	c.Wait()
	return c.Process.Pid, start
}

// An instance is one plugin's, one process's, for the life of that
// process: registering it again as another plugin or another live
// process is refused (EACCES); once its process ended, its id is spent
// (ESTALE); a request of an instance is checked the same way, and one
// that made no handshake is ESTATE.
func TestPluginInstancesBelongToOneLiveProcess(t *testing.T) {
	me := os.Getpid()
	myStart, _, err := proc.Start(me)
	if err != nil {
		t.Fatal(err)
	}
	deadPID, deadStart := ended(t)
	var p pluginInstances
	if err := p.register("plug", "live", me, myStart); err != nil {
		t.Fatal(err)
	}
	if err := p.register("plug", "gone", deadPID, deadStart); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		register bool
		plugin   string
		instance string
		pid      int
		start    string
		code     errs.Code
	}{
		{"the same again", true, "plug", "live", me, myStart, ""},
		{"as another plugin", true, "other", "live", me, myStart, errs.EACCES},
		{"as another process while it runs", true, "plug", "live", deadPID, deadStart, errs.EACCES},
		{"an ended instance's id again", true, "plug", "gone", me, myStart, errs.ESTALE},
		{"a request of the instance", false, "plug", "live", 0, "", ""},
		{"a request as another plugin", false, "other", "live", 0, "", errs.EACCES},
		{"a request of an ended instance", false, "plug", "gone", 0, "", errs.ESTALE},
		{"a request with no handshake", false, "plug", "never", 0, "", errs.ESTATE},
	} {
		var err error
		if c.register {
			err = p.register(c.plugin, c.instance, c.pid, c.start)
		} else {
			err = p.check(c.plugin, c.instance)
		}
		if errs.CodeOf(err) != c.code {
			t.Errorf("%s: %v, want %q", c.name, err, c.code)
		}
	}
}

// The pid a handshake names must be the client's own or one of its
// ancestors, and not init: nothing else can be named.
func TestPluginProcessIsTheClientOrAnAncestor(t *testing.T) {
	deadPID, _ := ended(t)
	me, parent := os.Getpid(), os.Getppid()
	for _, c := range []struct {
		name      string
		peer, pid int
		code      errs.Code
	}{
		{"the client itself", me, me, ""},
		{"its parent", me, parent, ""},
		{"init", me, 1, errs.EINVAL},
		{"no pid", me, 0, errs.EINVAL},
		{"a process not among its ancestors", parent, me, errs.EACCES},
		{"an ended process", me, deadPID, errs.EACCES},
		{"an unknown peer", -1, me, errs.EACCES},
	} {
		start, err := pluginProcess(c.peer, c.pid)
		if errs.CodeOf(err) != c.code {
			t.Errorf("%s: %v, want %q", c.name, err, c.code)
		}
		if c.code == "" && start == "" {
			t.Errorf("%s: no start time", c.name)
		}
	}
}

// A codex_binary is a name looked up in PATH or an absolute path that no
// other user could rewrite; a missing absolute path passes (it is
// checked again when started).
func TestCheckCodexBinary(t *testing.T) {
	shared := t.TempDir()
	os.Chmod(shared, 0o777)
	rewritable := shared + "/codex"
	os.WriteFile(rewritable, []byte("#!/bin/sh\n"), 0o755)
	for _, c := range []struct {
		bin  string
		code errs.Code
	}{
		{"codex", ""},
		{"/nonexistent/codex", ""},
		{"bin/codex", errs.EINVAL},
		{"./codex", errs.EINVAL},
		{"", errs.EINVAL},
		{"co\x01dex", errs.EINVAL},
		{rewritable, errs.EACCES},
	} {
		if err := checkCodexBinary(c.bin); errs.CodeOf(err) != c.code {
			t.Errorf("%q: %v, want %q", c.bin, err, c.code)
		}
	}
}
