// Package supervisor runs one `codex app-server --listen unix://DIR/codex.sock`
// with its own CODEX_HOME, keeps it running, and says which process is
// serving: every start is an instance with an identity (pid, start time and
// a random nonce), so a caller can tell a reconnection to the same process
// from a restarted one. The process started may be a wrapper that serves
// the socket through a child (ServesFor says which processes count).
//
// The app-server runs in its own process group. Stop sends SIGTERM to the
// group, then SIGKILL after a grace period; an instance that dies has the
// rest of its group killed too, so no Codex process outlives its instance.
package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/internal/errs"
)

// SocketName is the app-server's socket inside Config.Dir. Codex turns it
// into a symlink to a short socket of its own in the system temp
// directory, so Dir may be long.
const SocketName = "codex.sock"

// Defaults of the Config durations.
const (
	DefaultStartTimeout = 30 * time.Second
	DefaultStopGrace    = 5 * time.Second
	DefaultMinBackoff   = 100 * time.Millisecond
	DefaultMaxBackoff   = 30 * time.Second
	// An instance that ran this long was healthy: the next restart after it
	// starts over at the shortest backoff.
	healthyRun = time.Minute
	// How often the socket is tried while the app-server starts. It takes
	// about 0.1 s to listen, so this wastes little.
	dialPoll = 5 * time.Millisecond
)

// Config describes the app-server to run.
type Config struct {
	Codex     string   // the codex executable
	Args      []string // extra arguments after `app-server --listen unix://...` (e.g. -c overrides)
	CodexHome string   // CODEX_HOME of the app-server: required, never the user's ~/.codex by default
	Dir       string   // private directory (created 0700) for the socket
	Cwd       string   // working directory of the process; default Dir
	// Env is the process environment without CODEX_HOME (which CodexHome
	// sets); nil means the supervisor's own.
	Env []string
	// Log receives the app-server's stdout and stderr; nil discards them. A
	// file, not any writer: a copying goroutine would make waiting for the
	// process also wait for every helper that inherited the pipe.
	Log *os.File

	ClientInfo   appserver.ClientInfo
	Capabilities appserver.Capabilities

	Clock  engine.Clock
	Logger *slog.Logger

	StartTimeout time.Duration // spawn to initialized
	StopGrace    time.Duration // SIGTERM to SIGKILL
	MinBackoff   time.Duration // first restart delay after a crash loop begins
	MaxBackoff   time.Duration
}

// Identity names one app-server process. Two identities are the same
// instance only when all three parts match: a pid alone can be reused, and
// a start time alone can repeat on a coarse or manual clock.
type Identity struct {
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"`
	Nonce     string    `json:"nonce"`
}

func (id Identity) String() string {
	return fmt.Sprintf("pid %d started %s nonce %s", id.PID, id.StartedAt.Format(time.RFC3339Nano), id.Nonce)
}

// Instance is one running app-server process.
type Instance struct {
	Identity Identity
	Init     appserver.InitializeResult
	Socket   string
	// ServerPID is the process that serves the socket: Identity.PID, or a
	// process that one runs (a wrapper's child; see ServesFor).
	ServerPID int

	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	client *appserver.Client
	state  *os.ProcessState
	cfg    *Config
}

// Client is the supervisor's initialized connection to the instance. When
// that connection drops while the process lives, the supervisor reconnects
// and Client returns the new one; the instance (and its identity) stays.
func (i *Instance) Client() *appserver.Client {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.client
}

// Exited is closed when the process has exited.
func (i *Instance) Exited() <-chan struct{} { return i.exited }

