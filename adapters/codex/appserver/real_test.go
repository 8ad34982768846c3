package appserver_test

// Tests against the real pinned Codex CLI (internal/testkit/codextest) and
// the fake model: the shapes and behaviours spec/codex-cli.md relies on.

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

// guard bounds every wait on Codex: a hang fails the test instead of
// stalling the suite. Nothing asserts on how long anything took.
const guard = codextest.Guard

func ctxFor(t *testing.T) context.Context { return codextest.Context(t) }

// dial opens another initialized connection to the rig's app-server,
// closed when the test ends.
func dial(t *testing.T, r *codextest.Rig) *appserver.Client {
	t.Helper()
	c, err := r.Inst.Dial(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// next returns the first message on sub that match accepts, failing the
// test if the subscription ends or the guard passes first. Messages
// skipped on the way are returned too, in order.
func next(t *testing.T, sub *appserver.Subscription, match func(appserver.Message) bool) (appserver.Message, []appserver.Message) {
	t.Helper()
	var seen []appserver.Message
	timeout := time.After(guard)
	for {
		select {
		case m, ok := <-sub.C():
			if !ok {
				t.Fatalf("subscription ended: %v (seen %s)", sub.Err(), methods(seen))
			}
			seen = append(seen, m)
			if match(m) {
				return m, seen
			}
		case <-timeout:
			t.Fatalf("no matching message within %v (seen %s)", guard, methods(seen))
		}
	}
}

func methods(ms []appserver.Message) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.Method)
	}
	return strings.Join(s, " ")
}

// turnNote matches a turn notification of method for the thread (and the
// turn, when turnID is set).
func turnNote(method, threadID, turnID string) func(appserver.Message) bool {
	return func(m appserver.Message) bool {
		if m.Method != method {
			return false
		}
		var n appserver.TurnNote
		if json.Unmarshal(m.Params, &n) != nil || n.ThreadID != threadID {
			return false
		}
		return turnID == "" || n.Turn.ID == turnID
	}
}

func decodeTurn(t *testing.T, m appserver.Message) appserver.Turn {
	t.Helper()
	var n appserver.TurnNote
	if err := json.Unmarshal(m.Params, &n); err != nil {
		t.Fatalf("%s params: %v", m.Method, err)
	}
	return n.Turn
}

func startThread(t *testing.T, c *appserver.Client, p appserver.ThreadStartParams) appserver.ThreadSession {
	t.Helper()
	s, err := c.ThreadStart(ctxFor(t), p)
	if err != nil {
		t.Fatalf("thread/start: %v", err)
	}
	if s.Thread.ID == "" {
		t.Fatal("thread/start: no thread id")
	}
	return s
}

func startTurn(t *testing.T, c *appserver.Client, threadID, text string) appserver.Turn {
	t.Helper()
	turn, err := c.TurnStart(ctxFor(t), appserver.TurnStartParams{ThreadID: threadID, Input: []appserver.Input{appserver.TextInput(text)}})
	if err != nil {
		t.Fatalf("turn/start: %v", err)
	}
	if turn.ID == "" || turn.Status != appserver.TurnInProgress {
		t.Fatalf("turn/start answered %+v, want an id and status inProgress", turn)
	}
	return turn
}

