// Package sessions is the daemon's side of the Codex CLI: the shared
// app-server it owns (started when a CLI session first needs it,
// supervised, its every instance recorded with what the capability probe
// proved), the foreground `cbth cli run` clients attached to it, and the
// managed sessions they create and attach. Decisions are the pure
// commands of engine/command (session.go); this package talks to Codex
// and feeds them what it saw. spec/codex-cli.md describes the contract.
package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/probe"
	"github.com/cbth-dev/cbth/adapters/codex/supervisor"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Config configures a Manager.
type Config struct {
	Codex     string // codex executable: a name looked up in PATH, or a path
	CodexHome string // CODEX_HOME of the app-server and the foregrounds; absolute
	RunDir    string // the app-server's private socket directory
	TempDir   string // scratch space (the probe's schema files)
	LogPath   string // the app-server's stdout and stderr
	Env       []string
	// Args are extra arguments of the app-server (`-c` overrides: the
	// agent's cbth MCP tools, spec/mcp.md).
	Args    []string
	Version string // cbth's, for the app-server's clientInfo
	Clock   engine.Clock
	Log     *slog.Logger
	// Steer makes the probe require turn/steer (the steer feature is on).
	Steer bool
	// StartTimeout bounds spawn to initialized (supervisor default when 0).
	StartTimeout time.Duration
	// ClaimTimeout bounds the wait of a foreground that will start a
	// thread while another one's thread/started is awaited (default 30 s).
	ClaimTimeout time.Duration
}

// Manager owns the shared app-server and the attached foregrounds.
type Manager struct {
	cfg Config
	eng *engine.Engine
	log *slog.Logger

	startMu sync.Mutex // one start at a time
	mu      sync.Mutex
	sup     *supervisor.Supervisor
	cur     *instance
	changed chan struct{} // closed and replaced when cur changes
	stop    chan struct{}
	stopped bool
	work    sync.WaitGroup // watcher and readers
	// The probe's schema of the executable, generated while the first
	// instance starts (it needs the binary, not the server).
	schema     *probe.Schema
	schemaErr  error
	schemaDone chan struct{}
	logFile    *os.File

	// The foreground whose thread/started is awaited (new_thread or
	// exploratory), holding slot: events carry no client attribution, so
	// the first ordinary thread/started after it launched is its thread,
	// and no two may wait at once.
	slot    chan struct{}
	pending *foreground
	fgs     map[*ipc.Conn]*foreground

	// The delivery side (delivery.go): the CLI target's watcher, the
	// last status of each thread the running instance reported, and the
	// threads it started that have not begun a turn yet (no rollout).
	watcher Watcher
	status  map[string]string
	unborn  map[string]bool
}

// instance is an app-server instance as recorded.
type instance struct {
	inst   *supervisor.Instance
	nonce  string
	report *probe.Report
	probe  error // nil when the probe passed
}

// foreground is one attached `cbth cli run`.
type foreground struct {
	mode     string
	profile  events.SessionProfile
	in       *instance
	detached bool
	// Set once bound: the session and its thread. materialized is set when
	// the thread has had a turn (or was read), so it can be resumed.
	session      string
	thread       string
	materialized bool
	read         bool
	warnings     []string
}

// New returns a manager that has started nothing.
func New(cfg Config, eng *engine.Engine) *Manager {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.ClaimTimeout == 0 {
		cfg.ClaimTimeout = 30 * time.Second
	}
	return &Manager{cfg: cfg, eng: eng, log: cfg.Log, changed: make(chan struct{}), stop: make(chan struct{}),
		slot: make(chan struct{}, 1), fgs: map[*ipc.Conn]*foreground{}, status: map[string]string{}, unborn: map[string]bool{}}
}

var meta = engine.Meta{Actor: events.ActorAdapter, CorrelationID: "codex-cli"}

func (m *Manager) exec(ctx context.Context, d engine.Decider) (engine.Result, error) {
	return m.eng.Execute(ctx, meta, d)
}

// Ensure returns the running, recorded instance of the shared app-server,
// starting the supervisor the first time and waiting while it restarts
// one. Its probe result may be a failure: only a managed session needs it
// to pass.
func (m *Manager) Ensure(ctx context.Context) (*instance, error) {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	for {
		m.mu.Lock()
		cur, changed, sup, stopped := m.cur, m.changed, m.sup, m.stopped
		m.mu.Unlock()
		if stopped {
			return nil, errs.New(errs.EHOSTDOWN, "the daemon is stopping")
		}
		if cur != nil {
			select {
			case <-cur.inst.Exited():
			default:
				return cur, nil
			}
		}
		if sup == nil {
			if err := m.start(ctx); err != nil {
				return nil, err
			}
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, errs.Wrap(errs.ETIMEDOUT, ctx.Err(), "the codex app-server is restarting")
		}
	}
}

