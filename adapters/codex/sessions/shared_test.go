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
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

// sharedRig is the shared app-server on a real engine and the pinned
// Codex, its model a fake on loopback, and a bare client on the same
// app-server playing the user's TUI.
type sharedRig struct {
	t     *testing.T
	eng   *engine.Engine
	srv   *sessions.Shared
	model *fakeprovider.Server
	cwd   string
	home  string // CODEX_HOME
}

func newSharedRig(t *testing.T) *sharedRig {
	t.Helper()
	model := fakeprovider.Start(fakeprovider.Codex, "")
	t.Cleanup(model.Close)
	dir := t.TempDir()
	codexHome := codextest.Home(t, model.BaseURL())
	eng := enginetest.Open(t, filepath.Join(dir, "cbth.db"), engine.Options{NoSync: true})
	srv := sessions.NewShared(sessions.Config{Codex: codextest.Binary(t), CodexHome: codexHome, RunDir: filepath.Join(dir, "run"),
		TempDir: dir, LogPath: filepath.Join(dir, "app-server.log"), Env: codextest.Env(t, codexHome), Version: "0.0.0-test",
		Clock: engine.SystemClock{}, StartTimeout: codextest.Guard}, testLog{eng})
	r := &sharedRig{t: t, eng: eng, srv: srv, model: model, cwd: dir, home: codexHome}
	t.Cleanup(func() {
		in, err := srv.Ensure(context.Background())
		if err := srv.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
		if err == nil {
			codextest.GroupGone(t, in.PID)
		}
		if t.Failed() {
			codextest.DumpLog(t, filepath.Join(dir, "app-server.log"))
		}
	})
	return r
}

func (r *sharedRig) running() sessions.Running {
	r.t.Helper()
	in, err := r.srv.Ensure(codextest.Context(r.t))
	if err != nil {
		r.t.Fatal(err)
	}
	return in
}

// user is a bare connection to the shared app-server, as the TUI would be.
func (r *sharedRig) user() *appserver.Client {
	r.t.Helper()
	r.running()
	return codextest.Connect(r.t, filepath.Join(r.cwd, "run", supervisor.SocketName))
}

