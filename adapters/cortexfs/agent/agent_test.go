package agent_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/agent"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/socket"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tool"
	"github.com/cbth-dev/cbth/internal/errs"
)

// script is a model (the driver, the loop's edge) that answers each
// request with the next step's events, and keeps the requests.
type script struct {
	steps    [][]stream.Event
	requests []driver.Request
	err      error
}

func (s *script) Stream(_ context.Context, req driver.Request, out stream.Sink) error {
	s.requests = append(s.requests, req)
	if s.err != nil {
		return s.err
	}
	step := s.steps[0]
	if len(s.steps) > 1 {
		s.steps = s.steps[1:]
	}
	for _, e := range step {
		if err := out.Emit(e); err != nil {
			return err
		}
	}
	return nil
}

func call(id, name, args string) stream.Event {
	return stream.Event{Type: stream.TypeToolCall, CallID: id, Name: name, Arguments: json.RawMessage(args)}
}

func text(s string) stream.Event { return stream.Event{Type: stream.TypeDelta, Text: s} }

func loop(t *testing.T, model driver.Driver, tools ...string) *agent.Loop {
	t.Helper()
	dir := t.TempDir()
	root, err := agent.OpenRoot(filepath.Join(dir, "root"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	os.WriteFile(filepath.Join(dir, "root", "notes.txt"), []byte("the notes"), 0o600)
	os.Mkdir(filepath.Join(dir, "root", "work"), 0o700)
	return &agent.Loop{Name: "coder", Driver: model, Tools: tools, Request: driver.Request{Model: "debug/m"},
		Env: tool.Env{Root: root, RootDir: filepath.Join(dir, "root"), Cwd: "/"}}
}

// The loop runs the calls the agent's tools allow, refuses the others
// with EACCES as the call's result (the run goes on), feeds every result
// back to the model in the next request, and ends at the first answer
// without calls; what it returns is what the run added to the history.
func TestLoopRunsAllowedCallsAndRefusesTheRest(t *testing.T) {
	model := &script{steps: [][]stream.Event{
		{text("let me look"), call("c1", tool.FSRead, `{"path":"notes.txt"}`), call("c2", tool.ShellExec, `{"command":"true"}`)},
		{text("done: the notes")},
	}}
	l := loop(t, model, tool.FSRead, tool.FSList)
	var emitted []stream.Event
	added, err := l.Task(context.Background(), "read my notes", func(e stream.Event) error { emitted = append(emitted, e); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(model.requests) != 2 {
		t.Fatalf("%d model calls, want 2", len(model.requests))
	}
	var roles []string
	for _, m := range added {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, " ") != "assistant tool tool assistant" {
		t.Fatalf("added %v", roles)
	}
	if added[0].Content != "let me look" || len(added[0].ToolCalls) != 2 || added[3].Content != "done: the notes" {
		t.Errorf("the assistant's messages %+v", added)
	}
	if added[1].CallID != "c1" || !strings.Contains(added[1].Content, "the notes") {
		t.Errorf("the allowed call's result %+v", added[1])
	}
	var refused agent.ToolError
	if err := json.Unmarshal([]byte(added[2].Content), &refused); err != nil || refused.Error.Code != errs.EACCES ||
		!strings.Contains(refused.Error.Message, "may not run tool shell.exec") {
		t.Errorf("the refused call's result %q (%v)", added[2].Content, err)
	}
	second := model.requests[1].Messages
	if len(second) != 4 || second[0].Content != "read my notes" || second[2].Role != driver.RoleTool || second[3].CallID != "c2" {
		t.Errorf("the second request's messages %+v", second)
	}
	if defs := model.requests[0].Tools; len(defs) != 2 || defs[0].Name != tool.FSRead || defs[1].Name != tool.FSList {
		t.Errorf("the tools offered %+v", defs)
	}
	var results int
	for _, e := range emitted {
		if e.Type == stream.TypeMessage && e.Role == driver.RoleTool {
			results++
		}
	}
	if results != 2 {
		t.Errorf("%d tool results emitted, want 2", results)
	}
}

// The loop's failures: a model that keeps calling tools stops at
// MaxSteps (ETIMEDOUT); a driver that frames the run itself is a bug
// (EINTERNAL); the driver's own error ends the run; a cancelled context
// stops before the next call runs.
func TestLoopFailures(t *testing.T) {
	forever := &script{steps: [][]stream.Event{{call("c", tool.FSList, `{"path":"/"}`)}}}
	l := loop(t, forever, tool.FSList)
	l.MaxSteps = 3
	if _, err := l.Task(context.Background(), "go", func(stream.Event) error { return nil }); errs.CodeOf(err) != errs.ETIMEDOUT || len(forever.requests) != 3 {
		t.Errorf("a model that never answers: %v after %d calls", err, len(forever.requests))
	}
	framing := &script{steps: [][]stream.Event{{{Type: stream.TypeDone}}}}
	if _, err := loop(t, framing).Task(context.Background(), "go", func(stream.Event) error { return nil }); errs.CodeOf(err) != errs.EINTERNAL {
		t.Errorf("a driver emitting done: %v", err)
	}
	failing := &script{err: errs.New(errs.EAGAIN, "rate limited")}
	if _, err := loop(t, failing).Task(context.Background(), "go", func(stream.Event) error { return nil }); errs.CodeOf(err) != errs.EAGAIN {
		t.Errorf("the driver's error: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancelling := &script{steps: [][]stream.Event{{call("c", tool.FSList, `{"path":"/"}`)}}}
	l = loop(t, cancelling, tool.FSList)
	_, err := l.Task(ctx, "go", func(e stream.Event) error {
		if e.Type == stream.TypeToolCall {
			cancel()
		}
		return nil
	})
	if err == nil || len(cancelling.requests) != 1 {
		t.Errorf("cancelled during the model's answer: %v after %d calls", err, len(cancelling.requests))
	}
}

// A session's cwd must be a directory inside the root: empty is the
// agent's default, a missing one ENOENT, one outside EACCES; an agent
// without a root cannot take one.
func TestCheckCwd(t *testing.T) {
	l := loop(t, &script{}, tool.FSRead)
	l.Env.Cwd = "/work"
	for _, c := range []struct {
		cwd, want string
		code      errs.Code
	}{
		{"", "/work", ""},
		{"/", "/", ""},
		{"/work", "/work", ""},
		{"/missing", "", errs.ENOENT},
		{"/../..", "", errs.EACCES},
		{"/notes.txt", "", ""},
	} {
		got, err := l.CheckCwd(c.cwd)
		if c.cwd == "/notes.txt" {
			if err == nil {
				t.Errorf("a file as cwd: %q", got)
			}
			continue
		}
		if errs.CodeOf(err) != c.code || (c.code == "" && got != c.want) {
			t.Errorf("cwd %q: %q, %v; want %q %q", c.cwd, got, err, c.want, c.code)
		}
	}
	none := &agent.Loop{Name: "x"}
	if _, err := none.CheckCwd("/"); errs.CodeOf(err) != errs.ENOTCONF {
		t.Errorf("no root: %v", err)
	}
}

// jobs records the jobs cbth.job.submit hands the daemon.
type jobs struct{ got []tool.Job }

func (j *jobs) Submit(_ context.Context, job tool.Job) (string, error) {
	j.got = append(j.got, job)
	return "job-1", nil
}

// A run in a private session sends its jobs' results back to that
// session (agent/<name>/<session>); a shared session has no thread of
// its own, so a job needs one named. The session's cwd is where its
// tools run.
func TestRunSetsTheThreadAndCwd(t *testing.T) {
	submit := call("j", tool.JobSubmit, `{"summary":"wait for CI"}`)
	for _, c := range []struct {
		scope, thread string
	}{{"private", "agent/coder/alpha"}, {"", "agent/coder/alpha"}, {"shared", ""}} {
		model := &script{steps: [][]stream.Event{{call("c", tool.FSList, `{"path":"."}`), submit}, {text("ok")}}}
		l := loop(t, model, tool.FSList, tool.JobSubmit)
		sink := &jobs{}
		l.Env.Jobs = sink
		os.WriteFile(filepath.Join(l.Env.RootDir, "work", "here.txt"), nil, 0o600)
		added, err := l.Run(context.Background(), socket.Run{Session: "alpha", Scope: c.scope, Cwd: "/work"},
			[]driver.Message{{Role: driver.RoleUser, Content: "list"}}, func(stream.Event) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if len(added) != 4 || !strings.Contains(added[1].Content, "here.txt") {
			t.Fatalf("scope %q: the listing of the session's cwd: %+v", c.scope, added)
		}
		switch {
		case c.thread == "" && (len(sink.got) != 0 || !strings.Contains(added[2].Content, "EINVAL")):
			t.Errorf("scope %q: a job without a thread of its own went to %+v (%s)", c.scope, sink.got, added[2].Content)
		case c.thread != "" && (len(sink.got) != 1 || sink.got[0].ThreadID != c.thread || sink.got[0].TargetKind != "ctx"):
			t.Errorf("scope %q: the job %+v, want its result for %s", c.scope, sink.got, c.thread)
		}
	}
}

// The tools offered are the agent's known ones, in its order; the acting
// ones are those that change things.
func TestToolDefsAndActing(t *testing.T) {
	l := &agent.Loop{Tools: []string{tool.FSWrite, "no.such.tool", tool.FSRead, tool.ShellExec}}
	var names []string
	for _, d := range l.ToolDefs() {
		names = append(names, d.Name)
	}
	if strings.Join(names, " ") != "fs.write fs.read shell.exec" {
		t.Errorf("tool defs %v", names)
	}
	if got := strings.Join(l.Acting(), " "); got != "fs.write shell.exec" {
		t.Errorf("acting %q", got)
	}
}
