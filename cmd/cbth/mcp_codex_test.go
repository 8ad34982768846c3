package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

// The agent inside a real Codex thread reaching cbth: the pinned Codex
// (`codex exec`, its own sandbox, approvals never), the fake model making
// the calls a model would, cbth installed into the Codex home by `cbth mcp
// install` (spec/mcp.md).

// execTurn runs one `codex exec` turn in the rig's project with prompt and
// returns the thread Codex started and what it printed. The agent's
// shell finds cbth on PATH.
func (r *codexRig) execTurn(prompt string) (thread, out string) {
	r.t.Helper()
	c := exec.Command(r.codex, "exec", "--skip-git-repo-check", "--json", prompt)
	c.Dir = r.project
	c.Env = append(codextest.Env(r.t, r.codexHome), "PATH="+filepath.Dir(cbthBin)+":"+os.Getenv("PATH"), "CBTH_HOME="+r.root)
	b, err := c.CombinedOutput()
	if err != nil {
		r.t.Fatalf("codex exec: %v\n%s", err, b)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var ev struct {
			Type     string `json:"type"`
			ThreadID string `json:"thread_id"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == "thread.started" {
			thread = ev.ThreadID
		}
	}
	if thread == "" {
		r.t.Fatalf("codex exec printed no thread.started:\n%s", b)
	}
	return thread, string(b)
}

// codexBottom appends to the Codex home's config.toml (tables go last).
func (r *codexRig) codexBottom(text string) {
	r.t.Helper()
	f, err := os.OpenFile(filepath.Join(r.codexHome, "config.toml"), os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("\n" + text); err != nil {
		r.t.Fatal(err)
	}
}

// toolOutputs are the tool results the model got back, in order.
func (r *codexRig) toolOutputs() []string {
	var out []string
	for _, q := range r.model.Requests() {
		var b struct {
			Input []struct {
				Type   string          `json:"type"`
				Output json.RawMessage `json:"output"`
			} `json:"input"`
		}
		_ = json.Unmarshal(q.Body, &b)
		if n := len(b.Input); n > 0 && b.Input[n-1].Type == "function_call_output" {
			var text string
			if json.Unmarshal(b.Input[n-1].Output, &text) != nil {
				text = string(b.Input[n-1].Output)
			}
			out = append(out, text)
		}
	}
	return out
}

// From a read-only thread with approvals never, the agent's task_run
// reaches cbth through the MCP server `cbth mcp install` configured: the
// first call, with no rule, is refused (the model reads why, nothing
// runs); the user adds the rule; the same call runs, for the calling
// thread, and its job completes. The skill is in the model's context.
func TestMCPFromCodex_TaskRunInAReadOnlyThread(t *testing.T) {
	t.Parallel()
	r := newCodexRig(t, "")
	r.codexTop("approval_policy = \"never\"\nsandbox_mode = \"read-only\"\n")
	var inst struct {
		Config   string   `json:"config"`
		Skill    string   `json:"skill"`
		Approved []string `json:"approved_tools"`
	}
	// task_run needs the user's approval: without it, Codex itself
	// refuses the call in a thread with approvals never, and cbth never
	// hears of it.
	r.ok(&inst, "mcp", "install", "--codex-home", r.codexHome)
	if inst.Config != filepath.Join(r.codexHome, "config.toml") || slices.Contains(inst.Approved, "task_run") {
		t.Fatalf("mcp install: %+v", inst)
	}
	unapproved := `[fake:mcp] mcp__cbth/task_run {"argv":["sh","-c","echo never"],"summary":"not approved"}`
	_, out := r.execTurn(unapproved)
	if outs := r.toolOutputs(); len(outs) != 1 || !strings.Contains(outs[0], "approval") || strings.Contains(outs[0], "task_not_allowed") {
		t.Fatalf("task_run without the user's approval, as the model got it: %q\n%s", outs, tail(out, 2000))
	}
	if _, err := os.Stat(filepath.Join(r.root, "cbth.db")); err == nil {
		for _, e := range r.exported() {
			if e.Type == "mcp.tool_called" {
				t.Fatalf("cbth heard of a call Codex refused: %v", e)
			}
		}
	}
	r.ok(&inst, "mcp", "install", "--codex-home", r.codexHome, "--approve", "task_run")
	if !slices.Contains(inst.Approved, "task_run") {
		t.Fatalf("mcp install --approve task_run: %+v", inst)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	call := `[fake:mcp] mcp__cbth/task_run {"argv":["sh","-c","touch ` + marker + `; echo all green"],"summary":"the tests"}`

	_, out = r.execTurn(call)
	outs := r.toolOutputs()[1:]
	if len(outs) != 1 || !strings.Contains(outs[0], "task_not_allowed") || !strings.Contains(outs[0], "task_allow") {
		t.Fatalf("the refused call's output, as the model got it: %q\n%s", outs, tail(out, 2000))
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a task with no rule ran")
	}

	r.config("codex_binary = \"" + r.codex + "\"\ncodex_home = \"" + r.codexHome + "\"\n[mcp]\ntask_allow = [[\"sh\", \"-c\", \"...\"]]\n")
	thread, out := r.execTurn(call)
	outs = r.toolOutputs()[1:]
	if len(outs) != 2 || !strings.Contains(outs[1], "in the background") || !strings.Contains(outs[1], "--bind-thread-id "+thread) {
		t.Fatalf("the accepted call's output: %q\n%s", outs, tail(out, 2000))
	}
	var jobs []struct {
		JobID  string `json:"job_id"`
		Status string `json:"status"`
		TaskID string `json:"task_id"`
	}
	waitFor(t, "the task's job to complete", codextest.Guard, func() bool {
		r.ok(&jobs, "job", "list", "--thread-id", thread)
		return len(jobs) == 1 && jobs[0].Status == "ready"
	})
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the allowed task did not run: %v", err)
	}
	var calls []logged
	for _, e := range r.exported() {
		if e.Type == "mcp.tool_called" {
			calls = append(calls, e)
		}
	}
	if len(calls) != 2 || calls[0].Payload["outcome"] != "refused" || calls[1].Payload["outcome"] != "accepted" ||
		calls[1].Stream.ID != thread || calls[1].Payload["sandbox_mode"] != "read-only" || calls[1].Payload["turn_id"] == nil {
		t.Fatalf("the calls recorded: %v", calls)
	}
	reqs := r.model.Requests()
	if !strings.Contains(string(reqs[0].Body), "- cbth: Hand long-running work") {
		t.Fatal("the cbth skill is not listed in the model's instructions")
	}
}

// A workspace-write thread with network access: the agent's own shell
// runs `cbth task run`, which takes the thread from CODEX_THREAD_ID and
// the target from the thread. A read-only thread's shell cannot reach
// the daemon: ESANDBOX (exit 69), naming the sandbox and the two ways
// through, never `cbth daemon stop`; nothing is appended.
func TestMCPFromCodex_TheShellInsideCodex(t *testing.T) {
	t.Parallel()
	r := newCodexRig(t, "")
	r.codexTop("approval_policy = \"never\"\nsandbox_mode = \"workspace-write\"\n")
	r.codexBottom("[sandbox_workspace_write]\nnetwork_access = true\n")
	r.ok(nil, "daemon", "status") // a daemon the user started: one started from the agent's shell would end with the command
	thread, out := r.execTurn(fakeprovider.MarkRun + " " + cbthBin + " task run -- sh -c 'echo from the shell'")
	if outs := r.toolOutputs(); len(outs) != 1 || !strings.Contains(outs[0], "from CODEX_THREAD_ID") {
		t.Fatalf("the shell's output: %q\n%s", outs, tail(out, 2000))
	}
	var jobs []struct {
		Status string `json:"status"`
		Target string `json:"target_kind"`
	}
	waitFor(t, "the shell's task to complete", codextest.Guard, func() bool {
		r.ok(&jobs, "job", "list", "--thread-id", thread)
		return len(jobs) == 1 && jobs[0].Status == "ready"
	})
	if jobs[0].Target != "cli" {
		t.Fatalf("the job's target is %q, want cli", jobs[0].Target)
	}

	ro := newCodexRig(t, "")
	ro.codexTop("approval_policy = \"never\"\nsandbox_mode = \"read-only\"\n")
	ro.ok(nil, "daemon", "status") // a daemon runs: the refusal is the sandbox's, not a missing daemon
	before := len(ro.exported())
	_, out = ro.execTurn(fakeprovider.MarkRun + " " + cbthBin + " job submit --task-kind ci --summary 'wait for CI'")
	outs := ro.toolOutputs()
	if len(outs) != 1 || !strings.Contains(outs[0], "ESANDBOX") || !strings.Contains(outs[0], "mcp__cbth") ||
		!strings.Contains(outs[0], "network_access") || strings.Contains(outs[0], "daemon stop") || !strings.Contains(outs[0], "69") {
		t.Fatalf("the sandboxed shell's output: %q\n%s", outs, tail(out, 2000))
	}
	if n := len(ro.exported()); n != before {
		t.Fatalf("the refused submit appended %d events", n-before)
	}
}
