package main_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cbth-dev/cbth/adapters/codex/mcpconfig"
)

// The agent's MCP tools through the real binary: `cbth mcp serve` started
// as Codex starts it (a child on stdio, CBTH_HOME from its env entry),
// spoken to by the official SDK's client, against a real daemon
// (spec/mcp.md).

// mcpSession starts `cbth mcp serve` for h and connects to it.
func (h *homeDir) mcpSession(dir string) *sdk.ClientSession {
	h.t.Helper()
	cmd := exec.Command(cbthBin, "mcp", "serve")
	cmd.Env = append(os.Environ(), h.env...)
	cmd.Dir = dir
	c := sdk.NewClient(&sdk.Implementation{Name: "cbth-test", Version: "0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		h.t.Fatalf("connect to cbth mcp serve: %v", err)
	}
	h.t.Cleanup(func() { s.Close() })
	return s
}

// codexMeta is the _meta Codex 0.169 puts on a tools/call
// (research: codex-mcp F5), for thread.
func codexMeta(thread string) sdk.Meta {
	return sdk.Meta{"threadId": thread, "callId": "call_" + thread[:4], "x-codex-turn-metadata": map[string]any{
		"thread_id": thread, "turn_id": "turn-1", "sandbox_mode": "read-only", "codex_version": "0.169.0"}}
}

type toolAnswer struct {
	IsError bool
	Text    string
	Data    map[string]any
}

func callTool(t *testing.T, s *sdk.ClientSession, meta sdk.Meta, name string, args any) toolAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.CallTool(ctx, &sdk.CallToolParams{Meta: meta, Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	a := toolAnswer{IsError: res.IsError}
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			a.Text += tc.Text
		}
	}
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &a.Data)
	}
	return a
}

func (a toolAnswer) code() string {
	if e, ok := a.Data["error"].(map[string]any); ok {
		s, _ := e["code"].(string)
		return s
	}
	return ""
}

// exported is every event of h's log, as `events export` prints them.
func (h *homeDir) exported() []logged {
	h.t.Helper()
	return h.events("*")
}

