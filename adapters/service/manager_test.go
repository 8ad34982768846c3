package service

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/internal/errs"
)

// ctl records the service manager calls (the edge) and answers each
// command with what a test says.
type ctl struct {
	calls   []string
	answers map[string]string // the call's args joined -> output
	fail    map[string]bool   // the call's args joined -> exit non-zero
}

func (c *ctl) run(name string, args ...string) ([]byte, error) {
	k := strings.Join(args, " ")
	c.calls = append(c.calls, name+" "+k)
	var err error
	if c.fail[k] {
		err = errors.New("exit status 1")
	}
	return []byte(c.answers[k]), err
}

func spec(t *testing.T) Spec {
	t.Helper()
	dir := t.TempDir()
	exe := filepath.Join(dir, "cbth")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	os.Chmod(exe, 0o755)
	return Spec{Exe: exe, Home: filepath.Join(dir, "home"), DefaultHome: filepath.Join(dir, ".cbth")}
}

// systemd: install writes the unit (0600) and has the manager reload and
// enable it now; status reads the file and is-active's word; a unit that
// differs from what this cbth writes is not up to date; uninstall
// disables it, removes the file and reloads.
func TestSystemdInstallQueryUninstall(t *testing.T) {
	s := spec(t)
	c := &ctl{answers: map[string]string{"--user is-active " + s.Name() + ".service": "active\n"}}
	m := Manager{Kind: "systemd-user", Dir: filepath.Join(t.TempDir(), "systemd", "user"), Ctl: "systemctl", Run: c.run}
	st, err := m.Install(s)
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(m.Dir, s.Name()+".service")
	if fi, err := os.Stat(unit); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the unit: %v %v", fi, err)
	}
	want := []string{"systemctl --user daemon-reload", "systemctl --user enable --now " + s.Name() + ".service", "systemctl --user is-active " + s.Name() + ".service"}
	if strings.Join(c.calls, "|") != strings.Join(want, "|") {
		t.Fatalf("calls %q, want %q", c.calls, want)
	}
	if !st.Installed || !st.UpToDate || st.Active != "active" || st.Path != unit || st.Manager != "systemd-user" || st.Command[0] != s.Exe {
		t.Fatalf("status %+v", st)
	}
	os.WriteFile(unit, []byte("[Service]\nExecStart=/old/cbth\n"), 0o600)
	if st := m.Query(s); !st.Installed || st.UpToDate {
		t.Fatalf("an old unit: %+v", st)
	}
	c.calls = nil
	st, err = m.Uninstall(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(unit); !os.IsNotExist(err) || st.Installed {
		t.Fatalf("uninstalled, yet %v %+v", err, st)
	}
	if c.calls[0] != "systemctl --user disable --now "+s.Name()+".service" || c.calls[1] != "systemctl --user daemon-reload" {
		t.Fatalf("uninstall calls %q", c.calls)
	}
}

// A manager that refuses: install says which call failed (EHOSTDOWN)
// with the status as it stands; a status the manager cannot give says so.
func TestSystemdFailures(t *testing.T) {
	s := spec(t)
	c := &ctl{fail: map[string]bool{"--user enable --now " + s.Name() + ".service": true, "--user is-active " + s.Name() + ".service": true},
		answers: map[string]string{"--user enable --now " + s.Name() + ".service": "Failed to connect to bus"}}
	m := Manager{Kind: "systemd-user", Dir: t.TempDir(), Ctl: "systemctl", Run: c.run}
	st, err := m.Install(s)
	if errs.CodeOf(err) != errs.EHOSTDOWN || !strings.Contains(err.Error(), "Failed to connect to bus") || !st.Installed {
		t.Fatalf("a manager that refuses: %+v, %v", st, err)
	}
	if st.ManagerError == "" || st.Active != "unknown" {
		t.Fatalf("a status the manager cannot give: %+v", st)
	}
}

// launchd: the agent is bootstrapped into the user's gui domain and
// booted out of it; loaded is what print answers.
func TestLaunchd(t *testing.T) {
	s := spec(t)
	c := &ctl{}
	m := Manager{Kind: "launchd", Dir: t.TempDir(), Ctl: "launchctl", UID: 501, Run: c.run}
	st, err := m.Install(s)
	if err != nil {
		t.Fatal(err)
	}
	plist := filepath.Join(m.Dir, "dev.cbth."+s.Name()+".plist")
	if c.calls[0] != "launchctl bootstrap gui/501 "+plist || c.calls[1] != "launchctl print gui/501/dev.cbth."+s.Name() {
		t.Fatalf("calls %q", c.calls)
	}
	if !st.Installed || st.Active != "loaded" || st.Name != "dev.cbth."+s.Name() {
		t.Fatalf("status %+v", st)
	}
	c.calls, c.fail = nil, map[string]bool{"print gui/501/dev.cbth." + s.Name(): true}
	st, _ = m.Uninstall(s)
	if c.calls[0] != "launchctl bootout gui/501/dev.cbth."+s.Name() || st.Installed || st.Active != "not_loaded" {
		t.Fatalf("uninstall: %q %+v", c.calls, st)
	}
}

// What cannot go into a service definition as it is, or that another
// user could rewrite, is refused before anything is written.
func TestSpecCheck(t *testing.T) {
	good := spec(t)
	shared := spec(t)
	os.Chmod(shared.Exe, 0o775)
	for _, c := range []struct {
		name string
		s    Spec
		code errs.Code
	}{
		{"sound", good, ""},
		{"a relative executable", Spec{Exe: "cbth", Home: good.Home}, errs.EINVAL},
		{"a relative home", Spec{Exe: good.Exe, Home: "home"}, errs.EINVAL},
		{"a newline in the home", Spec{Exe: good.Exe, Home: "/tmp/a\nExecStart=/bin/evil"}, errs.EINVAL},
		{"not UTF-8", Spec{Exe: good.Exe, Home: "/tmp/\xff"}, errs.EINVAL},
		{"a group-writable executable", shared, errs.EACCES},
	} {
		if err := c.s.Check(); errs.CodeOf(err) != c.code {
			t.Errorf("%s: %v, want %q", c.name, err, c.code)
		}
	}
	c := &ctl{}
	m := Manager{Kind: "systemd-user", Dir: t.TempDir(), Ctl: "systemctl", Run: c.run}
	if _, err := m.Install(shared); err == nil || len(c.calls) != 0 {
		t.Fatalf("a refused install: %v, calls %q", err, c.calls)
	}
	if ents, _ := os.ReadDir(m.Dir); len(ents) != 0 {
		t.Fatalf("a refused install wrote %v", ents)
	}
	if a, b := (Spec{Home: "/h/one"}).Name(), (Spec{Home: "/h/two"}).Name(); a == b || !strings.HasPrefix(a, "cbth-") {
		t.Errorf("two homes' names %q %q", a, b)
	}
}