// start resolves the executable and CODEX_HOME, takes the socket over from
// an app-server an earlier daemon of this home left running, and starts
// the supervisor; the first instance is recorded before it returns.
func (m *Manager) start(ctx context.Context) error {
	bin, err := home.LookCodex(m.cfg.Codex)
	if err != nil {
		return err
	}
	if err := home.CheckUnshared("codex_binary", bin, true); err != nil {
		return err
	}
	if err := os.MkdirAll(m.cfg.CodexHome, 0o700); err != nil {
		return errs.Wrap(errs.ENOTCONF, err, "codex_home %s", m.cfg.CodexHome)
	}
	if m.logFile == nil {
		if m.logFile, err = os.OpenFile(m.cfg.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			return errs.Wrap(errs.EACCES, err, "app-server log")
		}
	}
	sup, err := supervisor.New(supervisor.Config{
		Codex: bin, Args: m.cfg.Args, CodexHome: m.cfg.CodexHome, Dir: m.cfg.RunDir, Env: m.cfg.Env, Log: m.logFile,
		ClientInfo: appserver.ClientInfo{Name: "cbth", Title: "cbth", Version: m.cfg.Version},
		// The daemon reads turns, not their text as it streams.
		Capabilities: appserver.Capabilities{ExperimentalAPI: true, OptOutNotificationMethods: []string{appserver.NoteAgentMessageDelta}},
		Clock:        m.cfg.Clock, Logger: m.log,
		StartTimeout: m.cfg.StartTimeout,
	})
	if err != nil {
		return err
	}
	if err := m.takeOver(ctx, sup.Socket()); err != nil {
		return err
	}
	if m.schemaDone == nil { // once: a start that failed may be tried again
		done := make(chan struct{})
		m.schemaDone = done
		go func() {
			defer close(done)
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			m.schema, m.schemaErr = probe.LoadSchema(sctx, bin, sup.Env(), m.cfg.TempDir)
		}()
	}
	inst, err := sup.Start(ctx)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.sup = sup
	m.mu.Unlock()
	m.work.Add(1)
	go m.watch(inst)
	// The watcher records the instance; wait for it so Ensure returns a
	// recorded one.
	return nil
}

// watch follows the supervisor's instances for as long as the manager
// runs: each is listened to, probed and recorded (advancing the epochs of
// the sessions bound to an older one), and its end recorded.
func (m *Manager) watch(inst *supervisor.Instance) {
	defer m.work.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-m.stop
		cancel()
	}()
	defer cancel()
	for {
		listening := make(chan struct{})
		m.work.Add(1)
		go m.listen(inst, listening)
		<-listening
		in := m.adopt(ctx, inst)
		select {
		case <-inst.Exited():
		case <-m.stop:
			<-inst.Exited() // Stop terminates it
		}
		reason, status := codex.ExitExited, ""
		if st := inst.ExitState(); st != nil {
			status = st.String()
		}
		if m.isStopped() {
			reason = codex.ExitStopped
		}
		if in != nil {
			if _, err := m.exec(context.Background(), codex.AppServerExited{Nonce: in.nonce, Reason: reason, Status: status}); err != nil {
				m.log.Error("record app-server exit", "instance", in.nonce, "err", err)
			}
		}
		m.mu.Lock()
		if m.cur == in {
			m.cur = nil
		}
		m.mu.Unlock()
		if m.isStopped() {
			return
		}
		next, err := m.sup.Instance(ctx)
		if err != nil {
			m.log.Info("codex app-server supervision ended", "err", err)
			return
		}
		inst = next
	}
}

func (m *Manager) isStopped() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stopped
}

