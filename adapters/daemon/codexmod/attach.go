package codexmod

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// foregrounds are the `cbth cli run` clients attached to the shared
// app-server, each on its daemon connection, and the managed sessions
// they create and attach. They hear the shared app-server's
// notifications as a watcher: a new thread's thread/started binds the
// foreground that waits for it, and its first turn lets its permissions
// be read.
type foregrounds struct {
	srv *sessions.Shared
	eng *engine.Engine
	log *slog.Logger
	// claimTimeout bounds the wait of a foreground that will start a
	// thread while another one's thread/started is awaited.
	claimTimeout time.Duration
	stop         chan struct{}
	work         sync.WaitGroup

	// The foreground whose thread/started is awaited (new_thread or
	// exploratory), holding slot: events carry no client attribution, so
	// the first ordinary thread/started after it launched is its thread,
	// and no two may wait at once.
	slot    chan struct{}
	mu      sync.Mutex
	pending *foreground
	fgs     map[*ipc.Conn]*foreground
}

// foreground is one attached `cbth cli run`.
type foreground struct {
	mode     string
	profile  events.SessionProfile
	instance string // the nonce of the instance it runs on
	detached bool
	// Set once bound: the session and its thread. materialized is set when
	// the thread has had a turn (or was read), so it can be resumed.
	session      string
	thread       string
	materialized bool
	read         bool
	warnings     []string
}

func newForegrounds(srv *sessions.Shared, eng *engine.Engine, log *slog.Logger) *foregrounds {
	f := &foregrounds{srv: srv, eng: eng, log: log, claimTimeout: 30 * time.Second, stop: make(chan struct{}),
		slot: make(chan struct{}, 1), fgs: map[*ipc.Conn]*foreground{}}
	srv.Watch(f)
	return f
}

func (f *foregrounds) exec(ctx context.Context, d engine.Decider) (engine.Result, error) {
	return f.eng.Execute(ctx, meta, d)
}

// Attach serves cli.attach: it starts the shared app-server if needed and
// attaches the foreground on conn in the requested mode. A managed mode
// needs the capability probe to have passed (ENOTSUP otherwise). The
// foreground stays attached until Detach or until conn ends.
func (f *foregrounds) Attach(ctx context.Context, conn *ipc.Conn, a api.CLIAttachArgs) (api.CLIAttachReply, error) {
	if conn == nil {
		return api.CLIAttachReply{}, errs.New(errs.EINTERNAL, "cli.attach outside a connection")
	}
	prof, err := codex.CheckProfile(a.Profile)
	if err != nil {
		return api.CLIAttachReply{}, err
	}
	switch a.Mode {
	case sessions.ModeBindThread:
		if a.BoundThreadID == "" {
			return api.CLIAttachReply{}, errs.New(errs.EINVAL, "bind_thread needs a thread id")
		}
	case sessions.ModeNewThread:
	case sessions.ModeExploratory:
		if prof != (events.SessionProfile{Approval: codex.ProfileAuto, Network: codex.ProfileAuto, WriteAccess: codex.ProfileAuto}) {
			return api.CLIAttachReply{}, errs.New(errs.EINVAL, "--session-allows-* describe a managed session: give --new-thread or --bind-thread-id")
		}
	default:
		return api.CLIAttachReply{}, errs.New(errs.EINVAL, "unknown cli run mode %q", a.Mode)
	}
	if !filepath.IsAbs(a.Cwd) {
		return api.CLIAttachReply{}, errs.New(errs.EINVAL, "the foreground's directory %q is not absolute", a.Cwd)
	}
	f.mu.Lock()
	_, dup := f.fgs[conn]
	f.mu.Unlock()
	if dup {
		return api.CLIAttachReply{}, errs.New(errs.ESTATE, "this connection already has a foreground attached")
	}
	in, err := f.srv.Ensure(ctx)
	if err != nil {
		return api.CLIAttachReply{}, err
	}
	if a.Mode != sessions.ModeExploratory && in.Probe != nil {
		return api.CLIAttachReply{}, errs.Wrap(errs.CodeOf(in.Probe), in.Probe,
			"the codex app-server failed the capability probe, so no managed session can continue automatically (without --new-thread and --bind-thread-id, `cbth cli run` starts an exploratory session)")
	}
	fg := &foreground{mode: a.Mode, profile: prof, instance: in.Nonce}
	rep := api.CLIAttachReply{Mode: a.Mode, Socket: in.Socket, CodexBinary: in.CodexBinary, CodexHome: in.CodexHome,
		Cwd: a.Cwd, Warnings: []string{}}
	if a.Mode == sessions.ModeBindThread {
		ts, res, err := f.attachBound(ctx, fg, a.BoundThreadID)
		if err != nil {
			return api.CLIAttachReply{}, err
		}
		rep.Outcome = res
		if ts.Cwd != "" {
			rep.Cwd = ts.Cwd // the thread's own project
		}
	} else {
		if err := f.claim(ctx, fg); err != nil {
			return api.CLIAttachReply{}, err
		}
		rep.Outcome = "awaiting_thread"
		if a.Mode == sessions.ModeExploratory {
			rep.Outcome = "exploratory"
		}
	}
	f.mu.Lock()
	f.fgs[conn] = fg
	rep.Warnings = append(rep.Warnings, fg.warnings...)
	f.mu.Unlock()
	conn.OnClose(func() {
		f.detach(conn, "foreground connection closed")
		f.mu.Lock()
		delete(f.fgs, conn)
		f.mu.Unlock()
	})
	rep.AutoContinuation = a.Mode != sessions.ModeExploratory
	rep.Session = f.sessionView(fg.session)
	rep.AppServer = f.appServerView(in.Nonce)
	return rep, nil
}

