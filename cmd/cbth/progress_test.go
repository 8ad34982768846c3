package main_test

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/creack/pty"
)

// runTTYStderr runs cbth with its stderr on a terminal (a pty) and its
// stdout on a pipe, and returns what each got.
func (h *homeDir) runTTYStderr(args ...string) (stdout, stderr string) {
	h.t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		h.t.Fatal(err)
	}
	defer ptmx.Close()
	c := h.cmd(args...)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, tty
	got := make(chan string)
	go func() {
		b, _ := io.ReadAll(ptmx) // ends with EIO once the tty side is closed
		got <- string(b)
	}()
	err = c.Run()
	tty.Close()
	if ee := (*exec.ExitError)(nil); err != nil && !errorsAs(err, &ee) {
		h.t.Fatalf("run %v: %v", args, err)
	}
	return out.String(), <-got
}

func errorsAs(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

// Long commands show progress on a terminal's stderr only: events done,
// the rate, the time left where the total is known; nothing under --json
// or when stderr is not a terminal.
func TestProgress_OnATerminalOnly(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "max_wait_window = \"0s\"")
	job := h.ready("T")
	_, stderr := h.runTTYStderr("wait", "--job-id", job)
	if !regexp.MustCompile(`waiting for 1 job\b`).MatchString(stderr) {
		t.Errorf("wait on a terminal showed %q", stderr)
	}
	h.ok(nil, "daemon", "stop") // the audit commands then read the file
	export := h.run("events", "export")
	file := t.TempDir() + "/log.jsonl"
	writeFile(t, file, export.stdout)
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"events", "export"}, "exporting"},
		{[]string{"events", "verify"}, "verifying"},
		{[]string{"events", "replay", "--until", "3"}, "replaying"},
		{[]string{"events", "diff", h.root, file}, "diff"},
	} {
		out, stderr := h.runTTYStderr(c.args...)
		if !strings.Contains(stderr, c.says) || !strings.Contains(stderr, "events") {
			t.Errorf("%v on a terminal: stderr %q", c.args, stderr)
		}
		if strings.Contains(out, c.says+" ") {
			t.Errorf("%v: progress went to stdout: %q", c.args, out)
		}
		if _, stderr := h.runTTYStderr(append(c.args, "--json")...); stderr != "" {
			t.Errorf("%v --json on a terminal: stderr %q", c.args, stderr)
		}
		if r := h.run(c.args...); r.stderr != "" {
			t.Errorf("%v with stderr not a terminal: %q", c.args, r.stderr)
		}
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
