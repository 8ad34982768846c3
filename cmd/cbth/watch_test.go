package main_test

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// cbth watch: a live view fed by the daemon's commit subscription, JSON
// lines of changes for scripts, a terminal UI on a terminal; it quits
// cleanly and never starts a daemon.
func TestWatch_LiveViewAndCleanQuit(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "")
	r := h.run("watch", "--json")
	if r.code != 69 || !strings.Contains(r.stdout, `"EHOSTDOWN"`) || h.pid() != 0 {
		t.Fatalf("watch without a daemon: exit %d %s (daemon pid %d)", r.code, r.stdout, h.pid())
	}

	h.behave("T", "accept")
	c := h.cmd("watch", "--json")
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan map[string]any, 16)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
		close(lines)
	}()
	next := func(what string, cond func(map[string]any) bool) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case m, ok := <-lines:
				if !ok {
					t.Fatalf("watch ended waiting for %s", what)
				}
				if cond(m) {
					return
				}
			case <-deadline:
				t.Fatalf("no line with %s", what)
			}
		}
	}
	next("the first view", func(m map[string]any) bool { return m["head_count"] == float64(0) })
	h.ready("T")
	next("thread T's head", func(m map[string]any) bool {
		heads, _ := m["heads"].([]any)
		return len(heads) == 1 && heads[0].(map[string]any)["source_thread_id"] == "T"
	})
	h.advance("11s") // the merge window ends: delivered, then cooling down
	next("the delivery's attempt", func(m map[string]any) bool {
		hs, _ := m["heads"].([]any)
		return len(hs) == 1 && hs[0].(map[string]any)["state"] == "cooldown"
	})
	c.Process.Signal(syscall.SIGINT)
	if err := c.Wait(); err != nil {
		t.Fatalf("watch did not quit cleanly on SIGINT: %v", err)
	}

	// The terminal UI: drawn on a terminal, q quits.
	tm := h.cmd("watch")
	f, err := pty.StartWithSize(tm, &pty.Winsize{Rows: 40, Cols: 160})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	screen := make(chan string, 64)
	go func() {
		var all strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			all.Write(buf[:n])
			screen <- all.String()
			if err == io.EOF || err != nil {
				return
			}
		}
	}()
	deadline := time.After(20 * time.Second)
	for seen := false; !seen; {
		select {
		case s := <-screen:
			seen = strings.Contains(s, "open heads") && strings.Contains(s, "q quits")
		case <-deadline:
			t.Fatal("the terminal UI never drew the view")
		}
	}
	f.Write([]byte("q"))
	done := make(chan error, 1)
	go func() { done <- tm.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the terminal UI did not quit cleanly: %v", err)
		}
	case <-time.After(20 * time.Second):
		tm.Process.Kill()
		t.Fatal("q did not quit the terminal UI")
	}
}