// attachBound reads the thread on the running instance and runs
// attach-or-create with that reading. The read comes first, so the
// snapshot is of the thread as the foreground will find it: a resume of a
// thread this process already loaded ignores the settings it is given.
func (f *foregrounds) attachBound(ctx context.Context, fg *foreground, thread string) (appserver.ThreadSession, engine.Outcome, error) {
	ts, err := f.srv.Resume(ctx, fg.instance, thread)
	if err != nil {
		return ts, "", err
	}
	r := sessions.ReadingOf(ts)
	ar, res, err := engine.Exec[codex.AttachResult](ctx, f.eng, meta, codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: thread, Profile: fg.profile, Instance: fg.instance, Reading: &r})
	if err != nil {
		return ts, "", err
	}
	if ar.Refusal != nil {
		return ts, "", ar.Refusal
	}
	fg.session, fg.thread, fg.materialized, fg.read = ar.SessionID, thread, true, true
	if ar.Retired != "" {
		fg.warnings = append(fg.warnings, fmt.Sprintf("managed session %s retired: the requested profile differs; session %s replaces it", ar.Retired, ar.SessionID))
	}
	if ar.Obs != nil && ar.Obs.Drift != nil {
		w := ar.Obs.Drift.Warning(ar.SessionID)
		if ar.Obs.Drift.Recorded {
			f.log.Warn(w)
		}
		fg.warnings = append(fg.warnings, w)
	}
	return ts, res.Outcome, nil
}

// claim makes fg the foreground whose thread/started is awaited, waiting
// for another such foreground's thread to start.
func (f *foregrounds) claim(ctx context.Context, fg *foreground) error {
	t := time.NewTimer(f.claimTimeout)
	defer t.Stop()
	select {
	case f.slot <- struct{}{}:
	case <-t.C:
		return errs.New(errs.EBUSY, "another `cbth cli run` is waiting for its Codex to start a thread; try again when it has")
	case <-ctx.Done():
		return errs.Wrap(errs.ETIMEDOUT, ctx.Err(), "waiting for another foreground's thread")
	}
	f.mu.Lock()
	f.pending = fg
	f.mu.Unlock()
	return nil
}

// Notification implements sessions.Watcher: a foreground's new thread is
// bound on its thread/started; a bound thread that becomes active has had
// its first turn, so it can now be read.
func (f *foregrounds) Notification(instance string, msg appserver.Message) {
	switch msg.Method {
	case appserver.NoteThreadStarted:
		var n appserver.ThreadStartedNote
		if json.Unmarshal(msg.Params, &n) != nil || n.Thread.ID == "" || sessions.IgnoredThread(n.Thread) {
			return
		}
		f.mu.Lock()
		fg := f.pending
		if fg != nil && fg.instance == instance {
			f.pending = nil
			<-f.slot
		} else {
			fg = nil
		}
		f.mu.Unlock()
		if fg != nil && fg.mode == sessions.ModeNewThread {
			f.bindNewThread(fg, n.Thread.ID)
		}
	case appserver.NoteThreadStatusChanged:
		var n appserver.ThreadStatusChangedNote
		if json.Unmarshal(msg.Params, &n) != nil || n.Status.Type != appserver.ThreadActive {
			return
		}
		f.mu.Lock()
		var todo []*foreground
		for _, fg := range f.fgs {
			if fg.thread == n.ThreadID && fg.session != "" && !fg.read && !fg.detached {
				fg.materialized, fg.read = true, true
				todo = append(todo, fg)
			}
		}
		f.mu.Unlock()
		for _, fg := range todo {
			f.work.Add(1)
			go f.firstReading(fg)
		}
	}
}

// Reconnected implements sessions.Watcher: a foreground follows no turn.
func (f *foregrounds) Reconnected(string) {}