// The tools Codex lists: their names, which are read-only, and closed
// input schemas.
func TestMCPServe_ToolList(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	s := h.mcpSession(t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	readOnly := map[string]bool{}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		readOnly[tool.Name] = tool.Annotations != nil && tool.Annotations.ReadOnlyHint
		b, _ := json.Marshal(tool.InputSchema)
		var schema map[string]any
		_ = json.Unmarshal(b, &schema)
		if schema["type"] != "object" || schema["additionalProperties"] != false {
			t.Errorf("%s: input schema is not a closed object: %s", tool.Name, b)
		}
		if !strings.HasPrefix(tool.Name, "desktop_") && strings.Contains(string(b), "thread") {
			t.Errorf("%s: the schema offers a thread argument: %s", tool.Name, b)
		}
	}
	slices.Sort(names)
	want := []string{"desktop_bridge_preflight", "desktop_claim_next_ready", "desktop_list_arm_pending", "desktop_list_pause_due",
		"desktop_note_arm", "desktop_note_arm_pending", "desktop_note_boundary_crossed", "desktop_note_paused", "desktop_read_artifact",
		"desktop_validate_mcp", "job_cancel", "job_list", "job_status", "job_submit", "task_list", "task_output", "task_run", "watch_start", "watch_stop"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	// What acts needs an approval in Codex's config (cbth mcp install
	// writes one for each); what only reads runs under approvals never.
	for name, ro := range readOnly {
		if ro == slices.Contains(mcpconfig.ApprovalTools, name) {
			t.Errorf("%s: readOnlyHint %v, yet approved by install: %v", name, ro, !ro)
		}
	}
}

// job_submit binds the job to the thread in _meta, picks the cli target
// for a thread without a Desktop binding, says when the result comes, and
// records the call; a retry with the same idempotency key returns the
// same job and appends nothing. task_run runs an allowed command for the
// calling thread; the job completes from its exit. Status and list show
// only the caller's jobs; cancel of another thread's job is refused and
// recorded, and changes nothing.
func TestMCPServe_JobsForTheCallingThread(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.config("[mcp]\ntask_allow = [[\"sh\", \"-c\", \"...\"]]\n")
	work := t.TempDir()
	s := h.mcpSession(work)
	const thread = "01a2aaaa-0000-7000-8000-000000000001"
	meta := codexMeta(thread)

	sub := callTool(t, s, meta, "job_submit", map[string]any{"task_kind": "ci", "summary": "CI on #42", "idempotency_key": "ci-42"})
	if sub.IsError {
		t.Fatalf("job_submit: %s", sub.Text)
	}
	jobID, _ := sub.Data["job_id"].(string)
	del, _ := sub.Data["delivery"].(map[string]any)
	if jobID == "" || sub.Data["target_kind"] != "cli" || sub.Data["source_thread_id"] != thread || del["when"] != "when_opened" ||
		!strings.Contains(sub.Text, "cbth cli run --bind-thread-id "+thread) {
		t.Fatalf("job_submit answered %s\n%v", sub.Text, sub.Data)
	}
	before := len(h.exported())
	again := callTool(t, s, meta, "job_submit", map[string]any{"task_kind": "ci", "summary": "CI on #42", "idempotency_key": "ci-42"})
	if again.IsError || again.Data["job_id"] != jobID || again.Data["deduplicated"] != true {
		t.Fatalf("retried job_submit: %s %v", again.Text, again.Data)
	}
	if n := len(h.exported()); n != before {
		t.Fatalf("the retried submit appended %d events", n-before)
	}

	run := callTool(t, s, meta, "task_run", map[string]any{"argv": []string{"sh", "-c", "pwd; echo all green"}, "summary": "the tests"})
	if run.IsError {
		t.Fatalf("task_run: %s", run.Text)
	}
	taskJob, _ := run.Data["job_id"].(string)
	// The reply quotes the command as task list does: "sh -c pwd; echo
	// all green" would read as two commands.
	if run.Data["task_id"] == "" || taskJob == "" || !strings.Contains(run.Text, "end your turn") || !strings.Contains(run.Text, `: sh -c "pwd; echo all green".`) {
		t.Fatalf("task_run answered %s %v", run.Text, run.Data)
	}
	var job struct {
		Status        string `json:"status"`
		Thread        string `json:"source_thread_id"`
		ResultSummary string `json:"result_summary"`
	}
	waitFor(t, "the task's job to complete", 30*time.Second, func() bool {
		h.ok(&job, "job", "query", taskJob)
		return job.Status == "ready"
	})
	var task struct {
		Tail string `json:"output_tail"`
	}
	h.ok(&task, "task", "inspect", run.Data["task_id"].(string))
	if job.Thread != thread || !strings.Contains(task.Tail, "all green") || !strings.Contains(task.Tail, work) {
		t.Fatalf("the task's job %+v, output %q (want it run in %s)", job, task.Tail, work)
	}

	other := h.submit("01a2bbbb-0000-7000-8000-000000000002")
	st := callTool(t, s, meta, "job_status", map[string]any{"job_id": taskJob})
	if st.IsError || st.Data["status"] != "ready" {
		t.Fatalf("job_status: %s", st.Text)
	}
	if st := callTool(t, s, meta, "job_status", map[string]any{"job_id": other}); st.code() != "thread_mismatch" {
		t.Fatalf("job_status of another thread's job: %s", st.Text)
	}
	list := callTool(t, s, meta, "job_list", map[string]any{})
	jobs, _ := list.Data["jobs"].([]any)
	if list.IsError || len(jobs) != 2 {
		t.Fatalf("job_list: %s", list.Text)
	}

	before = len(h.exported())
	if c := callTool(t, s, meta, "job_cancel", map[string]any{"job_id": other}); c.code() != "thread_mismatch" {
		t.Fatalf("job_cancel of another thread's job: %s", c.Text)
	}
	var o struct{ Status string }
	h.ok(&o, "job", "query", other)
	if o.Status != "running" {
		t.Fatalf("the other thread's job is %s", o.Status)
	}
	added := h.exported()[before:]
	if len(added) != 1 || added[0].Type != "mcp.tool_called" || added[0].Payload["outcome"] != "refused" || added[0].Payload["code"] != "thread_mismatch" {
		t.Fatalf("a refused cancel appended %v", added)
	}
	if c := callTool(t, s, meta, "job_cancel", map[string]any{"job_id": jobID, "reason": "not needed"}); c.IsError || c.Data["status"] != "cancelled" {
		t.Fatalf("job_cancel: %s", c.Text)
	}

	// The log: every acting call is an mcp.tool_called of the thread's
	// stream, by the agent, with the job (and task) it made.
	var calls []string
	for _, e := range h.exported() {
		if e.Type == "mcp.tool_called" {
			if e.Stream.ID != thread || e.Actor != "agent" {
				t.Errorf("call record on %s by %s", e.Stream.ID, e.Actor)
			}
			calls = append(calls, e.Payload["tool"].(string)+":"+e.Payload["outcome"].(string))
		}
		if e.Type == "job.submitted" && e.Stream.ID == jobID && e.Actor != "agent" {
			t.Errorf("job.submitted by %s, want agent", e.Actor)
		}
	}
	want := []string{"job_submit:accepted", "task_run:accepted", "job_cancel:refused", "job_cancel:accepted"}
	if !slices.Equal(calls, want) {
		t.Fatalf("recorded calls %v, want %v", calls, want)
	}
}

// Bad input: each gets a tool error with a stable code; nothing is
// appended and nothing runs. A command one element off a rule is a
// refusal by policy: no job, no task, no process, and one record of
// the refusal, with the command, so the operator sees what was tried.
func TestMCPServe_BadInputChangesNothing(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	marker := filepath.Join(t.TempDir(), "ran")
	h.config("[mcp]\ntask_allow = [[\"touch\", \"" + marker + "\"], [\"make\", \"test\"]]\n")
	s := h.mcpSession(t.TempDir())
	const thread = "01a2cccc-0000-7000-8000-000000000003"
	meta := codexMeta(thread)
	h.submit("warm-up") // the daemon is up and the log has a head
	big := strings.Repeat("x", 1<<20)
	for _, c := range []struct {
		name string
		meta sdk.Meta
		tool string
		args any
		code string
	}{
		{"unknown tool", meta, "job_delete", map[string]any{}, "ENOENT"},
		{"missing arguments", meta, "job_submit", map[string]any{}, "EINVAL"},
		{"missing summary", meta, "job_submit", map[string]any{"task_kind": "ci"}, "EINVAL"},
		{"wrong type", meta, "job_submit", map[string]any{"task_kind": 7, "summary": "x"}, "EINVAL"},
		{"unknown argument", meta, "job_submit", map[string]any{"task_kind": "ci", "summary": "x", "cwd": "/"}, "EINVAL"},
		{"no thread in _meta", nil, "job_submit", map[string]any{"task_kind": "ci", "summary": "x"}, "thread_unidentified"},
		{"two threads in _meta", sdk.Meta{"threadId": thread, "x-codex-turn-metadata": map[string]any{"thread_id": "another"}}, "job_list", map[string]any{}, "thread_unidentified"},
		{"argv with an empty command", meta, "task_run", map[string]any{"argv": []string{"", "x"}}, "EINVAL"},
		{"argv with a NUL", meta, "task_run", map[string]any{"argv": []string{"touch", marker + "\x00"}}, "EINVAL"},
		{"argv missing", meta, "task_run", map[string]any{"summary": "x"}, "EINVAL"},
		{"bad timeout", meta, "task_run", map[string]any{"argv": []string{"touch", marker}, "timeout": "soon"}, "EINVAL"},
		{"a 1 MB summary", meta, "job_submit", map[string]any{"task_kind": "ci", "summary": big}, "EMSGSIZE"},
		{"job of nobody", meta, "job_status", map[string]any{"job_id": "01a2dddd-0000-7000-8000-000000000009"}, "ENOENT"},
	} {
		before := len(h.exported())
		a := callTool(t, s, c.meta, c.tool, c.args)
		if !a.IsError || a.code() != c.code || !strings.HasPrefix(a.Text, c.code+": ") {
			t.Errorf("%s: answered %v %q (%v), want the error %s", c.name, a.IsError, clipText(a.Text), a.Data, c.code)
		}
		if n := len(h.exported()); n != before {
			t.Errorf("%s: appended %d events", c.name, n-before)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a refused task ran")
	}

	// Off a rule by one element, or naming another thread: refused by
	// policy, recorded, nothing else.
	for _, c := range []struct {
		name string
		tool string
		args any
		code string
	}{
		{"one element off a rule", "task_run", map[string]any{"argv": []string{"make", "tests"}}, "task_not_allowed"},
		{"one element more than a rule's prefix differs", "task_run", map[string]any{"argv": []string{"touch", marker + "x"}}, "task_not_allowed"},
		{"another thread named", "job_submit", map[string]any{"task_kind": "ci", "summary": "x", "thread_id": "someone-else"}, "thread_mismatch"},
	} {
		before := len(h.exported())
		a := callTool(t, s, meta, c.tool, c.args)
		if !a.IsError || a.code() != c.code {
			t.Errorf("%s: answered %q, want %s", c.name, clipText(a.Text), c.code)
			continue
		}
		added := h.exported()[before:]
		if len(added) != 1 || added[0].Type != "mcp.tool_called" || added[0].Payload["code"] != c.code {
			t.Errorf("%s: appended %v, want one refusal record", c.name, added)
		}
		if c.code == "task_not_allowed" && (!strings.Contains(a.Text, "task_allow") || !strings.Contains(a.Text, filepath.Join(h.root, "config.toml"))) {
			t.Errorf("%s: the refusal does not name the rule to add: %s", c.name, a.Text)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a refused task ran")
	}
	var tasks []any
	h.ok(&tasks, "task", "list")
	if len(tasks) != 0 {
		t.Fatalf("tasks were made: %v", tasks)
	}
}

func clipText(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// In an agent's shell inside Codex (CODEX_THREAD_ID set) the CLI takes
// the thread from it, and never starts a daemon there: one started from a
// tool call would end with the call. With none running, the error says
// so and what to do; nothing is started.
func TestCLIInsideCodexShell(t *testing.T) {
	t.Parallel()
	const thread = "01a2eeee-0000-7000-8000-000000000005"
	h := newHome(t, "CODEX_THREAD_ID="+thread)
	r := h.run("job", "submit", "--task-kind", "ci", "--summary", "x", "--json")
	if r.code != 69 || !strings.Contains(r.stdout, `"EHOSTDOWN"`) || !strings.Contains(r.stdout, "MCP tools") || strings.Contains(r.stdout, "daemon stop") {
		t.Fatalf("with no daemon: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if h.pid() != 0 {
		t.Fatal("a daemon was started from inside Codex")
	}
	start := newHome(t) // the same home, outside Codex
	start.root, start.env = h.root, []string{"CBTH_HOME=" + h.root, "HOME=" + t.TempDir()}
	start.ok(nil, "daemon", "status")
	var sub struct {
		JobID string `json:"job_id"`
	}
	r = h.run("job", "submit", "--task-kind", "ci", "--summary", "x", "--json")
	if r.code != 0 || !strings.Contains(r.stderr, "thread "+thread+" (from CODEX_THREAD_ID)") {
		t.Fatalf("submit in a Codex shell: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	_ = json.Unmarshal([]byte(r.stdout), &sub)
	var j struct {
		Thread string `json:"source_thread_id"`
		Target string `json:"target_kind"`
	}
	h.ok(&j, "job", "query", sub.JobID)
	if j.Thread != thread || j.Target != "cli" {
		t.Fatalf("the job %+v, want thread %s and target cli", j, thread)
	}
	// Outside Codex and with no flag, there is no thread to take.
	r = start.run("job", "submit", "--task-kind", "ci", "--summary", "x", "--json")
	if r.code != 2 || !strings.Contains(r.stdout, "CODEX_THREAD_ID") {
		t.Fatalf("submit with no thread: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A thread bound to a Desktop heartbeat: job_submit from it targets
// desktop and says the result comes through the heartbeat; unbound, the
// same thread's next job targets cli.
func TestMCPServe_DesktopThreadTargetsDesktop(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.validate()
	const thread = "01a2ffff-0000-7000-8000-000000000006"
	h.bind(thread, "automation-1")
	s := h.mcpSession(t.TempDir())
	a := callTool(t, s, codexMeta(thread), "job_submit", map[string]any{"task_kind": "review", "summary": "a review of #7"})
	del, _ := a.Data["delivery"].(map[string]any)
	if a.IsError || a.Data["target_kind"] != "desktop" || del["when"] != "next_heartbeat" {
		t.Fatalf("job_submit from a Desktop thread: %s %v", a.Text, a.Data)
	}
	h.ok(nil, "desktop", "binding", "unbind", "--source-thread-id", thread, "--delete-automation", "true")
	if a := callTool(t, s, codexMeta(thread), "job_submit", map[string]any{"task_kind": "review", "summary": "again"}); a.Data["target_kind"] != "cli" {
		t.Fatalf("job_submit from the unbound thread: %s", a.Text)
	}
}
