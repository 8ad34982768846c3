package main_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/mcpserver"
)

// What task_run may run is what the user wrote, whole (spec/mcp.md,
// "task_run is allowed only by the user"), through the real binary.

// The review's three escapes of the spec's own example rule
// ["make", "test"]: an option that evaluates make code, another makefile,
// and a SHELL assignment. Each ran a command of the model's choosing
// under prefix rules. Now each is refused by policy: nothing runs (no
// task, the probe file never appears), one refusal is recorded with the
// command, and the answer names the smallest rule that would allow
// exactly that call and says what allowing means. `make test` itself
// still runs.
func TestMCPRules_MakeEscapesAreRefused(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.config("[mcp]\ntask_allow = [[\"make\", \"test\"]]\n")
	work := t.TempDir()
	pwned := filepath.Join(work, "pwned")
	evil := filepath.Join(work, "evil.mk")
	shell := filepath.Join(work, "evilsh")
	for name, body := range map[string]string{
		"Makefile": "test:\n\t@echo tests pass\n",
		evil:       "test:\n\ttouch " + pwned + "\n",
		shell:      "#!/bin/sh\ntouch " + pwned + "\n",
	} {
		if err := os.WriteFile(filepath.Join(work, filepath.Base(name)), []byte(body), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s := h.mcpSession(work)
	const thread = "01a2eeee-0000-7000-8000-000000000034"
	meta := codexMeta(thread)
	h.submit("warm-up")
	for _, argv := range [][]string{
		{"make", "test", "--eval=$(shell id -u > " + pwned + ")"},
		{"make", "test", "-f", evil},
		{"make", "test", "SHELL=" + shell},
	} {
		before := len(h.exported())
		a := callTool(t, s, meta, "task_run", map[string]any{"argv": argv})
		if a.code() != "task_not_allowed" {
			t.Errorf("%q: answered %s", argv, clipText(a.Text))
			continue
		}
		// The smallest rule: exactly this command, as TOML.
		q := make([]string, len(argv))
		for i, s := range argv {
			q[i] = `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
		}
		smallest := "[" + strings.Join(q, ", ") + "]"
		for _, want := range []string{smallest, "outside Codex's sandbox", "with the user's access", "matches that command exactly", filepath.Join(h.root, "config.toml")} {
			if !strings.Contains(a.Text, want) {
				t.Errorf("%q: the refusal lacks %q:\n%s", argv, want, a.Text)
			}
		}
		added := h.exported()[before:]
		if len(added) != 1 || added[0].Type != "mcp.tool_called" || added[0].Payload["code"] != "task_not_allowed" || len(added[0].Payload["argv"].([]any)) != len(argv) {
			t.Errorf("%q: appended %v, want one refusal record with the command", argv, added)
		}
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Fatal("an escape ran its command")
	}
	var tasks []any
	h.ok(&tasks, "task", "list")
	if len(tasks) != 0 {
		t.Fatalf("refused calls made tasks: %v", tasks)
	}

	run := callTool(t, s, meta, "task_run", map[string]any{"argv": []string{"make", "test"}})
	if run.IsError || !slices.Equal(toStrings(run.Data["allowed_by"]), []string{"make", "test"}) {
		t.Fatalf("make test itself: %s %v", run.Text, run.Data)
	}
	waitTaskJob(t, h, run)
}

// Named tasks: the user defines one; the model lists them, runs one by
// its name with the arguments it takes, and is refused (with the task's
// smallest widening) for an option it does not name. Bad input of the
// issue's table: each refused with a stable code, nothing appended
// beyond the refusal's own record, no process started.
func TestMCPRules_NamedTasksAndBadInput(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	probe := filepath.Join(t.TempDir(), "ran")
	good := "[mcp]\ntask_allow = [[\"touch\", \"" + probe + "\"]]\n\n" +
		"[mcp.tasks.unit]\nargv = [\"sh\", \"-c\", \"echo unit \\\"$@\\\"\", \"unit\"]\nargs = [\"-v\", \"...\"]\nsummary = \"the unit tests\"\n"
	h.config(good)
	s := h.mcpSession(t.TempDir())
	const thread = "01a2ffff-0000-7000-8000-000000000034"
	meta := codexMeta(thread)
	h.submit("warm-up")

	list := callTool(t, s, meta, "task_list", map[string]any{})
	tasks, _ := list.Data["tasks"].([]any)
	if list.IsError || len(tasks) != 1 || !strings.Contains(list.Text, "unit: sh -c") || !strings.Contains(list.Text, "the unit tests") {
		t.Fatalf("task_list: %s %v", list.Text, list.Data)
	}
	run := callTool(t, s, meta, "task_run", map[string]any{"task": "unit", "args": []string{"-v", "pkg"}})
	if run.IsError || run.Data["task"] != "unit" {
		t.Fatalf("the named task: %s %v", run.Text, run.Data)
	}
	if tail := waitTaskJob(t, h, run); !strings.Contains(tail, "unit -v pkg") {
		t.Fatalf("the named task printed %q", tail)
	}

	before := len(h.exported())
	a := callTool(t, s, meta, "task_run", map[string]any{"task": "unit", "args": []string{"-exec=sh"}})
	if a.code() != "task_not_allowed" || !strings.Contains(a.Text, "[mcp.tasks.unit]") || !strings.Contains(a.Text, `args = ["-v", "...", "-exec=sh"]`) {
		t.Fatalf("an option the task does not name: %s", a.Text)
	}
	if added := h.exported()[before:]; len(added) != 1 || added[0].Payload["task"] != "unit" || added[0].Payload["code"] != "task_not_allowed" {
		t.Fatalf("the refusal recorded %v", added)
	}

	long := strings.Repeat("x", mcpserver.MaxArg+1)
	for _, c := range []struct {
		name   string
		config string // replaces the configuration first when set
		args   map[string]any
		code   string
		record bool // a refusal by policy: recorded once
	}{
		{"a named task that does not exist", "", map[string]any{"task": "nope"}, "ENOENT", false},
		{"extra arguments to an exact rule", "", map[string]any{"argv": []string{"touch", probe, probe + "2"}}, "task_not_allowed", true},
		{"argv[0] as a path where the rule names a program", "", map[string]any{"argv": []string{"/usr/bin/touch", probe}}, "task_not_allowed", true},
		{"an over-long argument", "", map[string]any{"argv": []string{"touch", probe, long}}, "EMSGSIZE", false},
		{"an over-long named task argument", "", map[string]any{"task": "unit", "args": []string{long}}, "EMSGSIZE", false},
		{"both task and argv", "", map[string]any{"task": "unit", "argv": []string{"touch", probe}}, "EINVAL", false},
		{"a rule with an empty element", "[mcp]\ntask_allow = [[\"touch\", \"\"]]\n", map[string]any{"argv": []string{"touch", probe}}, "ENOTCONF", false},
		{"a rule with ... in the middle", "[mcp]\ntask_allow = [[\"touch\", \"...\", \"" + probe + "\"]]\n", map[string]any{"argv": []string{"touch", probe}}, "ENOTCONF", false},
		{"a rule with a non-string", "[mcp]\ntask_allow = [[\"touch\", 1]]\n", map[string]any{"argv": []string{"touch", probe}}, "ENOTCONF", false},
	} {
		if c.config != "" {
			h.config(c.config)
		}
		before := len(h.exported())
		a := callTool(t, s, meta, "task_run", c.args)
		if a.code() != c.code {
			t.Errorf("%s: answered %s, want %s", c.name, clipText(a.Text), c.code)
		}
		added := h.exported()[before:]
		if c.record && (len(added) != 1 || added[0].Payload["code"] != c.code) || !c.record && len(added) != 0 {
			t.Errorf("%s: appended %v", c.name, added)
		}
		h.config(good)
	}
	if _, err := os.Stat(probe); err == nil {
		t.Fatal("a refused call ran")
	}
	var all []any
	h.ok(&all, "task", "list")
	if len(all) != 1 {
		t.Fatalf("%d tasks, want only the named task's run", len(all))
	}
}

// waitTaskJob waits for the job of a task_run answer to be ready and
// returns the task's output tail.
func waitTaskJob(t *testing.T, h *homeDir, run toolAnswer) string {
	t.Helper()
	jobID, _ := run.Data["job_id"].(string)
	var job struct {
		Status string `json:"status"`
	}
	waitFor(t, "the task's job to complete", 30*time.Second, func() bool {
		h.ok(&job, "job", "query", jobID)
		return job.Status == "ready"
	})
	var task struct {
		Tail string `json:"output_tail"`
	}
	h.ok(&task, "task", "inspect", run.Data["task_id"].(string))
	return task.Tail
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, len(l))
	for i, x := range l {
		out[i], _ = x.(string)
	}
	return out
}
