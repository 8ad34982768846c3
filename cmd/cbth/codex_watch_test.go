package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

// Watch and wake in the Codex the user runs (plain `codex`, its own
// managed daemon, cbth installed with `cbth mcp install`): the agent
// starts a watcher through MCP from a read-only thread that never asks
// for approval, ends its turn, and is woken by the lines that matter and
// by the end, each once, with no model request while it waits.

// watchServer is the named task the agent watches: READY after about
// 2 s, noise every 100 ms, "ERROR disk full" after about 6 s, exit 1.
const watchServer = `[mcp.tasks.server]
argv = ["sh", "-c", "i=0; while [ $i -lt 60 ]; do i=$((i+1)); echo noise $i; [ $i = 20 ] && echo READY; sleep 0.1; done; echo ERROR disk full; exit 1"]
summary = "the dev server"
`

// newWatchCodex is the user's Codex, read-only and never asking, with
// watch_start approved by the user at install.
func newWatchCodex(t *testing.T, cbth string) *userCodex {
	u := newUserCodex(t, "approval_policy = \"never\"\nsandbox_mode = \"read-only\"\n", cbth)
	u.ok(nil, "mcp", "install", "--codex-home", u.codexHome, "--approve", "task_run,watch_start")
	return u
}

// startWatcher has the agent start the server's watcher from a new TUI
// thread, and returns the thread, the watcher's task id and the index
// of the model request that carried watch_start's answer (the last of
// that turn).
func (u *userCodex) startWatcher(tm *terminal, prompt string) (thread, task string, answered int) {
	u.t.Helper()
	u.model.Script(prompt,
		fakeprovider.Step{Query: "watch a command in the background"},
		fakeprovider.Step{Namespace: "mcp__cbth", Name: "watch_start", Args: `{"task":"server","wake_on":["^READY$","^ERROR"]}`})
	u.userTurn(tm, prompt, prompt)
	waitFor(u.t, "watch_start's answer to reach the model", codextest.Guard, func() bool {
		for i, q := range u.model.Requests() {
			for _, o := range q.OutputTexts {
				if strings.Contains(o, "Watcher ") && strings.Contains(o, "task_id") {
					var ans struct {
						TaskID string `json:"task_id"`
					}
					if err := json.Unmarshal([]byte(o[strings.Index(o, "{"):]), &ans); err != nil || ans.TaskID == "" {
						u.t.Fatalf("watch_start answered %q (%v)", o, err)
					}
					task, answered = ans.TaskID, i
					return true
				}
			}
		}
		return false
	})
	return u.threadOfMarker(prompt), task, answered
}

func TestCodexDaemon_WatcherWakesTheThread(t *testing.T) {
	t.Parallel()
	u := newWatchCodex(t, watchServer)
	tm := u.tui()
	thread, task, answered := u.startWatcher(tm, "start the dev server and wake me when it is ready or fails")
	const ready, failed, ended = "matched /^READY$/ on line 21: READY", "matched /^ERROR/ on line 62: ERROR disk full", "exited with status 1"
	waitFor(t, "the READY and ERROR wakes and the end to reach the model", codextest.Guard, func() bool {
		return u.model.Count(ended) > 0
	})
	for _, m := range []string{ready, failed, ended} {
		if n := u.model.Count(m); n != 1 || u.threadOfMarker(m) != thread {
			t.Fatalf("%q reached the model %d times (thread %s), want once in %s", m, n, u.threadOfMarker(m), thread)
		}
	}
	// Zero tokens spent waiting: after the turn that started the watcher
	// ended, the next model request is the READY wake's.
	var next *fakeprovider.Request
	for _, q := range u.model.Requests()[answered+1:] {
		if !q.Title {
			next = &q
			break
		}
	}
	if next == nil || !strings.Contains(next.UserText, ready) || strings.Contains(next.UserText, failed) {
		t.Fatalf("the first model request after the watcher started is not the READY wake: %+v", next)
	}
	// Two or three turns (ERROR and the end share one when they fall in
	// one merge window), in order.
	var order []string
	for _, q := range u.model.Requests()[answered+1:] {
		for _, m := range []string{ready, failed, ended} {
			if !q.Title && strings.Contains(q.UserText, m) {
				order = append(order, m)
			}
		}
	}
	if strings.Join(order, "|") != ready+"|"+failed+"|"+ended {
		t.Fatalf("the wakes came in the order %q", order)
	}
	var tv watcherView
	u.ok(&tv, "task", "inspect", task)
	if tv.State != "exited" || tv.Watch == nil || tv.Watch.Wakes != 2 || tv.Job.Status != "ready" {
		t.Fatalf("the watcher: %+v", tv)
	}
	// The end's turn pastes the output the watcher kept.
	waitFor(t, "the TUI to show the end", codextest.Guard, func() bool {
		sc := tm.screen()
		return strings.Contains(sc, "end of result") || strings.Contains(sc, "endofresult")
	})
	if code := tm.quit(); code != 0 {
		t.Fatalf("codex exited %d", code)
	}
}

// A kill -9 of cbth's daemon between a match and its delivery (the
// thread is busy with the user's own turn, so the READY wake waits in
// its FIFO) loses nothing: once the turn ends, the new daemon delivers
// the wake, once, and then the watcher's end: interrupted with its
// daemon, saying what it had seen. No model request is made while the
// wake waits.
func TestCodexDaemon_WatcherWakeSurvivesAKilledDaemon(t *testing.T) {
	t.Parallel()
	// The server is ready once the test says so: after the user's turn
	// has made the thread busy.
	up := filepath.Join(t.TempDir(), "up")
	u := newWatchCodex(t, fmt.Sprintf("[mcp.tasks.server]\nargv = [\"sh\", \"-c\", \"while [ ! -e %s ]; do sleep 0.1; done; echo READY; exec sleep 600\"]\n", up))
	tm := u.tui()
	thread, task, _ := u.startWatcher(tm, "start the dev server and tell me when it is up")
	tm.waitText("Worked for", codextest.Guard)
	defer u.model.Release()
	u.userTurn(tm, fakeprovider.MarkHang+" [mark:busy] meanwhile, look at this", "[mark:busy]")
	if err := os.WriteFile(up, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the READY match to be recorded", codextest.Guard, func() bool { return len(u.events("task.woke")) == 1 })
	const ready = "matched /^READY$/ on line 1: READY"
	requests := len(u.model.Requests())
	killed := u.pid()
	if err := syscall.Kill(killed, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The daemon was started by cbth mcp serve, which lives on (and
	// does not reap it): its lock going free says it is gone.
	waitFor(t, "the killed daemon to go", codextest.Guard, func() bool { return u.pid() == 0 })
	var tv watcherView
	u.ok(&tv, "task", "inspect", task) // a new daemon: the watcher is lost with the old one
	if tv.State != "lost" || u.model.Count(ready) != 0 || len(u.model.Requests()) != requests {
		t.Fatalf("after the restart: task %s, the wake seen %d times, %d new model requests", tv.State, u.model.Count(ready), len(u.model.Requests())-requests)
	}
	u.model.Release() // the user's turn ends: the thread is idle
	waitFor(t, "the wake and the end to be delivered", codextest.Guard, func() bool { return u.model.Count("interrupted: the daemon") > 0 })
	if u.model.Count(ready) != 1 || u.threadOfMarker(ready) != thread || u.model.Count("interrupted: the daemon") != 1 {
		t.Fatalf("delivered: the wake %d times, the end %d times", u.model.Count(ready), u.model.Count("interrupted: the daemon"))
	}
	if code := tm.quit(); code != 0 {
		t.Fatalf("codex exited %d", code)
	}
}