// Notifications hands each notification sent on the supervisor's
// connection to the instance to each, and after a reconnection to the
// same process goes on with the new connection (what was sent in between
// is lost), until the instance exits or stop closes (nil: never).
// subscribed runs once each subscription is in place, before its
// notifications, with first true only the first time. A subscriber that
// fell behind (the connection is fine) has lost what was dropped: that is
// logged and it subscribes again.
func (i *Instance) Notifications(stop <-chan struct{}, log *slog.Logger, subscribed func(first bool), each func(appserver.Message)) {
	for first := true; ; first = false {
		c := i.Client()
		sub := c.Subscribe()
		subscribed(first)
		for msg := range sub.C() {
			if msg.Kind == appserver.KindNotification {
				each(msg)
			}
		}
		select {
		case <-c.Done():
		default:
			log.Warn("codex app-server notifications lost", "err", sub.Err())
			continue
		}
		for i.Client() == c {
			select {
			case <-i.Exited():
				return
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

// ExitState is how the process ended, once Exited is closed.
func (i *Instance) ExitState() *os.ProcessState {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.state
}

// Dial opens another initialized connection to this instance, with the
// supervisor's client info and capabilities. It fails (ESTALE) if the
// socket is now served by another process.
func (i *Instance) Dial(ctx context.Context) (*appserver.Client, error) {
	c, err := i.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := c.Initialize(ctx, i.cfg.ClientInfo, i.cfg.Capabilities); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Connect opens a connection to this instance that is not initialized yet
// (for the capability probe, which initializes itself). It fails (ESTALE)
// if the socket is now served by another process.
func (i *Instance) Connect(ctx context.Context) (*appserver.Client, error) {
	t, _, err := dialServed(ctx, i.Socket, i.Identity)
	if err != nil {
		return nil, err
	}
	return appserver.New(t, appserver.Options{Logger: i.cfg.Logger}), nil
}

// dialServed connects to socket and checks, from the kernel's record of
// the listener's pid, that the process serving it is the instance id or
// one it runs (ServesFor); it returns that pid. Another process is ESTALE.
func dialServed(ctx context.Context, socket string, id Identity) (appserver.Transport, int, error) {
	t, peer, err := appserver.DialUnix(ctx, socket)
	if err != nil {
		return nil, 0, err
	}
	if !ServesFor(id.PID, peer.PID) {
		t.Close()
		return nil, peer.PID, errs.New(errs.ESTALE, "codex app-server socket %s is served by pid %d, which is not instance %s nor in its process group or tree", socket, peer.PID, id)
	}
	return t, peer.PID, nil
}

// Supervisor keeps one app-server running.
type Supervisor struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	cur      *Instance
	changed  chan struct{} // closed and replaced whenever cur or lastErr changes
	lastErr  error
	starts   int
	stopping bool
	stop     chan struct{}
	done     chan struct{}
}

// New checks cfg and returns a supervisor that has not started anything.
func New(cfg Config) (*Supervisor, error) {
	switch {
	case cfg.Codex == "":
		return nil, errs.New(errs.EINVAL, "codex app-server: no codex executable configured")
	case cfg.CodexHome == "" || !filepath.IsAbs(cfg.CodexHome):
		return nil, errs.New(errs.EINVAL, "codex app-server: CODEX_HOME must be an absolute path, got %q", cfg.CodexHome)
	case cfg.Dir == "" || !filepath.IsAbs(cfg.Dir):
		return nil, errs.New(errs.EINVAL, "codex app-server: the socket directory must be an absolute path, got %q", cfg.Dir)
	case cfg.Clock == nil:
		return nil, errs.New(errs.EINVAL, "codex app-server: no clock")
	case cfg.ClientInfo.Name == "" || cfg.ClientInfo.Version == "":
		return nil, errs.New(errs.EINVAL, "codex app-server: client info needs a name and a version")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Cwd == "" {
		cfg.Cwd = cfg.Dir
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	for _, d := range []*time.Duration{&cfg.StartTimeout, &cfg.StopGrace, &cfg.MinBackoff, &cfg.MaxBackoff} {
		if *d < 0 {
			return nil, errs.New(errs.EINVAL, "codex app-server: negative duration %v", *d)
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.StartTimeout, DefaultStartTimeout)
	def(&cfg.StopGrace, DefaultStopGrace)
	def(&cfg.MinBackoff, DefaultMinBackoff)
	def(&cfg.MaxBackoff, DefaultMaxBackoff)
	return &Supervisor{cfg: cfg, log: cfg.Logger, changed: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// Env is the environment the app-server runs with (CODEX_HOME included):
// the one to run other codex subcommands with, such as the schema
// generator the capability probe reads.
func (s *Supervisor) Env() []string {
	return append(withoutCodexHome(s.cfg.Env), "CODEX_HOME="+s.cfg.CodexHome)
}

// Binary is the codex executable the supervisor runs.
func (s *Supervisor) Binary() string { return s.cfg.Codex }

// Socket is the path the app-server listens on.
func (s *Supervisor) Socket() string { return filepath.Join(s.cfg.Dir, SocketName) }

// Start spawns the first instance and waits until it is initialized; after
// that, the supervisor restarts it whenever it exits, until Stop. A first
// start that fails is returned and nothing keeps running.
func (s *Supervisor) Start(ctx context.Context) (*Instance, error) {
	s.mu.Lock()
	if s.starts > 0 || s.stopping {
		s.mu.Unlock()
		return nil, errs.New(errs.ESTATE, "codex app-server supervisor already started")
	}
	s.starts = 1
	s.mu.Unlock()
	inst, err := s.first(ctx)
	if err != nil {
		s.mu.Lock()
		s.stopping = true
		s.mu.Unlock()
		close(s.done)
		return nil, err
	}
	s.publish(inst, nil)
	go s.run(inst)
	return inst, nil
}

func (s *Supervisor) first(ctx context.Context) (*Instance, error) {
	if err := os.MkdirAll(s.cfg.Dir, 0o700); err != nil {
		return nil, errs.Wrap(errs.EACCES, err, "codex app-server directory")
	}
	if err := os.Chmod(s.cfg.Dir, 0o700); err != nil {
		return nil, errs.Wrap(errs.EACCES, err, "codex app-server directory")
	}
	if err := s.checkFree(ctx); err != nil {
		return nil, err
	}
	return s.spawn(ctx)
}

// checkFree refuses to start when something already answers on the
// socket: an app-server left by an earlier cbth (or started by hand) that
// cbth cannot vouch for. A socket file nobody answers on is left to Codex,
// which replaces a stale one itself.
func (s *Supervisor) checkFree(ctx context.Context) error {
	if _, err := os.Lstat(s.Socket()); err != nil {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	t, peer, err := appserver.DialUnix(dctx, s.Socket())
	if err != nil {
		if errs.CodeOf(err) == errs.EACCES {
			return err
		}
		return nil
	}
	t.Close()
	return errs.New(errs.EBUSY, "a codex app-server (pid %d) already listens at %s", peer.PID, s.Socket())
}

// Instance returns the running instance, waiting while one starts. It
// fails when ctx ends or the supervisor stops.
func (s *Supervisor) Instance(ctx context.Context) (*Instance, error) {
	for {
		s.mu.Lock()
		cur, changed, stopping := s.cur, s.changed, s.stopping
		s.mu.Unlock()
		if cur != nil {
			select {
			case <-cur.exited:
			default:
				return cur, nil
			}
		}
		if stopping {
			return nil, errs.New(errs.EHOSTDOWN, "codex app-server supervisor stopped")
		}
		select {
		case <-changed:
		case <-ctx.Done():
			s.mu.Lock()
			last := s.lastErr
			s.mu.Unlock()
			if last != nil {
				return nil, errs.Wrap(errs.ETIMEDOUT, last, "codex app-server not running")
			}
			return nil, errs.Wrap(errs.ETIMEDOUT, ctx.Err(), "codex app-server not running")
		}
	}
}

// Starts counts the instances started so far, the first included.
func (s *Supervisor) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

func (s *Supervisor) publish(inst *Instance, err error) {
	s.mu.Lock()
	s.cur, s.lastErr = inst, err
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// run watches the current instance, reconnects while it lives, and
// restarts it when it exits.
func (s *Supervisor) run(inst *Instance) {
	defer close(s.done)
	backoff := time.Duration(0)
	for {
		s.watch(inst)
		if s.isStopping() {
			return
		}
		ran := s.cfg.Clock.Now().Sub(inst.Identity.StartedAt)
		s.log.Warn("codex app-server exited; restarting", "instance", inst.Identity.String(), "state", inst.ExitState().String(), "ran", ran)
		s.publish(nil, fmt.Errorf("instance %s exited: %s", inst.Identity, inst.ExitState()))
		if ran >= healthyRun {
			backoff = 0
		}
		for {
			if backoff > 0 && !s.sleep(backoff) {
				return
			}
			backoff = min(max(2*backoff, s.cfg.MinBackoff), s.cfg.MaxBackoff)
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-s.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			next, err := s.spawn(ctx)
			cancel()
			if err == nil {
				inst = next
				s.mu.Lock()
				s.starts++
				s.mu.Unlock()
				s.publish(inst, nil)
				break
			}
			if s.isStopping() {
				return
			}
			s.log.Error("codex app-server failed to start", "err", err, "retry_in", backoff)
			s.publish(nil, err)
		}
	}
}

// watch returns when inst has exited (and its group is gone), or at once
// when the supervisor stops. A dropped connection to a live process is
// re-made: the instance is unchanged.
func (s *Supervisor) watch(inst *Instance) {
	for {
		c := inst.Client()
		select {
		case <-inst.exited:
			return
		case <-s.stop:
			return
		case <-c.Done():
		}
		s.log.Warn("codex app-server connection lost; reconnecting to the same instance", "instance", inst.Identity.String(), "err", c.Err())
		for {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StartTimeout)
			nc, err := inst.Dial(ctx)
			cancel()
			if err == nil {
				inst.mu.Lock()
				inst.client = nc
				inst.mu.Unlock()
				break
			}
			select {
			case <-inst.exited:
				return
			case <-s.stop:
				return
			case <-time.After(s.cfg.MinBackoff):
			}
		}
	}
}

func (s *Supervisor) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

func (s *Supervisor) sleep(d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-s.stop:
		return false
	}
}

// spawn starts one process and waits for it to serve an initialized
// connection. Any failure leaves no process behind.
func (s *Supervisor) spawn(ctx context.Context) (*Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
	defer cancel()
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return nil, errs.Wrap(errs.EINTERNAL, err, "instance nonce")
	}
	args := append([]string{"app-server", "--listen", "unix://" + s.Socket()}, s.cfg.Args...)
	cmd := exec.Command(s.cfg.Codex, args...)
	cmd.Env = s.Env()
	cmd.Dir = s.cfg.Cwd
	if s.cfg.Log != nil {
		cmd.Stdout, cmd.Stderr = s.cfg.Log, s.cfg.Log
	}
	// Its own group: a terminal's ^C to cbth does not reach it, and Stop
	// can signal Codex's helper processes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, errs.Wrap(errs.ENOTCONF, err, "start codex app-server (%s)", s.cfg.Codex)
	}
	inst := &Instance{
		Identity: Identity{PID: cmd.Process.Pid, StartedAt: s.cfg.Clock.Now(), Nonce: hex.EncodeToString(nonce)},
		Socket:   s.Socket(),
		cmd:      cmd,
		exited:   make(chan struct{}),
		cfg:      &s.cfg,
	}
	go func() {
		_ = cmd.Wait()
		// The group outlives its leader only through helpers Codex started;
		// with the leader gone nothing will stop them, so they go now. While
		// any of them lives, the kernel hands the group's id to no other
		// process, so this reaches them or, with none left, nobody.
		_ = syscall.Kill(-inst.Identity.PID, syscall.SIGKILL)
		inst.mu.Lock()
		inst.state = cmd.ProcessState
		inst.mu.Unlock()
		close(inst.exited)
	}()

	c, init, server, err := s.connect(ctx, inst)
	if err != nil {
		s.kill(inst)
		return nil, err
	}
	inst.client, inst.Init, inst.ServerPID = c, init, server
	attrs := []any{"instance", inst.Identity.String(), "socket", inst.Socket, "user_agent", init.UserAgent}
	if server != inst.Identity.PID {
		attrs = append(attrs, "served_by_pid", server)
	}
	s.log.Info("codex app-server started", attrs...)
	return inst, nil
}

// connect polls the socket until the new process (or one it runs) serves
// it, then initializes; it returns the serving pid. The kernel's record
// of the listening pid proves the connection reaches this instance and
// not an older one.
func (s *Supervisor) connect(ctx context.Context, inst *Instance) (*appserver.Client, appserver.InitializeResult, int, error) {
	var last error
	for {
		select {
		case <-inst.exited:
			return nil, appserver.InitializeResult{}, 0, errs.New(errs.EHOSTDOWN, "codex app-server exited while starting (%s)%s", inst.ExitState(), lastErr(last))
		default:
		}
		t, server, err := dialServed(ctx, inst.Socket, inst.Identity)
		if err == nil {
			c := appserver.New(t, appserver.Options{Logger: s.log})
			init, err := c.Initialize(ctx, s.cfg.ClientInfo, s.cfg.Capabilities)
			if err != nil {
				c.Close()
				return nil, init, 0, err
			}
			return c, init, server, nil
		}
		if errs.CodeOf(err) == errs.EACCES {
			return nil, appserver.InitializeResult{}, 0, err
		}
		if ctx.Err() == nil { // a dial cut short by the deadline says less than the one before it
			last = err
		}
		select {
		case <-ctx.Done():
			return nil, appserver.InitializeResult{}, 0, errs.Wrap(errs.ETIMEDOUT, ctx.Err(), "codex app-server did not serve %s within %v%s", inst.Socket, s.cfg.StartTimeout, lastErr(last))
		case <-inst.exited:
		case <-time.After(dialPoll):
		}
	}
}

func lastErr(err error) string {
	if err == nil {
		return ""
	}
	return "; last attempt: " + err.Error()
}

// Stop stops the supervisor and its instance: SIGTERM to the process
// group, SIGKILL after StopGrace (or when ctx ends first). It returns once
// the process has exited.
func (s *Supervisor) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.starts == 0 {
		s.stopping = true
		s.mu.Unlock()
		return nil
	}
	already := s.stopping
	s.stopping = true
	s.mu.Unlock()
	if !already {
		close(s.stop)
	}
	<-s.done
	// The run loop has returned, so cur is the last instance it published;
	// one it was still starting has been killed by the cancelled start.
	s.mu.Lock()
	inst := s.cur
	s.mu.Unlock()
	if inst == nil {
		return nil
	}
	if c := inst.Client(); c != nil {
		c.Close()
	}
	return s.terminate(ctx, inst)
}

func (s *Supervisor) terminate(ctx context.Context, inst *Instance) error {
	select {
	case <-inst.exited:
		return nil
	default:
	}
	_ = syscall.Kill(-inst.Identity.PID, syscall.SIGTERM)
	grace := time.NewTimer(s.cfg.StopGrace)
	defer grace.Stop()
	select {
	case <-inst.exited:
		return nil
	case <-grace.C:
	case <-ctx.Done():
	}
	s.log.Warn("codex app-server ignored SIGTERM; killing it", "instance", inst.Identity.String())
	s.kill(inst)
	return nil
}

// kill ends the group at once and waits for the leader.
func (s *Supervisor) kill(inst *Instance) {
	_ = syscall.Kill(-inst.Identity.PID, syscall.SIGKILL)
	<-inst.exited
}

func withoutCodexHome(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "CODEX_HOME=") {
			out = append(out, kv)
		}
	}
	return out
}
