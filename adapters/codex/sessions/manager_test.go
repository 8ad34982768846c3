package sessions_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/adapters/codex/supervisor"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

// managerRig is a Manager on a real engine and the pinned Codex, its
// model a fake on loopback, and a bare client on the same app-server
// playing the user's TUI.
type managerRig struct {
	t     *testing.T
	eng   *engine.Engine
	m     *sessions.Manager
	model *fakeprovider.Server
	cwd   string
	home  string // CODEX_HOME
}

func newManagerRig(t *testing.T) *managerRig {
	t.Helper()
	model := fakeprovider.Start(fakeprovider.Codex, "")
	t.Cleanup(model.Close)
	dir := t.TempDir()
	codexHome := codextest.Home(t, model.BaseURL())
	eng := enginetest.Open(t, filepath.Join(dir, "cbth.db"), engine.Options{NoSync: true})
	m := sessions.New(sessions.Config{Codex: codextest.Binary(t), CodexHome: codexHome, RunDir: filepath.Join(dir, "run"),
		TempDir: dir, LogPath: filepath.Join(dir, "app-server.log"), Env: codextest.Env(t, codexHome), Version: "0.0.0-test",
		Clock: engine.SystemClock{}, StartTimeout: codextest.Guard}, eng)
	r := &managerRig{t: t, eng: eng, m: m, model: model, cwd: dir, home: codexHome}
	t.Cleanup(func() {
		_, pid, err := m.Instance(context.Background())
		if err := m.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
		if err == nil {
			codextest.GroupGone(t, pid)
		}
		if t.Failed() {
			codextest.DumpLog(t, filepath.Join(dir, "app-server.log"))
		}
	})
	return r
}

// user is a bare connection to the shared app-server, as the TUI would be.
func (r *managerRig) user() *appserver.Client {
	r.t.Helper()
	if _, _, err := r.m.Instance(codextest.Context(r.t)); err != nil {
		r.t.Fatal(err)
	}
	return codextest.Connect(r.t, filepath.Join(r.cwd, "run", supervisor.SocketName))
}

func (r *managerRig) session(id string) *aggregate.Session {
	r.t.Helper()
	var s *aggregate.Session
	_ = r.eng.Read(func(v engine.Snapshot) error {
		st, _ := v.State(events.KindSession, id)
		s, _ = st.(*aggregate.Session)
		return nil
	})
	return s
}

