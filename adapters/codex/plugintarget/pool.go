package plugintarget

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/adapters/codex/supervisor"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// PoolConfig configures the daemon-owned app-servers of host-plugin
// targets.
type PoolConfig struct {
	CodexHome string // CODEX_HOME every one of them runs with (the daemon's)
	RunDir    string // parent of their private socket directories
	LogPath   string // their stdout and stderr
	Env       []string
	Version   string // cbth's, for clientInfo
	Clock     engine.Clock
	Log       *slog.Logger
	// StartTimeout bounds spawn to initialized (supervisor default when 0).
	StartTimeout time.Duration
}

// Lease is one app-server lease: a thread bound to the daemon-owned
// app-server of one codex executable, with the managed session and
// epoch its accepted turns are reported on. Instance is the nonce of the
// app-server process the lease is bound to now.
type Lease struct {
	ID               string `json:"app_server_lease_id"`
	Scope            string `json:"-"`
	Ownership        string `json:"ownership"`
	PluginID         string `json:"plugin_id"`
	Thread           string `json:"bound_thread_id"`
	CodexBinary      string `json:"codex_binary"`
	ManagedSessionID string `json:"managed_session_id"`
	Epoch            uint64 `json:"session_epoch"`
	Instance         string `json:"app_server_instance"`
	PID              int    `json:"app_server_pid"`
}

// Target is the lease's resolved delivery target, as jobs persist it.
func (l Lease) Target() *events.DeliveryTarget {
	return &events.DeliveryTarget{Ownership: l.Ownership, PluginID: l.PluginID, AppServerLeaseID: l.ID,
		ManagedSessionID: l.ManagedSessionID, BoundThreadID: l.Thread, SessionEpoch: l.Epoch, CodexBinary: l.CodexBinary}
}

// LeaseOf is the lease a persisted target names (Instance unset); its
// scope is named by the lease id, which the scope determines.
func LeaseOf(t *events.DeliveryTarget) Lease {
	scope := scopePluginLease
	if t.Ownership == command.OwnershipDeliveryOwned {
		scope = scopeDeliveryOwned
	}
	return Lease{ID: t.AppServerLeaseID, Scope: scope + ":" + t.AppServerLeaseID, Ownership: t.Ownership, PluginID: t.PluginID, Thread: t.BoundThreadID,
		CodexBinary: t.CodexBinary, ManagedSessionID: t.ManagedSessionID, Epoch: t.SessionEpoch}
}

// Pool runs one daemon-owned app-server per codex executable the plugins
// name, each under a supervisor, and keeps the leases bound to them. It
// is the clitarget.Sessions of the host-plugin target: the same
// turn/start, reconcile and observation code runs on its app-servers.
type Pool struct {
	cfg PoolConfig
	log *slog.Logger

	mu        sync.Mutex
	servers   map[string]*server               // codex executable -> its app-server
	instances map[string]*supervisor.Instance  // nonce -> running instance
	leases    map[string]*Lease                // lease id -> lease
	status    map[string]string                // thread -> last status seen
	watcher   sessions.Watcher                 // the turn/start code's (clitarget)
	lost      func(instance string, l []Lease) // the leases of an instance that ended
	stopped   bool
	logFile   *os.File
	work      sync.WaitGroup
}

type server struct {
	start sync.Mutex // one start at a time
	sup   *supervisor.Supervisor
}

// NewPool returns a pool that runs nothing yet.
func NewPool(cfg PoolConfig) *Pool {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Pool{cfg: cfg, log: cfg.Log, servers: map[string]*server{}, instances: map[string]*supervisor.Instance{},
		leases: map[string]*Lease{}, status: map[string]string{}}
}

// OnLost sets what is told when an instance ends while leases are bound
// to it (set before anything starts).
func (p *Pool) OnLost(f func(instance string, leases []Lease)) {
	p.mu.Lock()
	p.lost = f
	p.mu.Unlock()
}

