package codexmod

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/adapters/codex/supervisor"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

// fgRig is the foregrounds on the shared app-server of the pinned Codex,
// a real engine, and a bare client on the same app-server playing the
// TUIs of `cbth cli run`.
type fgRig struct {
	t   *testing.T
	eng *engine.Engine
	srv *sessions.Shared
	f   *foregrounds
	cwd string
}

func newFgRig(t *testing.T) *fgRig {
	t.Helper()
	model := fakeprovider.Start(fakeprovider.Codex, "")
	t.Cleanup(model.Close)
	dir := t.TempDir()
	codexHome := codextest.Home(t, model.BaseURL())
	eng := enginetest.Open(t, filepath.Join(dir, "cbth.db"), engine.Options{NoSync: true})
	srv := sessions.NewShared(sessions.Config{Codex: codextest.Binary(t), CodexHome: codexHome, RunDir: filepath.Join(dir, "run"),
		TempDir: dir, LogPath: filepath.Join(dir, "app-server.log"), Env: codextest.Env(t, codexHome), Version: "0.0.0-test",
		Clock: engine.SystemClock{}, StartTimeout: codextest.Guard}, book{eng})
	r := &fgRig{t: t, eng: eng, srv: srv, f: newForegrounds(srv, eng, slog.New(slog.DiscardHandler)), cwd: dir}
	t.Cleanup(func() {
		in, err := srv.Ensure(context.Background())
		if err := srv.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
		r.f.close()
		if err == nil {
			codextest.GroupGone(t, in.PID)
		}
		if t.Failed() {
			codextest.DumpLog(t, filepath.Join(dir, "app-server.log"))
		}
	})
	return r
}

func (r *fgRig) user() *appserver.Client {
	r.t.Helper()
	if _, err := r.srv.Ensure(codextest.Context(r.t)); err != nil {
		r.t.Fatal(err)
	}
	return codextest.Connect(r.t, filepath.Join(r.cwd, "run", supervisor.SocketName))
}

func (r *fgRig) sessions() []query.SessionView {
	var list []query.SessionView
	_ = r.eng.Read(func(s engine.Snapshot) error {
		page, err := query.Sessions(s, query.SessionFilter{})
		list = page.Sessions
		return err
	})
	return list
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

// A new thread's foreground is bound from thread/started (an ephemeral
// thread is skipped), and its permissions are read once its first turn
// started; only one foreground may wait for its thread at a time. A
// foreground bound by id is read at attach, and answered with the
// thread's own directory. Detaching ends each live part.
func TestForegrounds_AttachOnTheRealAppServer(t *testing.T) {
	r := newFgRig(t)
	ctx := codextest.Context(t)
	user := r.user()

	fg := &ipc.Conn{}
	rep, err := r.f.Attach(ctx, fg, api.CLIAttachArgs{Mode: sessions.ModeNewThread, Cwd: r.cwd})
	if err != nil || rep.Outcome != "awaiting_thread" || rep.Session != nil || !rep.AutoContinuation {
		t.Fatalf("attach a new thread: %+v %v", rep, err)
	}
	r.f.claimTimeout = 50 * time.Millisecond
	if _, err = r.f.Attach(ctx, &ipc.Conn{}, api.CLIAttachArgs{Mode: sessions.ModeExploratory, Cwd: r.cwd}); err == nil {
		t.Fatal("a second foreground awaiting a thread was attached")
	}
	if _, err := user.ThreadStart(ctx, appserver.ThreadStartParams{Cwd: r.cwd, Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	th, err := user.ThreadStart(ctx, appserver.ThreadStartParams{Cwd: r.cwd})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the new thread's session", func() bool { return len(r.sessions()) == 1 })
	list := r.sessions()
	if list[0].BoundThreadID != th.Thread.ID || list[0].SessionEpoch != 1 || list[0].SessionState != fsm.SessionLive {
		t.Fatalf("bound %+v, want thread %s (the ephemeral one skipped)", list[0], th.Thread.ID)
	}
	if _, err := user.TurnStart(ctx, appserver.TurnStartParams{ThreadID: th.Thread.ID, Input: []appserver.Input{appserver.TextInput("first turn")}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first reading", func() bool {
		s, _ := book{r.eng}.Session(list[0].ManagedSessionID)
		return s.SnapshotRevision == 1
	})
	if det, err := r.f.Detach(ctx, fg); err != nil || det.Session == nil || det.Session.SessionState != fsm.SessionDetached {
		t.Fatalf("detach: %+v %v", det, err)
	}

	other := codextest.ThreadWithTurn(t, user, r.cwd)
	fg2 := &ipc.Conn{}
	rep, err = r.f.Attach(ctx, fg2, api.CLIAttachArgs{Mode: sessions.ModeBindThread, BoundThreadID: other, Cwd: "/",
		Profile: events.SessionProfile{Network: codex.ProfileFalse}})
	if err != nil || rep.Outcome != "created" || rep.Session == nil || rep.Cwd != r.cwd || rep.Session.PermissionSnapshotRevision != 1 {
		t.Fatalf("attach by id: %+v %v", rep, err)
	}
	if det, err := r.f.Detach(ctx, fg2); err != nil || det.Outcome != "detached" {
		t.Fatalf("detach: %+v %v", det, err)
	}
	if det, err := r.f.Detach(ctx, &ipc.Conn{}); err != nil || det.Outcome != "not_attached" {
		t.Fatalf("detach of a connection with no foreground: %+v %v", det, err)
	}
}