func (r *managerRig) count(typ string) int {
	n := 0
	_ = r.eng.ReadFrom(1, func(e events.Envelope) error {
		if e.Type == typ {
			n++
		}
		return nil
	})
	return n
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(codextest.Guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// turn starts a turn on thread from the user's client and waits for it to
// complete; settings, when given, go with it.
func (r *managerRig) turn(c *appserver.Client, thread, text string, sandbox json.RawMessage) {
	r.t.Helper()
	ctx := codextest.Context(r.t)
	sub := c.Subscribe()
	defer sub.Close()
	turn, err := c.TurnStart(ctx, appserver.TurnStartParams{ThreadID: thread, Input: []appserver.Input{appserver.TextInput(text)}, SandboxPolicy: sandbox})
	if err != nil {
		r.t.Fatal(err)
	}
	for m := range sub.C() {
		var n appserver.TurnNote
		if m.Method == appserver.NoteTurnCompleted && json.Unmarshal(m.Params, &n) == nil && n.Turn.ID == turn.ID {
			return
		}
	}
	r.t.Fatalf("no turn/completed: %v", sub.Err())
}

// A new thread is bound from thread/started (an ephemeral one is
// skipped), read once its first turn started; a bound thread is read at
// attach. A dropped connection to the same process keeps every epoch.
// Refresh, the call delivery makes before every automatic turn, reads the
// thread again: a turn that widened the sandbox shows as drift, recorded
// once, while the startup cap keeps the effective value.
func TestManager_SessionsOnTheRealAppServer(t *testing.T) {
	r := newManagerRig(t)
	ctx := codextest.Context(t)
	user := r.user()

	fg := &ipc.Conn{}
	rep, err := r.m.Attach(ctx, fg, api.CLIAttachArgs{Mode: sessions.ModeNewThread, Cwd: r.cwd})
	if err != nil || rep.Outcome != "awaiting_thread" || rep.Session != nil || !rep.AutoContinuation {
		t.Fatalf("attach a new thread: %+v %v", rep, err)
	}
	// Only one foreground may wait for its thread at a time.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = r.m.Attach(short, &ipc.Conn{}, api.CLIAttachArgs{Mode: sessions.ModeExploratory, Cwd: r.cwd})
	cancel()
	if err == nil {
		t.Fatal("a second foreground awaiting a thread was attached")
	}
	if _, err := user.ThreadStart(ctx, appserver.ThreadStartParams{Cwd: r.cwd, Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	th, err := user.ThreadStart(ctx, appserver.ThreadStartParams{Cwd: r.cwd})
	if err != nil {
		t.Fatal(err)
	}
	var list []query.SessionView
	waitUntil(t, "the new thread's session", func() bool {
		_ = r.eng.Read(func(s engine.Snapshot) error {
			page, err := query.Sessions(s, query.SessionFilter{})
			list = page.Sessions
			return err
		})
		return len(list) == 1
	})
	if list[0].BoundThreadID != th.Thread.ID || list[0].SessionEpoch != 1 || list[0].SessionState != fsm.SessionLive {
		t.Fatalf("bound %+v, want thread %s (the ephemeral one skipped)", list[0], th.Thread.ID)
	}
	newID := list[0].ManagedSessionID
	r.turn(user, th.Thread.ID, "first turn", nil)
	waitUntil(t, "the first reading", func() bool { return r.session(newID).SnapshotRevision == 1 })
	if det, err := r.m.Detach(ctx, fg); err != nil || det.Session == nil || det.Session.SessionState != fsm.SessionDetached {
		t.Fatalf("detach: %+v %v", det, err)
	}

	// A thread bound by id, network pinned false by the caller.
	other, err := user.ThreadStart(ctx, appserver.ThreadStartParams{Cwd: r.cwd, Sandbox: "read-only"})
	if err != nil {
		t.Fatal(err)
	}
	r.turn(user, other.Thread.ID, "before binding", nil)
	fg2 := &ipc.Conn{}
	rep, err = r.m.Attach(ctx, fg2, api.CLIAttachArgs{Mode: sessions.ModeBindThread, BoundThreadID: other.Thread.ID, Cwd: "/",
		Profile: events.SessionProfile{Network: "false"}})
	if err != nil || rep.Outcome != "created" || rep.Session == nil || rep.Cwd != r.cwd {
		t.Fatalf("attach by id: %+v %v", rep, err)
	}
	bound := rep.Session.ManagedSessionID
	nonce, pid, _ := r.m.Instance(ctx)

	if err := r.m.DropConnection(ctx); err != nil {
		t.Fatal(err)
	}
	var ref sessions.Refreshed
	waitUntil(t, "a refresh on the new connection", func() bool {
		ref, err = r.m.Refresh(ctx, bound)
		return err == nil
	})
	if n2, pid2, _ := r.m.Instance(ctx); n2 != nonce || pid2 != pid || r.count("appserver.started") != 1 || ref.Epoch != 1 {
		t.Fatalf("after a dropped connection: instance %s (was %s), %d starts, epoch %d", n2, nonce, r.count("appserver.started"), ref.Epoch)
	}
	if ref.Drift != nil || ref.Effective != (events.Permissions{AllowsApproval: events.AllowTrue, AllowsNetwork: events.AllowFalse, AllowsWriteAccess: events.AllowFalse}) {
		t.Fatalf("reading of a read-only thread: %+v", ref.Observation)
	}

	r.turn(user, other.Thread.ID, "now with network", json.RawMessage(`{"type":"workspaceWrite","networkAccess":true}`))
	ref, err = r.m.Refresh(ctx, bound)
	if err != nil {
		t.Fatal(err)
	}
	// Network was pinned false by the caller, write access by the first
	// reading (read-only): both widened now.
	if ref.Drift == nil || !ref.Drift.Recorded || ref.Drift.Direction != "widened" || !slices.Equal(ref.Drift.Dimensions, []string{"network", "write_access"}) {
		t.Fatalf("drift after the sandbox widened: %+v", ref.Drift)
	}
	if ref.Effective.AllowsNetwork != events.AllowFalse || ref.Effective.AllowsWriteAccess != events.AllowFalse || ref.Current.AllowsNetwork != events.AllowTrue {
		t.Fatalf("the startup cap must hold: %+v", ref.Observation)
	}
	ref, err = r.m.Refresh(ctx, bound)
	if err != nil || ref.Drift == nil || ref.Drift.Recorded || r.count("session.permission_drifted") != 1 {
		t.Fatalf("the same drift again: %+v %v (%d records)", ref.Drift, err, r.count("session.permission_drifted"))
	}
	if _, err := r.m.Detach(ctx, fg2); err != nil {
		t.Fatal(err)
	}
}

// newThreadSession attaches a new-thread foreground and starts its thread
// from the user's client, as the TUI does at launch: the session is bound
// and live, the thread has no turn.
func (r *managerRig) newThreadSession(user *appserver.Client) (fg *ipc.Conn, session string, th appserver.ThreadSession) {
	r.t.Helper()
	ctx := codextest.Context(r.t)
	fg = &ipc.Conn{}
	if _, err := r.m.Attach(ctx, fg, api.CLIAttachArgs{Mode: sessions.ModeNewThread, Cwd: r.cwd}); err != nil {
		r.t.Fatal(err)
	}
	th, err := user.ThreadStart(ctx, appserver.ThreadStartParams{Cwd: r.cwd})
	if err != nil {
		r.t.Fatal(err)
	}
	waitUntil(r.t, "the new thread's session", func() bool {
		_ = r.eng.Read(func(v engine.Snapshot) error {
			if s, _ := codex.SessionOf(v, th.Thread.ID); s != nil {
				session = s.ID
			}
			return nil
		})
		return session != ""
	})
	return fg, session, th
}

// Before its first turn a new thread has no rollout: Refresh answers
// ErrAwaitingFirstTurn (EAGAIN) without asking Codex, and the session
// stays live. Once a turn began, the thread is read as any other. A
// rollout deleted under the loaded thread is then proof the thread is
// gone: the session goes stale.
func TestManager_NewThreadAwaitsItsFirstTurn(t *testing.T) {
	r := newManagerRig(t)
	ctx := codextest.Context(t)
	user := r.user()
	fg, id, th := r.newThreadSession(user)

	if !r.m.AwaitingFirstTurn(th.Thread.ID) {
		t.Fatal("a thread without a turn is not awaiting its first turn")
	}
	_, err := r.m.Refresh(ctx, id)
	if !errors.Is(err, sessions.ErrAwaitingFirstTurn) || errs.CodeOf(err) != errs.EAGAIN {
		t.Fatalf("refresh before the first turn: %v (%s)", err, errs.CodeOf(err))
	}
	if s := r.session(id); s.State != fsm.SessionLive || r.count("session.stale") != 0 {
		t.Fatalf("before the first turn the session is %s (%d stale events)", s.State, r.count("session.stale"))
	}

	r.turn(user, th.Thread.ID, "first turn", nil)
	// The daemon's connection hears the thread turn active on its own.
	waitUntil(t, "the first turn to be seen", func() bool { return !r.m.AwaitingFirstTurn(th.Thread.ID) })
	if ref, err := r.m.Refresh(ctx, id); err != nil || ref.SessionID != id {
		t.Fatalf("refresh after the first turn: %+v %v", ref, err)
	}

	if err := os.Remove(*th.Thread.Path); err != nil {
		t.Fatal(err)
	}
	_, err = r.m.Refresh(ctx, id)
	if errs.CodeOf(err) != errs.ENOENT || errors.Is(err, sessions.ErrAwaitingFirstTurn) {
		t.Fatalf("refresh of a thread whose rollout was deleted: %v (%s)", err, errs.CodeOf(err))
	}
	if s := r.session(id); s.State != fsm.SessionStale || r.count("session.stale") != 1 {
		t.Fatalf("after its rollout was deleted the session is %s", s.State)
	}
	if _, err := r.m.Detach(ctx, fg); err != nil {
		t.Fatal(err)
	}
}

// A thread Codex cannot give the shared app-server is stale, on the same
// refusals as before: a new thread whose instance died before its first
// turn ("no rollout found" on the next instance, which did not start it),
// and a thread another app-server process holds ("active writer").
func TestManager_UnreachableThreadsGoStale(t *testing.T) {
	r := newManagerRig(t)
	ctx := codextest.Context(t)
	user := r.user()
	fgNew, unborn, _ := r.newThreadSession(user)
	held := codextest.ThreadWithTurn(t, user, r.cwd)
	fgHeld := &ipc.Conn{}
	rep, err := r.m.Attach(ctx, fgHeld, api.CLIAttachArgs{Mode: sessions.ModeBindThread, BoundThreadID: held, Cwd: r.cwd})
	if err != nil {
		t.Fatal(err)
	}

	// The shared app-server dies; the supervisor starts another.
	nonce, pid, _ := r.m.Instance(ctx)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the next instance", func() bool {
		n, _, err := r.m.Instance(ctx)
		return err == nil && n != nonce && r.session(unborn).AppServerInstance == n
	})
	// Another app-server process on the same Codex home takes the thread.
	cfg, _ := codextest.SupervisorConfig(t, r.model)
	cfg.CodexHome, cfg.Env = r.home, codextest.Env(t, r.home)
	other, err := supervisor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := other.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		other.Stop(context.Background())
		codextest.GroupGone(t, inst.Identity.PID)
	})
	if _, err := inst.Client().ThreadResume(ctx, appserver.ThreadResumeParams{ThreadID: held, ExcludeTurns: true}); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct{ session, refusal string }{{unborn, "no rollout found"}, {rep.Session.ManagedSessionID, "active writer"}} {
		_, err := r.m.Refresh(ctx, c.session)
		if err == nil || errors.Is(err, sessions.ErrAwaitingFirstTurn) || !strings.Contains(err.Error(), c.refusal) {
			t.Fatalf("refresh, want %q: %v", c.refusal, err)
		}
		if s := r.session(c.session); s.State != fsm.SessionStale || !strings.Contains(s.StaleReason, c.refusal) {
			t.Fatalf("session %s after %q: %+v", c.session, c.refusal, s)
		}
	}
	for _, fg := range []*ipc.Conn{fgNew, fgHeld} {
		if _, err := r.m.Detach(ctx, fg); err != nil {
			t.Fatal(err)
		}
	}
}