// Ensure starts (or reuses) the app-server of l's codex executable and
// binds lease l to its running instance. A lease already held keeps its
// managed session; an explicit lease whose app-server was restarted since
// moves to the next epoch (a delivery-owned one keeps epoch 1: its
// accepted turn was parked when the old instance ended). Failures to
// start are returned with their code (ENOTCONF for an executable that
// cannot be found).
func (p *Pool) Ensure(ctx context.Context, l Lease) (Lease, error) {
	bin, err := home.LookCodex(l.CodexBinary)
	if err != nil {
		return Lease{}, err
	}
	if err := home.CheckUnshared("codex_binary", bin, true); err != nil {
		return Lease{}, err
	}
	inst, err := p.instance(ctx, bin)
	if err != nil {
		return Lease{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := p.leases[l.ID]
	switch {
	case cur == nil:
		l.Instance, l.PID = inst.Identity.Nonce, inst.Identity.PID
		cur = &l
		p.leases[l.ID] = cur
	case cur.Instance != inst.Identity.Nonce:
		if cur.Ownership == command.OwnershipExplicitLease {
			cur.Epoch++
		}
		cur.Instance, cur.PID = inst.Identity.Nonce, inst.Identity.PID
	}
	return *cur, nil
}

// ReleaseSession forgets the delivery-owned lease of a managed session
// (its delivery is over); explicit leases stay until the daemon stops.
func (p *Pool) ReleaseSession(sessionID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.bySession(sessionID); l != nil && l.Ownership == command.OwnershipDeliveryOwned {
		delete(p.leases, l.ID)
	}
}

// Lookup returns a held lease.
func (p *Pool) Lookup(id string) (Lease, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.leases[id]
	if l == nil {
		return Lease{}, false
	}
	return *l, true
}

// ByScope returns the held lease of a scope.
func (p *Pool) ByScope(scope string) (Lease, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.leases {
		if l.Scope == scope {
			return *l, true
		}
	}
	return Lease{}, false
}

func (p *Pool) bySession(id string) *Lease {
	for _, l := range p.leases {
		if l.ManagedSessionID == id {
			return l
		}
	}
	return nil
}

// instance returns the running instance of bin's app-server, starting
// its supervisor the first time (and again after a first start failed).
func (p *Pool) instance(ctx context.Context, bin string) (*supervisor.Instance, error) {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return nil, errs.New(errs.EHOSTDOWN, "the daemon is stopping")
	}
	s := p.servers[bin]
	if s == nil {
		s = &server{}
		p.servers[bin] = s
	}
	p.mu.Unlock()
	s.start.Lock()
	defer s.start.Unlock()
	if s.sup != nil {
		return s.sup.Instance(ctx)
	}
	if p.logFile == nil {
		f, err := os.OpenFile(p.cfg.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, errs.Wrap(errs.EACCES, err, "app-server log")
		}
		p.mu.Lock()
		p.logFile = f
		p.mu.Unlock()
	}
	if err := os.MkdirAll(p.cfg.CodexHome, 0o700); err != nil {
		return nil, errs.Wrap(errs.ENOTCONF, err, "codex_home %s", p.cfg.CodexHome)
	}
	sum := sha256.Sum256([]byte(bin))
	sup, err := supervisor.New(supervisor.Config{
		Codex: bin, CodexHome: p.cfg.CodexHome, Dir: filepath.Join(p.cfg.RunDir, hex.EncodeToString(sum[:6])), Env: p.cfg.Env, Log: p.logFile,
		ClientInfo:   appserver.ClientInfo{Name: "cbth", Title: "cbth", Version: p.cfg.Version},
		Capabilities: appserver.Capabilities{ExperimentalAPI: true, OptOutNotificationMethods: []string{appserver.NoteAgentMessageDelta}},
		Clock:        p.cfg.Clock, Logger: p.log, StartTimeout: p.cfg.StartTimeout,
	})
	if err != nil {
		return nil, err
	}
	inst, err := sup.Start(ctx)
	if err != nil {
		return nil, errs.Wrap(errs.CodeOf(err), err, "start the codex app-server of %s", bin)
	}
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped {
		// Stop ran meanwhile and did not see this one.
		_ = sup.Stop(context.WithoutCancel(ctx))
		return nil, errs.New(errs.EHOSTDOWN, "the daemon is stopping")
	}
	s.sup = sup
	ready := make(chan struct{})
	p.work.Add(1)
	go p.watch(sup, inst, ready)
	<-ready
	return inst, nil
}

// watch follows one supervisor's instances: each is listened to while it
// runs, and its end is told (OnLost) with the leases bound to it.
func (p *Pool) watch(sup *supervisor.Supervisor, inst *supervisor.Instance, ready chan struct{}) {
	defer p.work.Done()
	for {
		nonce := inst.Identity.Nonce
		p.mu.Lock()
		p.instances[nonce] = inst
		p.mu.Unlock()
		listening := make(chan struct{})
		p.work.Add(1)
		go p.listen(inst, listening)
		<-listening
		if ready != nil {
			close(ready)
			ready = nil
		}
		<-inst.Exited()
		p.mu.Lock()
		delete(p.instances, nonce)
		var bound []Lease
		for _, l := range p.leases {
			if l.Instance == nonce {
				bound = append(bound, *l)
			}
		}
		lost, stopped := p.lost, p.stopped
		p.mu.Unlock()
		if !stopped && lost != nil && len(bound) > 0 {
			lost(nonce, bound)
		}
		next, err := sup.Instance(context.Background())
		if err != nil {
			return // stopped
		}
		inst = next
	}
}

// listen reads an instance's notifications on the supervisor's
// connection and, after a reconnection to the same process, on the new
// one (Reconnected is told: what was sent in between is lost).
func (p *Pool) listen(inst *supervisor.Instance, ready chan struct{}) {
	defer p.work.Done()
	once := sync.OnceFunc(func() { close(ready) })
	defer once()
	nonce := inst.Identity.Nonce
	inst.Notifications(nil, p.log, func(first bool) {
		once()
		if w := p.watching(); w != nil && !first {
			w.Reconnected(nonce)
		}
	}, func(msg appserver.Message) {
		if msg.Method == appserver.NoteThreadStatusChanged {
			if n, ok := statusNote(msg); ok {
				p.noteStatus(n.ThreadID, n.Status.Type)
			}
		}
		if w := p.watching(); w != nil {
			w.Notification(nonce, msg)
		}
	})
}

func (p *Pool) noteStatus(thread, status string) {
	p.mu.Lock()
	p.status[thread] = status
	p.mu.Unlock()
}

func (p *Pool) watching() sessions.Watcher {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.watcher
}

// Stop stops every app-server the pool runs.
func (p *Pool) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.stopped = true
	var sups []*server
	for _, s := range p.servers {
		sups = append(sups, s)
	}
	p.mu.Unlock()
	var first error
	for _, s := range sups {
		s.start.Lock()
		if s.sup != nil {
			if err := s.sup.Stop(ctx); err != nil && first == nil {
				first = err
			}
		}
		s.start.Unlock()
	}
	p.work.Wait()
	p.mu.Lock()
	if p.logFile != nil {
		p.logFile.Close()
		p.logFile = nil
	}
	p.mu.Unlock()
	return first
}

