package main_test

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// terminal runs a command on a pseudo-terminal, as a person at a terminal
// would: the Codex TUI refuses to run without one. It keeps everything the
// command printed.
type terminal struct {
	t    *testing.T
	cmd  *exec.Cmd
	pty  *os.File
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

// startTerminal runs cbth with args in dir on a 120x40 terminal. The test's
// cleanup kills whatever of it still runs.
func (h *homeDir) startTerminal(dir string, args ...string) *terminal {
	h.t.Helper()
	c := h.cmd(args...)
	c.Dir = dir
	return startOnPty(h.t, c)
}

// startOnPty runs c on a 120x40 terminal, as startTerminal does.
func startOnPty(t *testing.T, c *exec.Cmd) *terminal {
	t.Helper()
	args := c.Args
	c.Env = append(c.Env, "TERM=xterm-256color")
	f, err := pty.StartWithSize(c, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Fatalf("start %v on a pty: %v", args, err)
	}
	tm := &terminal{t: t, cmd: c, pty: f, done: make(chan struct{})}
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := f.Read(buf)
			tm.mu.Lock()
			tm.out.Write(buf[:n])
			tm.mu.Unlock()
			if err != nil {
				return // EIO once the command and its children closed the pty
			}
		}
	}()
	go func() {
		tm.err = c.Wait()
		close(tm.done)
	}()
	t.Cleanup(func() {
		select {
		case <-tm.done:
		default:
			// pty.Start made the command a session leader: its group is
			// cbth and the codex it runs.
			syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			<-tm.done
		}
		f.Close()
		if t.Failed() {
			t.Logf("terminal of %v:\n%s", args, tail(tm.screen(), 3000))
		}
	})
	return tm
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78DEHM]`)

// screen is what the command printed so far, escape sequences removed.
func (tm *terminal) screen() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return ansi.ReplaceAllString(tm.out.String(), "")
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// waitText waits until the screen shows text.
func (tm *terminal) waitText(text string, limit time.Duration) {
	tm.t.Helper()
	waitFor(tm.t, "the terminal to show "+text, limit, func() bool { return strings.Contains(tm.screen(), text) })
}

// typeLine types s and presses Enter.
func (tm *terminal) typeLine(s string) {
	tm.t.Helper()
	if _, err := io.WriteString(tm.pty, s); err != nil {
		tm.t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the TUI takes a paste burst as one paste; Enter then submits it
	if _, err := io.WriteString(tm.pty, "\r"); err != nil {
		tm.t.Fatal(err)
	}
}

// quit presses ^C until the command exits (the TUI asks for two; one
// more may first interrupt a running turn), and returns the exit status.
func (tm *terminal) quit() int {
	tm.t.Helper()
	for i := 0; i < 6; i++ {
		io.WriteString(tm.pty, "\x03")
		select {
		case <-tm.done:
			return tm.wait(0)
		case <-time.After(500 * time.Millisecond):
		}
	}
	return tm.wait(30 * time.Second)
}

// wait waits for the command to exit and returns its status.
func (tm *terminal) wait(limit time.Duration) int {
	tm.t.Helper()
	if limit > 0 {
		select {
		case <-tm.done:
		case <-time.After(limit):
			tm.t.Fatalf("the command on the terminal did not exit within %s", limit)
		}
	}
	<-tm.done
	if tm.err == nil {
		return 0
	}
	if ee, ok := tm.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	tm.t.Fatalf("wait: %v", tm.err)
	return -1
}
