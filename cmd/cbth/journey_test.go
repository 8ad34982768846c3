package main_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

// The user's own path (issue 23, spec/mcp.md): the codex npm installs, on
// PATH as `codex`; `cbth cli run --new-thread` in a terminal; a thread
// that is read-only with approvals never; the user allowed `sh -c` tasks.
// The user types one line. The model finds cbth's tools and calls
// task_run through the mcp__cbth namespace; the tool answers at once and
// the turn ends; when the command is done its result comes back into the
// same thread as a new turn, once. A command the user did not allow is
// refused: nothing runs, and the model reads why.
func TestJourney_TheAgentHandsItsWorkToCbth(t *testing.T) {
	t.Parallel()
	r := newWrapperRig(t)
	r.writeCodexConfig("codex", r.codexHome, deliveryConfig+"[mcp]\ntask_allow = [[\"sh\", \"-c\", \"...\"]]\n")
	// The user pre-approves task_run in the Codex home the shared
	// app-server runs with: its own overrides never do, and keep this.
	r.ok(nil, "mcp", "install", "--codex-home", r.codexHome, "--approve", "task_run", "--no-skill")
	r.model.Script("run the tests in the background",
		fakeprovider.Step{Query: "run a command in the background"},
		// The job prints what its command line does not hold: the
		// result the model reads is the job's output, not a quote of
		// its argv.
		fakeprovider.Step{Namespace: "mcp__cbth", Name: "task_run", Args: `{"argv":["sh","-c","sleep 1; echo all $((40+2))"],"summary":"the tests"}`})
	r.model.Script("install it system-wide",
		fakeprovider.Step{Namespace: "mcp__cbth", Name: "task_run", Args: `{"argv":["make","install"]}`})

	tm := r.startTerminal(r.project, "cli", "run", "--new-thread")
	tm.waitText("Ask Codex", codextest.Guard)
	r.userTurn(tm, "run the tests in the background", "run the tests in the background")

	// The tool answered with the job at once; the model's turn ended on it.
	var answer string
	waitFor(t, "task_run's answer to reach the model", codextest.Guard, func() bool {
		for _, o := range r.toolOutputs() {
			if strings.Contains(o, "job_id") {
				answer = o
				return true
			}
		}
		return false
	})
	if !strings.Contains(answer, "in the background") || !strings.Contains(answer, `"state":"queued"`) {
		t.Fatalf("task_run answered %s", answer)
	}
	thread := r.threadOfMarker("run the tests in the background")
	if s := r.session(thread); s.State != "live" {
		t.Fatalf("the new thread's session is %+v", s)
	}

	// The result: a new turn of the same thread, once.
	var jobs []struct {
		Status string `json:"status"`
		Batch  *struct {
			CloseReason string `json:"close_reason"`
		} `json:"batch"`
	}
	waitFor(t, "the result to be delivered", codextest.Guard, func() bool {
		r.ok(&jobs, "job", "list", "--thread-id", thread)
		return len(jobs) == 1 && jobs[0].Batch != nil && jobs[0].Batch.CloseReason == "delivered"
	})
	if n := r.model.Count("all 42"); n != 1 || r.threadOfMarker("all 42") != thread {
		t.Fatalf("the job's output reached the model %d times (thread %s), want once in %s", n, r.threadOfMarker("all 42"), thread)
	}
	// The TUI shows it; the capture keeps or loses the spaces the TUI
	// moves over, so they are left out of the comparison.
	waitFor(t, "the terminal to show all 42", codextest.Guard, func() bool {
		return strings.Contains(strings.ReplaceAll(tm.screen(), " ", ""), "all42")
	})

	// The npm wrapper served: the daemon started the codex on PATH, and
	// the app-server the delivery went through runs in that process's
	// group (through a child where this Node makes the wrapper fork).
	st := r.events("appserver.started")
	if len(st) != 1 || st[0].Payload["codex_binary"] != r.codex {
		t.Fatalf("app-servers started: %+v, want one of the npm wrapper on PATH (%s)", st, r.codex)
	}
	if group := wrapperServed(t, filepath.Join(r.root, "run", "codex", "codex.sock")); group != int(st[0].Payload["pid"].(float64)) {
		t.Fatalf("the app-server is served in group %d, not in the group of the codex the daemon started (%v)", group, st[0].Payload["pid"])
	}

	// Not allowed: refused, nothing runs, the model reads the refusal.
	r.userTurn(tm, "install it system-wide", "install it system-wide")
	waitFor(t, "the refusal to reach the model", codextest.Guard, func() bool {
		for _, o := range r.toolOutputs() {
			if strings.Contains(o, "task_not_allowed") {
				return strings.Contains(o, "task_allow")
			}
		}
		return false
	})
	var tasks []any
	r.ok(&tasks, "task", "list")
	if len(tasks) != 1 {
		t.Fatalf("%d tasks, want only the allowed one", len(tasks))
	}
	if code := tm.quit(); code != 0 {
		t.Fatalf("cbth cli run exited %d", code)
	}
}