func (r *sharedRig) session(id string) *aggregate.Session {
	r.t.Helper()
	s, err := testLog{r.eng}.Session(id)
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

func (r *sharedRig) count(typ string) int {
	n := 0
	_ = r.eng.ReadFrom(1, func(e events.Envelope) error {
		if e.Type == typ {
			n++
		}
		return nil
	})
	return n
}

// bind creates the managed session of thread on the running instance, as
// a foreground would: by id, with a reading of the thread; new, without.
func (r *sharedRig) bind(thread string, profile events.SessionProfile, newThread bool) string {
	r.t.Helper()
	ctx := codextest.Context(r.t)
	in := r.running()
	c := codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: thread, Profile: profile, Instance: in.Nonce}
	if newThread {
		c.Mode = codex.ModeNewThread
	} else {
		ts, err := r.srv.Resume(ctx, in.Nonce, thread)
		if err != nil {
			r.t.Fatal(err)
		}
		reading := sessions.ReadingOf(ts)
		c.Reading = &reading
	}
	res, _ := enginetest.Answer(r.t, r.eng, testMeta, c)
	if res.Refusal != nil {
		r.t.Fatal(res.Refusal)
	}
	return res.SessionID
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
func (r *sharedRig) turn(c *appserver.Client, thread, text string, sandbox json.RawMessage) {
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

// Read takes a fresh reading of a session's thread and records nothing:
// its Record is what the delivery's barrier appends. A dropped connection
// to the same process keeps the instance and every epoch. A turn that
// widened the sandbox shows as drift, new (to be recorded) once, while the
// startup cap keeps the effective value.
func TestShared_ReadRecordsNothing(t *testing.T) {
	r := newSharedRig(t)
	ctx := codextest.Context(t)
	user := r.user()

	th, err := user.ThreadStart(ctx, appserver.ThreadStartParams{Cwd: r.cwd, Sandbox: "read-only"})
	if err != nil {
		t.Fatal(err)
	}
	r.turn(user, th.Thread.ID, "before binding", nil)
	id := r.bind(th.Thread.ID, events.SessionProfile{Network: "false"}, false)
	in := r.running()
	observed := r.count(events.TypeSessionPermissionObserved)

	if err := r.srv.DropConnection(ctx); err != nil {
		t.Fatal(err)
	}
	var ref sessions.ThreadReading
	waitUntil(t, "a reading on the new connection", func() bool {
		ref, err = r.srv.Read(ctx, id)
		return err == nil
	})
	if again := r.running(); again.Nonce != in.Nonce || again.PID != in.PID || r.count(events.TypeAppServerStarted) != 1 || ref.Epoch != 1 {
		t.Fatalf("after a dropped connection: instance %s (was %s), %d starts, epoch %d", again.Nonce, in.Nonce, r.count(events.TypeAppServerStarted), ref.Epoch)
	}
	if ref.Drift != nil || ref.Effective != (events.Permissions{AllowsApproval: events.AllowTrue, AllowsNetwork: events.AllowFalse, AllowsWriteAccess: events.AllowFalse}) {
		t.Fatalf("reading of a read-only thread: %+v", ref.Observation)
	}
	if ref.Record == nil || ref.Instance != in.Nonce || ref.Thread.Thread.ID != th.Thread.ID {
		t.Fatalf("a reading without its record or instance: %+v", ref)
	}
	if n := r.count(events.TypeSessionPermissionObserved); n != observed {
		t.Fatalf("Read appended %d readings", n-observed)
	}

	r.turn(user, th.Thread.ID, "now with network", json.RawMessage(`{"type":"workspaceWrite","networkAccess":true}`))
	ref, err = r.srv.Read(ctx, id)
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
	if n := r.count(events.TypeSessionPermissionDrifted); n != 0 {
		t.Fatalf("Read appended %d drift records", n)
	}
	if _, err := r.eng.Execute(ctx, testMeta, *ref.Record); err != nil {
		t.Fatal(err)
	}
	ref, err = r.srv.Read(ctx, id)
	if err != nil || ref.Drift == nil || ref.Drift.Recorded || r.count(events.TypeSessionPermissionDrifted) != 1 {
		t.Fatalf("the same drift again: %+v %v (%d records)", ref.Drift, err, r.count(events.TypeSessionPermissionDrifted))
	}
}

// Before its first turn a new thread has no rollout: Read answers
// ErrAwaitingFirstTurn (EAGAIN) without asking Codex. Once a turn began,
// the thread is read as any other. A rollout deleted under the loaded
// thread is then proof the thread is gone: Read answers *Unreachable, and
// the session goes stale only when that proof is recorded.
func TestShared_NewThreadAwaitsItsFirstTurn(t *testing.T) {
	r := newSharedRig(t)
	ctx := codextest.Context(t)
	user := r.user()
	th, err := user.ThreadStart(ctx, appserver.ThreadStartParams{Cwd: r.cwd})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "thread/started to be heard", func() bool { return r.srv.AwaitingFirstTurn(th.Thread.ID) })
	id := r.bind(th.Thread.ID, events.SessionProfile{}, true)

	_, err = r.srv.Read(ctx, id)
	if !errors.Is(err, sessions.ErrAwaitingFirstTurn) || errs.CodeOf(err) != errs.EAGAIN {
		t.Fatalf("read before the first turn: %v (%s)", err, errs.CodeOf(err))
	}
	r.turn(user, th.Thread.ID, "first turn", nil)
	// The daemon's connection hears the thread turn active on its own.
	waitUntil(t, "the first turn to be seen", func() bool { return !r.srv.AwaitingFirstTurn(th.Thread.ID) })
	if ref, err := r.srv.Read(ctx, id); err != nil || ref.SessionID != id {
		t.Fatalf("read after the first turn: %+v %v", ref, err)
	}

	if err := os.Remove(*th.Thread.Path); err != nil {
		t.Fatal(err)
	}
	_, err = r.srv.Read(ctx, id)
	var gone *sessions.Unreachable
	if !errors.As(err, &gone) || errs.CodeOf(err) != errs.ENOENT || gone.Stale.SessionID != id {
		t.Fatalf("read of a thread whose rollout was deleted: %v (%s)", err, errs.CodeOf(err))
	}
	if s := r.session(id); s.State != fsm.SessionLive || r.count(events.TypeSessionStale) != 0 {
		t.Fatalf("Read recorded the proof itself: the session is %s", s.State)
	}
	if _, err := r.eng.Execute(ctx, testMeta, (&codex.StaleProof{MarkSessionStale: gone.Stale}).Record()); err != nil {
		t.Fatal(err)
	}
	if s := r.session(id); s.State != fsm.SessionStale || !strings.Contains(s.StaleReason, "missing source rollout") {
		t.Fatalf("after the proof was recorded the session is %+v", s)
	}
}

// A thread Codex cannot give the shared app-server is proven unreachable
// on the same refusals as before: a new thread whose instance died before
// its first turn ("no rollout found" on the next instance, which did not
// start it), and a thread another app-server process holds ("active
// writer"). The next instance advanced both sessions' epochs.
func TestShared_UnreachableThreads(t *testing.T) {
	r := newSharedRig(t)
	ctx := codextest.Context(t)
	user := r.user()
	th, err := user.ThreadStart(ctx, appserver.ThreadStartParams{Cwd: r.cwd})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "thread/started to be heard", func() bool { return r.srv.AwaitingFirstTurn(th.Thread.ID) })
	unborn := r.bind(th.Thread.ID, events.SessionProfile{}, true)
	held := r.bind(codextest.ThreadWithTurn(t, user, r.cwd), events.SessionProfile{}, false)

	// The shared app-server dies; the supervisor starts another.
	in := r.running()
	if err := syscall.Kill(in.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the next instance", func() bool {
		next, err := r.srv.Ensure(ctx)
		return err == nil && next.Nonce != in.Nonce && r.session(unborn).AppServerInstance == next.Nonce
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
	if _, err := inst.Client().ThreadResume(ctx, appserver.ThreadResumeParams{ThreadID: r.session(held).BoundThreadID, ExcludeTurns: true}); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct{ session, refusal string }{{unborn, "no rollout found"}, {held, "active writer"}} {
		_, err := r.srv.Read(ctx, c.session)
		var gone *sessions.Unreachable
		if !errors.As(err, &gone) || errors.Is(err, sessions.ErrAwaitingFirstTurn) || !strings.Contains(gone.Stale.Reason, c.refusal) {
			t.Fatalf("read, want %q: %v", c.refusal, err)
		}
		if s := r.session(c.session); s.Epoch != 2 || s.State != fsm.SessionLive {
			t.Fatalf("session %s after %q: %+v", c.session, c.refusal, s)
		}
	}
}