// One turn through the client: thread/start, turn/start with a marker,
// then turn/started, the items and turn/completed on the subscription; the
// marker reached the model in exactly one request.
func TestRealTurnNotifications(t *testing.T) {
	r := codextest.StartRig(t)
	c := r.Inst.Client()
	sub := c.Subscribe()
	defer sub.Close()

	th := startThread(t, c, appserver.ThreadStartParams{Cwd: r.Cwd})
	if th.Thread.Status.Type != appserver.ThreadIdle || th.Thread.Ephemeral {
		t.Errorf("new thread: status %q ephemeral %v, want idle and not ephemeral", th.Thread.Status.Type, th.Thread.Ephemeral)
	}
	const marker = "[cbth-marker-1]"
	turn := startTurn(t, c, th.Thread.ID, "continue "+marker)

	started, _ := next(t, sub, turnNote(appserver.NoteTurnStarted, th.Thread.ID, turn.ID))
	if got := decodeTurn(t, started); got.Status != appserver.TurnInProgress {
		t.Errorf("turn/started status %q", got.Status)
	}
	done, seen := next(t, sub, turnNote(appserver.NoteTurnCompleted, th.Thread.ID, turn.ID))
	got := decodeTurn(t, done)
	if got.Status != appserver.TurnCompleted || got.Error != nil {
		t.Errorf("turn/completed: status %q error %+v", got.Status, got.Error)
	}
	var items, deltas int
	var reply string
	for _, m := range seen {
		switch m.Method {
		case appserver.NoteItemCompleted:
			items++
			var p struct {
				Item struct{ Type, Text string }
			}
			_ = json.Unmarshal(m.Params, &p)
			if p.Item.Type == "agentMessage" {
				reply = p.Item.Text
			}
		case appserver.NoteAgentMessageDelta:
			deltas++
		}
	}
	if items < 2 || deltas == 0 || reply != "ECHO: continue "+marker {
		t.Errorf("between turn/started and turn/completed: %d items, %d deltas, reply %q (%s)", items, deltas, reply, methods(seen))
	}
	if n := r.Model.Count(marker); n != 1 {
		t.Errorf("model requests carrying the marker: %d, want 1", n)
	}

	// The finished turn is listed, newest first, with its status.
	page, err := c.TurnsList(ctxFor(t), appserver.TurnsListParams{ThreadID: th.Thread.ID, Limit: 1, SortDirection: "desc"})
	if err != nil {
		t.Fatalf("thread/turns/list: %v", err)
	}
	if len(page.Data) != 1 || page.Data[0].ID != turn.ID || page.Data[0].Status != appserver.TurnCompleted {
		t.Errorf("thread/turns/list: %+v, want turn %s completed", page.Data, turn.ID)
	}
	read, err := c.ThreadRead(ctxFor(t), appserver.ThreadReadParams{ThreadID: th.Thread.ID, IncludeTurns: true})
	if err != nil {
		t.Fatalf("thread/read: %v", err)
	}
	if read.Status.Type != appserver.ThreadIdle || len(read.Turns) != 1 || read.Turns[0].ID != turn.ID {
		t.Errorf("thread/read: status %q, %d turns", read.Status.Type, len(read.Turns))
	}
}

// A second connection that resumes the thread receives the turns the first
// connection starts; one that did not resume gets only the broadcasts.
func TestRealResumeSubscribesSecondClient(t *testing.T) {
	r := codextest.StartRig(t)
	a := r.Inst.Client()
	b := dial(t, r)
	bystander := dial(t, r)

	subX := bystander.Subscribe()
	th := startThread(t, a, appserver.ThreadStartParams{Cwd: r.Cwd})
	// thread/started is broadcast, even to a connection that never saw
	// the thread.
	next(t, subX, func(m appserver.Message) bool {
		var n appserver.ThreadStartedNote
		return m.Method == appserver.NoteThreadStarted && json.Unmarshal(m.Params, &n) == nil && n.Thread.ID == th.Thread.ID
	})
	subA := a.Subscribe()
	first := startTurn(t, a, th.Thread.ID, "first")
	next(t, subA, turnNote(appserver.NoteTurnCompleted, th.Thread.ID, first.ID))

	res, err := b.ThreadResume(ctxFor(t), appserver.ThreadResumeParams{ThreadID: th.Thread.ID, ExcludeTurns: true})
	if err != nil {
		t.Fatalf("thread/resume by the second client: %v", err)
	}
	if res.Thread.ID != th.Thread.ID || res.Thread.Status.Type != appserver.ThreadIdle {
		t.Errorf("thread/resume: thread %s status %q", res.Thread.ID, res.Thread.Status.Type)
	}
	if len(res.ApprovalPolicy) == 0 || len(res.Sandbox) == 0 {
		t.Errorf("thread/resume result lacks approvalPolicy or sandbox: %s / %s", res.ApprovalPolicy, res.Sandbox)
	}

	subB := b.Subscribe()
	second := startTurn(t, a, th.Thread.ID, "second [resume-check]")
	next(t, subB, turnNote(appserver.NoteTurnStarted, th.Thread.ID, second.ID))
	done, _ := next(t, subB, turnNote(appserver.NoteTurnCompleted, th.Thread.ID, second.ID))
	if got := decodeTurn(t, done); got.Status != appserver.TurnCompleted {
		t.Errorf("second client saw turn/completed with status %q", got.Status)
	}
	// The bystander got the broadcast status changes for the thread, but
	// no turn notifications.
	_, seen := next(t, subX, func(m appserver.Message) bool {
		var n appserver.ThreadStatusChangedNote
		return m.Method == appserver.NoteThreadStatusChanged && json.Unmarshal(m.Params, &n) == nil &&
			n.ThreadID == th.Thread.ID && n.Status.Type == appserver.ThreadIdle
	})
	for _, m := range seen {
		if strings.HasPrefix(m.Method, "turn/") || strings.HasPrefix(m.Method, "item/") {
			t.Errorf("a connection that never resumed the thread got %s", m.Method)
		}
	}
}