// ---- clitarget.Sessions ----

// Current implements clitarget.Sessions; the host-plugin target never asks
// the shared app-server's question.
func (p *Pool) Current() (string, bool) { return "", false }

// ThreadStatus implements clitarget.Sessions.
func (p *Pool) ThreadStatus(thread string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status[thread]
}

// AwaitingFirstTurn implements clitarget.Sessions; the host-plugin target
// has its own gate and never asks.
func (p *Pool) AwaitingFirstTurn(string) bool { return false }

// Client implements clitarget.Sessions: the supervisor's connection to
// instance while it runs, ESTALE once it ended.
func (p *Pool) Client(instance string) (*appserver.Client, error) {
	p.mu.Lock()
	inst := p.instances[instance]
	p.mu.Unlock()
	if inst == nil {
		return nil, errs.New(errs.ESTALE, "codex app-server instance %s is not running", instance)
	}
	select {
	case <-inst.Exited():
		return nil, errs.New(errs.ESTALE, "codex app-server instance %s exited", instance)
	default:
	}
	return inst.Client(), nil
}

// Alive implements clitarget.Sessions.
func (p *Pool) Alive(instance string) bool {
	_, err := p.Client(instance)
	return err == nil
}

// Watch implements clitarget.Sessions.
func (p *Pool) Watch(w sessions.Watcher) {
	p.mu.Lock()
	p.watcher = w
	p.mu.Unlock()
}

// Read implements clitarget.Sessions: the lease of a managed session
// resumes its thread on the instance it is bound to (which subscribes the
// pool's connection to the thread's turns) and reads its permissions.
// A host-plugin target has no startup cap of its own: the reading is
// the cap, so strict-safe delivery needs all three false in it. A lease
// is no session aggregate: there is no reading to record (Record nil).
func (p *Pool) Read(ctx context.Context, sessionID string) (sessions.ThreadReading, error) {
	p.mu.Lock()
	l := p.bySession(sessionID)
	var lease Lease
	if l != nil {
		lease = *l
	}
	p.mu.Unlock()
	if l == nil {
		return sessions.ThreadReading{}, errs.New(errs.ENOENT, "no app-server lease holds managed session %s", sessionID)
	}
	c, err := p.Client(lease.Instance)
	if err != nil {
		return sessions.ThreadReading{}, err
	}
	ts, err := c.ThreadResume(ctx, appserver.ThreadResumeParams{ThreadID: lease.Thread, ExcludeTurns: true})
	if err != nil {
		return sessions.ThreadReading{}, errs.Wrap(errs.CodeOf(err), err, "resume thread %s", lease.Thread)
	}
	p.noteStatus(lease.Thread, ts.Thread.Status.Type)
	r := sessions.ReadingOf(ts)
	return sessions.ThreadReading{Observation: codex.Observation{SessionID: sessionID, Epoch: lease.Epoch,
		Startup: r.Current, Current: r.Current, Effective: r.Current}, Thread: ts, Instance: lease.Instance}, nil
}