// adopt probes a new instance and records it; the manager then hands it
// out. A probe that fails is recorded too: the instance serves
// exploratory foregrounds, and managed sessions refuse it.
func (m *Manager) adopt(ctx context.Context, inst *supervisor.Instance) *instance {
	in := &instance{inst: inst, nonce: inst.Identity.Nonce}
	in.report, in.probe = m.runProbe(ctx, inst)
	st := events.AppServerStarted{PID: inst.Identity.PID, StartedAt: inst.Identity.StartedAt, Nonce: in.nonce,
		Socket: inst.Socket, CodexBinary: m.sup.Binary(), CodexHome: m.cfg.CodexHome, UserAgent: inst.Init.UserAgent,
		ProbePassed: in.probe == nil}
	if in.probe != nil {
		st.ProbeCode = string(errs.CodeOf(in.probe))
	}
	if in.report != nil {
		st.ProbeMissing = in.report.Missing
		st.Probe, _ = json.Marshal(in.report)
	}
	if _, err := m.exec(ctx, codex.AppServerStarted{Started: st}); err != nil {
		m.log.Error("record app-server start", "instance", in.nonce, "err", err)
		return nil
	}
	m.log.Info("codex app-server ready", "instance", inst.Identity.String(), "probe_passed", in.probe == nil, "probe", errString(in.probe))
	m.mu.Lock()
	m.cur = in
	m.status = map[string]string{} // a new instance has loaded nothing
	m.unborn = map[string]bool{}
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
	return in
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// runProbe proves the capabilities delivery needs on a fresh connection.
// The schema is read once per executable.
func (m *Manager) runProbe(ctx context.Context, inst *supervisor.Instance) (*probe.Report, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	<-m.schemaDone
	if m.schema == nil {
		// The first try failed; every new instance tries again.
		if m.schema, m.schemaErr = probe.LoadSchema(ctx, m.sup.Binary(), m.sup.Env(), m.cfg.TempDir); m.schemaErr != nil {
			return nil, m.schemaErr
		}
	}
	c, err := inst.Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return probe.Probe(ctx, c, m.schema, probe.Options{ClientInfo: appserver.ClientInfo{Name: "cbth", Title: "cbth", Version: m.cfg.Version}, Steer: m.cfg.Steer})
}

// listen reads the broadcasts of one instance, on the supervisor's
// connection and, after a reconnection to the same process, on the new
// one (notifications sent in between are lost; the instance, and with it
// every session's epoch, stays the same). ready closes once the first
// subscription is in place, before anything learns of the instance.
func (m *Manager) listen(inst *supervisor.Instance, ready chan struct{}) {
	defer m.work.Done()
	once := sync.OnceFunc(func() { close(ready) })
	defer once()
	nonce := inst.Identity.Nonce
	inst.Notifications(m.stop, m.log, func(first bool) {
		once()
		if w := m.watching(); w != nil && !first {
			w.Reconnected(nonce)
		}
	}, func(msg appserver.Message) {
		m.notice(inst, msg)
		m.track(nonce, msg)
	})
}

// notice handles one broadcast: a foreground's new thread is bound on its
// thread/started; a bound thread that becomes active has had its first
// turn, so it can now be read.
func (m *Manager) notice(inst *supervisor.Instance, msg appserver.Message) {
	switch msg.Method {
	case appserver.NoteThreadStarted:
		var n appserver.ThreadStartedNote
		if json.Unmarshal(msg.Params, &n) != nil || n.Thread.ID == "" {
			return
		}
		if n.Thread.Ephemeral || (n.Thread.ThreadSource != nil && *n.Thread.ThreadSource == "thread_title") {
			return
		}
		m.mu.Lock()
		// Marked before the thread is bound, so that no delivery for its
		// session can find it unmarked before its first turn.
		if m.cur != nil && m.cur.inst == inst {
			m.unborn[n.Thread.ID] = true
		}
		fg := m.pending
		if fg != nil && fg.in.inst == inst {
			m.pending = nil
			<-m.slot
		} else {
			fg = nil
		}
		m.mu.Unlock()
		if fg != nil && fg.mode == ModeNewThread {
			m.bindNewThread(fg, n.Thread.ID)
		}
	case appserver.NoteThreadClosed:
		var n appserver.ThreadClosedNote
		if json.Unmarshal(msg.Params, &n) == nil {
			m.mu.Lock()
			delete(m.unborn, n.ThreadID) // unloaded: it is gone from this instance
			m.mu.Unlock()
		}
	case appserver.NoteThreadStatusChanged:
		var n appserver.ThreadStatusChangedNote
		if json.Unmarshal(msg.Params, &n) != nil || n.Status.Type != appserver.ThreadActive {
			return
		}
		m.mu.Lock()
		// A turn started: Codex wrote the thread's rollout as it did.
		delete(m.unborn, n.ThreadID)
		var todo []*foreground
		for _, fg := range m.fgs {
			if fg.thread == n.ThreadID && fg.session != "" && !fg.read && !fg.detached {
				fg.materialized, fg.read = true, true
				todo = append(todo, fg)
			}
		}
		m.mu.Unlock()
		for _, fg := range todo {
			m.work.Add(1)
			go m.firstReading(fg)
		}
	}
}

// bindNewThread durably binds a new-thread foreground's session to the
// thread its Codex started.
func (m *Manager) bindNewThread(fg *foreground, thread string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, _, err := engine.Exec[codex.AttachResult](ctx, m.eng, meta, codex.AttachSession{Mode: codex.ModeNewThread, ThreadID: thread, Profile: fg.profile, Instance: fg.in.nonce})
	if err != nil {
		m.log.Error("bind new thread", "thread", thread, "err", err)
		m.warn(fg, fmt.Sprintf("thread %s was not bound: %v", thread, err))
		return
	}
	if r.Refusal != nil {
		m.warn(fg, fmt.Sprintf("thread %s was not bound: %s (%s)", thread, r.Refusal.Message, r.Refusal.Code))
		return
	}
	m.mu.Lock()
	fg.session, fg.thread = r.SessionID, thread
	detached := fg.detached
	m.mu.Unlock()
	m.log.Info("new thread bound", "managed_session_id", r.SessionID, "bound_thread_id", thread)
	if detached {
		// The foreground left before the bind landed.
		m.detachSession(fg, "foreground exited")
	}
}

// firstReading takes the permission snapshot of a new thread once its
// first turn started: before that no other connection can resume it.
func (m *Manager) firstReading(fg *foreground) {
	defer m.work.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last error
	for try := 0; try < 5; try++ {
		if try > 0 {
			select {
			case <-time.After(time.Duration(try) * 200 * time.Millisecond):
			case <-m.stop:
				return
			}
		}
		obs, err := m.read(ctx, fg.in, fg.session, fg.thread)
		if err == nil {
			m.noteObservation(fg, obs)
			return
		}
		last = err
		if errs.CodeOf(err) == errs.ESTALE {
			break
		}
	}
	m.log.Warn("first permission reading failed", "managed_session_id", fg.session, "err", last)
	m.warn(fg, fmt.Sprintf("the permissions of thread %s could not be read (%v); they stay unknown, so delivery stays on the manual path", fg.thread, last))
}

func (m *Manager) noteObservation(fg *foreground, obs codex.Observation) {
	if obs.Drift != nil {
		w := obs.Drift.Warning(obs.SessionID)
		m.log.Warn(w)
		m.warn(fg, w)
	}
}

func (m *Manager) warn(fg *foreground, w string) {
	m.mu.Lock()
	fg.warnings = append(fg.warnings, w)
	m.mu.Unlock()
}

// read resumes the thread on the instance's connection (which also
// subscribes it to the thread's turns) and records the permissions the
// answer reports.
func (m *Manager) read(ctx context.Context, in *instance, session, thread string) (codex.Observation, error) {
	ts, err := in.inst.Client().ThreadResume(ctx, appserver.ThreadResumeParams{ThreadID: thread, ExcludeTurns: true})
	if err != nil {
		return codex.Observation{}, resumeError(thread, err)
	}
	m.born(thread)
	obs, _, err := engine.Exec[codex.Observation](ctx, m.eng, meta, codex.ObservePermissions{SessionID: session, Instance: in.nonce, Reading: ReadingOf(ts)})
	return obs, err
}

// The refusals of thread/resume that show Codex has no such thread: none
// in its home (or one that never began a turn), or a loaded thread whose
// rollout was deleted under it.
var goneMessages = []string{"no rollout found", "thread not found", "missing source rollout"}

// refusedWith reports whether err is Codex's answer carrying one of msgs.
func refusedWith(err error, msgs ...string) bool {
	var rpc *appserver.RPCError
	if !errors.As(err, &rpc) {
		return false
	}
	for _, s := range msgs {
		if strings.Contains(rpc.Message, s) {
			return true
		}
	}
	return false
}

// resumeError classes a failed thread/resume: a thread the app-server
// cannot find is ENOENT; another refusal keeps its class; no answer stays
// what it was (it proves nothing).
func resumeError(thread string, err error) error {
	if refusedWith(err, goneMessages...) {
		return errs.Wrap(errs.ENOENT, err, "codex has no thread %s in its home (or it never had a turn)", thread)
	}
	return errs.Wrap(errs.CodeOf(err), err, "resume thread %s", thread)
}

// unreachable says why a refused thread/resume shows the thread cannot be
// reached through the shared app-server ("" when it does not): Codex has
// no such thread, or another process holds it. The caller has ruled out
// a thread of this instance that has not begun its first turn, which has
// no rollout yet and is refused the same way.
func unreachable(err error) string {
	var rpc *appserver.RPCError
	if errors.As(err, &rpc) && (refusedWith(err, goneMessages...) || refusedWith(err, "active writer")) {
		return "thread/resume refused: " + rpc.Message
	}
	return ""
}

// ErrAwaitingFirstTurn is the class of Refresh's answer for a thread the
// running instance started that has not begun a turn: Codex writes a
// thread's rollout when its first turn starts, and until then no other
// connection can resume it or read its permissions. Nothing is wrong
// with the thread; delivery waits for that turn.
var ErrAwaitingFirstTurn = errors.New("the thread has not begun its first turn")

// Refreshed is a fresh reading of a session's thread.
type Refreshed struct {
	codex.Observation
	// Thread is the thread/resume answer it came from (its cwd, model and
	// permissions, which a turn/start may need to repeat).
	Thread appserver.ThreadSession
	// Instance is the app-server instance the reading was taken on.
	Instance string
	// Record, from Read, records the reading (nil: there is nothing to
	// record, or Refresh did); Observation is what it would record as of
	// the read.
	Record *codex.ObservePermissions
}

// Refresh reads a session's thread again and records the permissions
// (Read, then its Record).
func (m *Manager) Refresh(ctx context.Context, sessionID string) (Refreshed, error) {
	ref, err := m.Read(ctx, sessionID)
	if err != nil {
		return Refreshed{}, err
	}
	obs, _, err := engine.Exec[codex.Observation](ctx, m.eng, meta, *ref.Record)
	if err != nil {
		return Refreshed{}, err
	}
	ref.Observation, ref.Record = obs, nil
	return ref, nil
}

// Read reads a session's thread again without recording anything: the
// call the CLI delivery target makes before every automatic turn/start.
// Its Effective is the most that turn may be given, and its Record goes
// into the log with the delivery's barrier, in the same append. It fails
// with ESTALE when the session's epoch is not the running instance's
// (the epoch moved on; the caller reads the session again) and with the
// resume's error when Codex refuses; a refusal that shows the thread
// unreachable (gone, or held by another process) marks the session stale.
func (m *Manager) Read(ctx context.Context, sessionID string) (Refreshed, error) {
	in, err := m.Ensure(ctx)
	if err != nil {
		return Refreshed{}, err
	}
	var s *aggregate.Session
	err = m.eng.Read(func(r engine.Snapshot) error {
		st, err := r.State(events.KindSession, sessionID)
		s, _ = st.(*aggregate.Session)
		return err
	})
	if err != nil {
		return Refreshed{}, err
	}
	if s == nil {
		return Refreshed{}, errs.New(errs.ENOENT, "no managed session %s", sessionID)
	}
	if s.AppServerInstance != in.nonce {
		return Refreshed{}, errs.New(errs.ESTALE, "session %s is at epoch %d on instance %s, not the running %s", s.ID, s.Epoch, s.AppServerInstance, in.nonce)
	}
	if m.awaitingFirstTurn(in.nonce, s.BoundThreadID) {
		// Checked before asking: a resume would be refused "no rollout
		// found", which for any other thread proves it gone.
		return Refreshed{}, errs.Wrap(errs.EAGAIN, ErrAwaitingFirstTurn, "thread %s has no rollout until its first turn", s.BoundThreadID)
	}
	ts, err := in.inst.Client().ThreadResume(ctx, appserver.ThreadResumeParams{ThreadID: s.BoundThreadID, ExcludeTurns: true})
	if err != nil {
		if why := unreachable(err); why != "" {
			// Proven by the app-server's own answer: this thread cannot be
			// delivered into through it now.
			if _, serr := m.exec(ctx, codex.MarkSessionStale{SessionID: s.ID, Reason: why}); serr != nil {
				m.log.Error("mark session stale", "managed_session_id", s.ID, "err", serr)
			}
		}
		return Refreshed{}, resumeError(s.BoundThreadID, err)
	}
	m.born(s.BoundThreadID)
	m.NoteThreadStatus(in.nonce, s.BoundThreadID, ts.Thread.Status.Type)
	rec := &codex.ObservePermissions{SessionID: s.ID, Instance: in.nonce, Reading: ReadingOf(ts)}
	if err := rec.Refusal(s); err != nil {
		return Refreshed{}, err
	}
	obs := rec.Observed(s)
	if obs.Drift != nil && obs.Drift.Recorded {
		m.log.Warn(obs.Drift.Warning(s.ID))
	}
	return Refreshed{Observation: obs, Thread: ts, Instance: in.nonce, Record: rec}, nil
}

// Attach serves cli.attach: it starts the shared app-server if needed and
// attaches the foreground on conn in the requested mode. A managed mode
// needs the capability probe to have passed (ENOTSUP otherwise). The
// foreground stays attached until Detach or until conn ends.
func (m *Manager) Attach(ctx context.Context, conn *ipc.Conn, a api.CLIAttachArgs) (api.CLIAttachReply, error) {
	if conn == nil {
		return api.CLIAttachReply{}, errs.New(errs.EINTERNAL, "cli.attach outside a connection")
	}
	prof, err := codex.CheckProfile(a.Profile)
	if err != nil {
		return api.CLIAttachReply{}, err
	}
	switch a.Mode {
	case ModeBindThread:
		if a.BoundThreadID == "" {
			return api.CLIAttachReply{}, errs.New(errs.EINVAL, "bind_thread needs a thread id")
		}
	case ModeNewThread:
	case ModeExploratory:
		if prof != (events.SessionProfile{Approval: codex.ProfileAuto, Network: codex.ProfileAuto, WriteAccess: codex.ProfileAuto}) {
			return api.CLIAttachReply{}, errs.New(errs.EINVAL, "--session-allows-* describe a managed session: give --new-thread or --bind-thread-id")
		}
	default:
		return api.CLIAttachReply{}, errs.New(errs.EINVAL, "unknown cli run mode %q", a.Mode)
	}
	if !filepath.IsAbs(a.Cwd) {
		return api.CLIAttachReply{}, errs.New(errs.EINVAL, "the foreground's directory %q is not absolute", a.Cwd)
	}
	m.mu.Lock()
	_, dup := m.fgs[conn]
	m.mu.Unlock()
	if dup {
		return api.CLIAttachReply{}, errs.New(errs.ESTATE, "this connection already has a foreground attached")
	}
	in, err := m.Ensure(ctx)
	if err != nil {
		return api.CLIAttachReply{}, err
	}
	if a.Mode != ModeExploratory && in.probe != nil {
		return api.CLIAttachReply{}, errs.Wrap(errs.CodeOf(in.probe), in.probe,
			"the codex app-server failed the capability probe, so no managed session can continue automatically (without --new-thread and --bind-thread-id, `cbth cli run` starts an exploratory session)")
	}
	fg := &foreground{mode: a.Mode, profile: prof, in: in}
	rep := api.CLIAttachReply{Mode: a.Mode, Socket: in.inst.Socket, CodexBinary: m.sup.Binary(), CodexHome: m.cfg.CodexHome,
		Cwd: a.Cwd, Warnings: []string{}}
	if a.Mode == ModeBindThread {
		ts, res, err := m.attachBound(ctx, in, fg, a.BoundThreadID)
		if err != nil {
			return api.CLIAttachReply{}, err
		}
		rep.Outcome = res
		if ts.Cwd != "" {
			rep.Cwd = ts.Cwd // the thread's own project
		}
	} else {
		if err := m.claim(ctx, fg); err != nil {
			return api.CLIAttachReply{}, err
		}
		rep.Outcome = "awaiting_thread"
		if a.Mode == ModeExploratory {
			rep.Outcome = "exploratory"
		}
	}
	m.mu.Lock()
	m.fgs[conn] = fg
	rep.Warnings = append(rep.Warnings, fg.warnings...)
	m.mu.Unlock()
	conn.OnClose(func() {
		m.detach(conn, "foreground connection closed")
		m.mu.Lock()
		delete(m.fgs, conn)
		m.mu.Unlock()
	})
	rep.AutoContinuation = a.Mode != ModeExploratory
	rep.Session = m.sessionView(fg.session)
	av := m.appServerView(in.nonce)
	rep.AppServer = av
	return rep, nil
}

// attachBound reads the thread on the running instance and runs
// attach-or-create with that reading. The read comes first, so the
// snapshot is of the thread as the foreground will find it: a resume of a
// thread this process already loaded ignores the settings it is given.
func (m *Manager) attachBound(ctx context.Context, in *instance, fg *foreground, thread string) (appserver.ThreadSession, engine.Outcome, error) {
	ts, err := in.inst.Client().ThreadResume(ctx, appserver.ThreadResumeParams{ThreadID: thread, ExcludeTurns: true})
	if err != nil {
		return ts, "", resumeError(thread, err)
	}
	m.born(thread)
	r := ReadingOf(ts)
	ar, res, err := engine.Exec[codex.AttachResult](ctx, m.eng, meta, codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: thread, Profile: fg.profile, Instance: in.nonce, Reading: &r})
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
			m.log.Warn(w)
		}
		fg.warnings = append(fg.warnings, w)
	}
	return ts, res.Outcome, nil
}