// A thread has no rollout before its first turn, so another connection
// cannot resume it: -32600, an answer (a proven refusal), distinct from
// the other codes. Nor can it read the thread's permissions: thread/read
// answers without them. It can start the thread's first turn, though.
func TestRealResumeBeforeFirstTurnRefused(t *testing.T) {
	r := codextest.StartRig(t)
	a := r.Inst.Client()
	b := dial(t, r)
	th := startThread(t, a, appserver.ThreadStartParams{Cwd: r.Cwd})
	_, err := b.ThreadResume(ctxFor(t), appserver.ThreadResumeParams{ThreadID: th.Thread.ID, ExcludeTurns: true})
	code, answered := appserver.RPCCode(err)
	if !answered || code != appserver.CodeInvalidRequest || !strings.Contains(err.Error(), "no rollout found") {
		t.Fatalf("resume of a brand-new thread: %v (code %d, answered %v), want -32600 no rollout found", err, code, answered)
	}
	if errs.CodeOf(err) != errs.ESTATE {
		t.Errorf("cbth code %s, want ESTATE", errs.CodeOf(err))
	}
	var read json.RawMessage
	if err := b.Call(ctxFor(t), appserver.MethodThreadRead, appserver.ThreadReadParams{ThreadID: th.Thread.ID}, &read); err != nil {
		t.Fatalf("thread/read of a brand-new thread: %v", err)
	}
	for _, k := range []string{"approvalPolicy", "sandbox", "activePermissionProfile"} {
		if strings.Contains(string(read), `"`+k+`"`) {
			t.Errorf("thread/read reports %s: %s", k, read)
		}
	}

	// The other connection starts the first turn; after that the same
	// resume works.
	sub := a.Subscribe()
	turn := startTurn(t, b, th.Thread.ID, "materialize")
	next(t, sub, turnNote(appserver.NoteTurnCompleted, th.Thread.ID, turn.ID))
	if _, err := b.ThreadResume(ctxFor(t), appserver.ThreadResumeParams{ThreadID: th.Thread.ID, ExcludeTurns: true}); err != nil {
		t.Fatalf("resume after the first turn: %v", err)
	}
}

// The negative ends delivery must observe: a model failure ends the turn
// failed; an interrupt ends it interrupted.
func TestRealTurnNegativeEnds(t *testing.T) {
	r := codextest.StartRig(t)
	c := r.Inst.Client()
	sub := c.Subscribe()
	th := startThread(t, c, appserver.ThreadStartParams{Cwd: r.Cwd})

	failed := startTurn(t, c, th.Thread.ID, "please "+fakeprovider.MarkFail)
	done, _ := next(t, sub, turnNote(appserver.NoteTurnCompleted, th.Thread.ID, failed.ID))
	if got := decodeTurn(t, done); got.Status != appserver.TurnFailed || got.Error == nil {
		t.Errorf("failing model: turn/completed status %q error %+v, want failed with an error", got.Status, got.Error)
	}

	hung := startTurn(t, c, th.Thread.ID, "wait "+fakeprovider.MarkHang)
	next(t, sub, turnNote(appserver.NoteTurnStarted, th.Thread.ID, hung.ID))
	if err := c.TurnInterrupt(ctxFor(t), appserver.TurnInterruptParams{ThreadID: th.Thread.ID, TurnID: hung.ID}); err != nil {
		t.Fatalf("turn/interrupt: %v", err)
	}
	done, _ = next(t, sub, turnNote(appserver.NoteTurnCompleted, th.Thread.ID, hung.ID))
	if got := decodeTurn(t, done); got.Status != appserver.TurnInterrupted {
		t.Errorf("interrupted turn: turn/completed status %q", got.Status)
	}
}