// bindNewThread durably binds a new-thread foreground's session to the
// thread its Codex started.
func (f *foregrounds) bindNewThread(fg *foreground, thread string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, _, err := engine.Exec[codex.AttachResult](ctx, f.eng, meta, codex.AttachSession{Mode: codex.ModeNewThread, ThreadID: thread, Profile: fg.profile, Instance: fg.instance})
	if err != nil {
		f.log.Error("bind new thread", "thread", thread, "err", err)
		f.warn(fg, fmt.Sprintf("thread %s was not bound: %v", thread, err))
		return
	}
	if r.Refusal != nil {
		f.warn(fg, fmt.Sprintf("thread %s was not bound: %s (%s)", thread, r.Refusal.Message, r.Refusal.Code))
		return
	}
	f.mu.Lock()
	fg.session, fg.thread = r.SessionID, thread
	detached := fg.detached
	f.mu.Unlock()
	f.log.Info("new thread bound", "managed_session_id", r.SessionID, "bound_thread_id", thread)
	if detached {
		// The foreground left before the bind landed.
		f.detachSession(fg, "foreground exited")
	}
}

// firstReading takes the permission snapshot of a new thread once its
// first turn started: before that no other connection can resume it.
func (f *foregrounds) firstReading(fg *foreground) {
	defer f.work.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last error
	for try := 0; try < 5; try++ {
		if try > 0 {
			select {
			case <-time.After(time.Duration(try) * 200 * time.Millisecond):
			case <-f.stop:
				return
			}
		}
		ts, err := f.srv.Resume(ctx, fg.instance, fg.thread)
		if err == nil {
			var obs codex.Observation
			obs, _, err = engine.Exec[codex.Observation](ctx, f.eng, meta, codex.ObservePermissions{SessionID: fg.session, Instance: fg.instance, Reading: sessions.ReadingOf(ts)})
			if err == nil {
				if obs.Drift != nil {
					w := obs.Drift.Warning(obs.SessionID)
					f.log.Warn(w)
					f.warn(fg, w)
				}
				return
			}
		}
		last = err
		if errs.CodeOf(err) == errs.ESTALE {
			break
		}
	}
	f.log.Warn("first permission reading failed", "managed_session_id", fg.session, "err", last)
	f.warn(fg, fmt.Sprintf("the permissions of thread %s could not be read (%v); they stay unknown, so delivery stays on the manual path", fg.thread, last))
}

func (f *foregrounds) warn(fg *foreground, w string) {
	f.mu.Lock()
	fg.warnings = append(fg.warnings, w)
	f.mu.Unlock()
}

// Detach serves cli.detach: the foreground on conn has exited.
func (f *foregrounds) Detach(_ context.Context, conn *ipc.Conn) (api.CLIDetachReply, error) {
	fg := f.detach(conn, "foreground exited")
	if fg == nil {
		return api.CLIDetachReply{Outcome: "not_attached", Warnings: []string{}}, nil
	}
	f.mu.Lock()
	w := append([]string{}, fg.warnings...)
	f.mu.Unlock()
	return api.CLIDetachReply{Outcome: "detached", Session: f.sessionView(fg.session), Warnings: w}, nil
}

// detach ends conn's foreground once: it gives back the thread-start slot
// and records the session's live part over.
func (f *foregrounds) detach(conn *ipc.Conn, reason string) *foreground {
	f.mu.Lock()
	fg := f.fgs[conn]
	if fg == nil || fg.detached {
		f.mu.Unlock()
		return fg
	}
	fg.detached = true
	if f.pending == fg {
		f.pending = nil
		<-f.slot
	}
	f.mu.Unlock()
	f.detachSession(fg, reason)
	return fg
}

func (f *foregrounds) detachSession(fg *foreground, reason string) {
	f.mu.Lock()
	session, never := fg.session, fg.mode == sessions.ModeNewThread && !fg.materialized
	f.mu.Unlock()
	if session == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.exec(ctx, codex.DetachSession{SessionID: session, Reason: reason, NeverMaterialized: never}); err != nil {
		f.log.Error("detach session", "managed_session_id", session, "err", err)
	}
}

func (f *foregrounds) sessionView(id string) *query.SessionView {
	if id == "" {
		return nil
	}
	var v *query.SessionView
	_ = f.eng.Read(func(r engine.Snapshot) error {
		in, err := query.InspectSession(r, id, "")
		if err == nil {
			v = &in.Session
		}
		return nil
	})
	return v
}

func (f *foregrounds) appServerView(nonce string) *query.AppServerView {
	var v *query.AppServerView
	_ = f.eng.Read(func(r engine.Snapshot) error {
		if a, err := engine.AppServer(r, nonce); a != nil && err == nil {
			av := query.NewAppServerView(a)
			v = &av
		}
		return nil
	})
	return v
}

// close stops the first readings in flight and waits for them.
func (f *foregrounds) close() {
	close(f.stop)
	f.work.Wait()
}