// claim makes fg the foreground whose thread/started is awaited, waiting
// for another such foreground's thread to start.
func (m *Manager) claim(ctx context.Context, fg *foreground) error {
	t := time.NewTimer(m.cfg.ClaimTimeout)
	defer t.Stop()
	select {
	case m.slot <- struct{}{}:
	case <-t.C:
		return errs.New(errs.EBUSY, "another `cbth cli run` is waiting for its Codex to start a thread; try again when it has")
	case <-ctx.Done():
		return errs.Wrap(errs.ETIMEDOUT, ctx.Err(), "waiting for another foreground's thread")
	}
	m.mu.Lock()
	m.pending = fg
	m.mu.Unlock()
	return nil
}

// Detach serves cli.detach: the foreground on conn has exited.
func (m *Manager) Detach(ctx context.Context, conn *ipc.Conn) (api.CLIDetachReply, error) {
	fg := m.detach(conn, "foreground exited")
	if fg == nil {
		return api.CLIDetachReply{Outcome: "not_attached", Warnings: []string{}}, nil
	}
	m.mu.Lock()
	w := append([]string{}, fg.warnings...)
	m.mu.Unlock()
	return api.CLIDetachReply{Outcome: "detached", Session: m.sessionView(fg.session), Warnings: w}, nil
}