// An approval request reaches every subscribed connection as a request
// (with an id) and the client answers none of them: the turn stays
// waiting on approval until someone decides.
func TestRealApprovalRequestSurfacedNotAnswered(t *testing.T) {
	r := codextest.StartRig(t)
	a := r.Inst.Client()
	b := dial(t, r)
	subA := a.Subscribe()
	th := startThread(t, a, appserver.ThreadStartParams{Cwd: r.Cwd, ApprovalPolicy: json.RawMessage(`"on-request"`)})
	first := startTurn(t, a, th.Thread.ID, "hello")
	next(t, subA, turnNote(appserver.NoteTurnCompleted, th.Thread.ID, first.ID))
	if _, err := b.ThreadResume(ctxFor(t), appserver.ThreadResumeParams{ThreadID: th.Thread.ID, ExcludeTurns: true}); err != nil {
		t.Fatal(err)
	}
	subB := b.Subscribe()

	turn := startTurn(t, a, th.Thread.ID, fakeprovider.MarkTool+" echo approved-command-ran")
	isApproval := func(m appserver.Message) bool {
		return m.Kind == appserver.KindRequest && m.Method == "item/commandExecution/requestApproval"
	}
	reqA, _ := next(t, subA, isApproval)
	reqB, _ := next(t, subB, isApproval)
	if reqA.ID != reqB.ID {
		t.Errorf("the two connections got different request ids: %s and %s", reqA.ID, reqB.ID)
	}
	var p struct {
		ThreadID string `json:"threadId"`
		TurnID   string `json:"turnId"`
	}
	if err := json.Unmarshal(reqA.Params, &p); err != nil || p.ThreadID != th.Thread.ID || p.TurnID != turn.ID {
		t.Errorf("approval params %s: want thread %s turn %s", reqA.Params, th.Thread.ID, turn.ID)
	}

	// Nobody answered: the thread waits on approval, the command has not
	// run, and only the first model request (the tool call) was made.
	read, err := a.ThreadRead(ctxFor(t), appserver.ThreadReadParams{ThreadID: th.Thread.ID})
	if err != nil {
		t.Fatal(err)
	}
	if read.Status.Type != appserver.ThreadActive || !contains(read.Status.ActiveFlags, "waitingOnApproval") {
		t.Errorf("thread status %+v, want active waitingOnApproval", read.Status)
	}
	for _, req := range r.Model.Requests() {
		if req.ToolOutput {
			t.Errorf("the command ran although nobody approved it")
		}
	}
	// Clean up the way a person would: interrupt the turn.
	if err := a.TurnInterrupt(ctxFor(t), appserver.TurnInterruptParams{ThreadID: th.Thread.ID, TurnID: turn.ID}); err != nil {
		t.Fatal(err)
	}
	done, _ := next(t, subA, turnNote(appserver.NoteTurnCompleted, th.Thread.ID, turn.ID))
	if got := decodeTurn(t, done); got.Status != appserver.TurnInterrupted {
		t.Errorf("turn status %q after interrupt", got.Status)
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// The stdio transport against the real app-server: one turn end to end.
func TestRealStdio(t *testing.T) {
	bin := codextest.Binary(t)
	model := fakeprovider.Start(fakeprovider.Codex, "")
	defer model.Close()
	home := codextest.Home(t, model.BaseURL())
	cmd := exec.Command(bin, "app-server")
	cmd.Env = codextest.Env(t, home)
	cmd.Dir = t.TempDir()
	tr, err := appserver.StartStdio(cmd)
	if err != nil {
		t.Fatal(err)
	}
	c := appserver.New(tr, appserver.Options{})
	defer func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if cmd.ProcessState == nil || !cmd.ProcessState.Exited() {
			t.Errorf("app-server still running after Close: %v", cmd.ProcessState)
		}
	}()
	init, err := c.Initialize(ctxFor(t), codextest.ClientInfo, appserver.Capabilities{ExperimentalAPI: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(init.UserAgent, "/"+codextest.Version+" ") || init.CodexHome != home {
		t.Errorf("initialize: %+v", init)
	}
	sub := c.Subscribe()
	th := startThread(t, c, appserver.ThreadStartParams{Cwd: cmd.Dir})
	turn := startTurn(t, c, th.Thread.ID, "over stdio [stdio-marker]")
	done, _ := next(t, sub, turnNote(appserver.NoteTurnCompleted, th.Thread.ID, turn.ID))
	if got := decodeTurn(t, done); got.Status != appserver.TurnCompleted {
		t.Errorf("turn status %q", got.Status)
	}
	if n := model.Count("[stdio-marker]"); n != 1 {
		t.Errorf("marker in %d model requests, want 1", n)
	}
}

// The permission shapes turn/start accepts in 0.169, and that they hold
// for the turns after (a second connection's thread/resume reports them);
// the shapes it refuses, with -32600. thread/resume of a thread already
// loaded reports its settings and ignores the ones it is given.
func TestRealTurnStartPermissionShapes(t *testing.T) {
	r := codextest.StartRig(t)
	c := r.Inst.Client()
	sub := c.Subscribe()
	th := startThread(t, c, appserver.ThreadStartParams{Cwd: r.Cwd})
	first := startTurn(t, c, th.Thread.ID, "x")
	next(t, sub, turnNote(appserver.NoteTurnCompleted, th.Thread.ID, first.ID))
	b := dial(t, r)
	turn := func(params string) error {
		var m map[string]any
		if err := json.Unmarshal([]byte(params), &m); err != nil {
			t.Fatal(err)
		}
		m["threadId"], m["input"] = th.Thread.ID, []appserver.Input{appserver.TextInput("p")}
		var res appserver.TurnStartResult
		if err := c.Call(ctxFor(t), appserver.MethodTurnStart, m, &res); err != nil {
			return err
		}
		next(t, sub, turnNote(appserver.NoteTurnCompleted, th.Thread.ID, res.Turn.ID))
		return nil
	}
	compact := func(raw json.RawMessage) string {
		var v any
		_ = json.Unmarshal(raw, &v)
		out, _ := json.Marshal(v) // sorted keys
		return string(out)
	}
	for _, tc := range []struct{ params, approval, sandbox, profile string }{
		{`{"approvalPolicy":"never","sandboxPolicy":{"type":"readOnly","networkAccess":false}}`, `"never"`, `{"networkAccess":false,"type":"readOnly"}`, ""},
		{`{"approvalPolicy":"on-request","sandboxPolicy":{"type":"workspaceWrite","writableRoots":["/tmp"],"networkAccess":true}}`, `"on-request"`,
			`{"excludeSlashTmp":false,"excludeTmpdirEnvVar":false,"networkAccess":true,"type":"workspaceWrite","writableRoots":["/tmp"]}`, ""},
		{`{"approvalPolicy":{"granular":{"mcp_elicitations":true,"rules":true,"sandbox_approval":true}},"permissions":":workspace"}`,
			`{"granular":{"mcp_elicitations":true,"request_permissions":false,"rules":true,"sandbox_approval":true,"skill_approval":false}}`,
			`{"excludeSlashTmp":false,"excludeTmpdirEnvVar":false,"networkAccess":false,"type":"workspaceWrite","writableRoots":[]}`, ":workspace"},
		{`{"approvalPolicy":"untrusted","permissions":":read-only"}`, `"untrusted"`, `{"networkAccess":false,"type":"readOnly"}`, ":read-only"},
	} {
		if err := turn(tc.params); err != nil {
			t.Errorf("turn/start %s: %v", tc.params, err)
			continue
		}
		// Settings the resume asks for are ignored on a loaded thread.
		s, err := b.ThreadResume(ctxFor(t), appserver.ThreadResumeParams{ThreadID: th.Thread.ID, ExcludeTurns: true,
			ApprovalPolicy: json.RawMessage(`"on-request"`), Sandbox: "danger-full-access"})
		if err != nil {
			t.Fatal(err)
		}
		profile := ""
		if s.ActivePermissionProfile != nil {
			profile = s.ActivePermissionProfile.ID
		}
		if compact(s.ApprovalPolicy) != tc.approval || compact(s.Sandbox) != tc.sandbox || profile != tc.profile {
			t.Errorf("after turn/start %s, thread/resume reports\n approval %s sandbox %s profile %q\nwant %s %s %q",
				tc.params, compact(s.ApprovalPolicy), compact(s.Sandbox), profile, tc.approval, tc.sandbox, tc.profile)
		}
	}
	for _, bad := range []string{
		`{"approvalPolicy":"on-failure"}`,
		`{"sandboxPolicy":"read-only"}`,
		`{"sandboxPolicy":{"type":"workspaceWrite","writableRoots":["relative"]}}`,
		`{"sandboxPolicy":{"type":"readOnly","access":{"type":"restricted"}}}`,
		`{"permissions":{"type":"profile","id":":read-only"}}`,
		`{"permissions":":read-only","sandboxPolicy":{"type":"readOnly"}}`,
		`{"permissions":"no-such-profile"}`,
	} {
		if code, answered := appserver.RPCCode(turn(bad)); !answered || code != appserver.CodeInvalidRequest {
			t.Errorf("turn/start %s: code %d answered %v, want -32600", bad, code, answered)
		}
	}
}

// turn/steer adds input to the running turn and keeps its id; a wrong
// expected turn id, or no running turn, is -32600.
func TestRealSteer(t *testing.T) {
	r := codextest.StartRig(t)
	c := r.Inst.Client()
	sub := c.Subscribe()
	th := startThread(t, c, appserver.ThreadStartParams{Cwd: r.Cwd})
	turn := startTurn(t, c, th.Thread.ID, "wait "+fakeprovider.MarkHang)
	next(t, sub, turnNote(appserver.NoteTurnStarted, th.Thread.ID, turn.ID))

	_, err := c.TurnSteer(ctxFor(t), appserver.TurnSteerParams{ThreadID: th.Thread.ID, ExpectedTurnID: "not-" + turn.ID, Input: []appserver.Input{appserver.TextInput("x")}})
	if code, answered := appserver.RPCCode(err); !answered || code != appserver.CodeInvalidRequest {
		t.Errorf("steer with a wrong expected turn: %v, want -32600", err)
	}
	id, err := c.TurnSteer(ctxFor(t), appserver.TurnSteerParams{ThreadID: th.Thread.ID, ExpectedTurnID: turn.ID, Input: []appserver.Input{appserver.TextInput("steered [steer-marker]")}})
	if err != nil || id != turn.ID {
		t.Fatalf("steer: %q %v, want turn %s", id, err, turn.ID)
	}
	r.Model.Release() // the first request was aborted; let any hang go
	done, _ := next(t, sub, turnNote(appserver.NoteTurnCompleted, th.Thread.ID, turn.ID))
	if got := decodeTurn(t, done); got.Status != appserver.TurnCompleted {
		t.Errorf("steered turn ended %q", got.Status)
	}
	if n := r.Model.Count("[steer-marker]"); n != 1 {
		t.Errorf("steer text reached the model in %d requests, want 1", n)
	}
	_, err = c.TurnSteer(ctxFor(t), appserver.TurnSteerParams{ThreadID: th.Thread.ID, ExpectedTurnID: turn.ID, Input: []appserver.Input{appserver.TextInput("late")}})
	if code, answered := appserver.RPCCode(err); !answered || code != appserver.CodeInvalidRequest {
		t.Errorf("steer with no running turn: %v, want -32600", err)
	}
}