// detach ends conn's foreground once: it gives back the thread-start slot
// and records the session's live part over.
func (m *Manager) detach(conn *ipc.Conn, reason string) *foreground {
	m.mu.Lock()
	fg := m.fgs[conn]
	if fg == nil || fg.detached {
		m.mu.Unlock()
		return fg
	}
	fg.detached = true
	if m.pending == fg {
		m.pending = nil
		<-m.slot
	}
	m.mu.Unlock()
	m.detachSession(fg, reason)
	return fg
}

func (m *Manager) detachSession(fg *foreground, reason string) {
	m.mu.Lock()
	session, never := fg.session, fg.mode == ModeNewThread && !fg.materialized
	m.mu.Unlock()
	if session == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.exec(ctx, codex.DetachSession{SessionID: session, Reason: reason, NeverMaterialized: never}); err != nil {
		m.log.Error("detach session", "managed_session_id", session, "err", err)
	}
}

func (m *Manager) sessionView(id string) *query.SessionView {
	if id == "" {
		return nil
	}
	var v *query.SessionView
	_ = m.eng.Read(func(r engine.Snapshot) error {
		in, err := query.InspectSession(r, id, "")
		if err == nil {
			v = &in.Session
		}
		return nil
	})
	return v
}

func (m *Manager) appServerView(nonce string) *query.AppServerView {
	var v *query.AppServerView
	_ = m.eng.Read(func(r engine.Snapshot) error {
		st, err := r.State(events.KindAppServer, nonce)
		if a, ok := st.(*aggregate.AppServer); ok && err == nil {
			av := query.NewAppServerView(a)
			v = &av
		}
		return nil
	})
	return v
}

// Stop stops the app-server (recording its end) and waits for the
// manager's goroutines. The engine must still be open.
func (m *Manager) Stop(ctx context.Context) error {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return nil
	}
	m.stopped = true
	close(m.stop)
	sup := m.sup
	m.mu.Unlock()
	var err error
	if sup != nil {
		err = sup.Stop(ctx)
	}
	m.work.Wait()
	if m.logFile != nil {
		m.logFile.Close()
	}
	return err
}
