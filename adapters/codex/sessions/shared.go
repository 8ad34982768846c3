package sessions

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/probe"
	"github.com/cbth-dev/cbth/adapters/codex/supervisor"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Config configures the shared app-server.
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
}

// Shared is the daemon's shared app-server: started when a `cbth cli
// run` first needs it, kept running by a supervisor, each instance
// probed and recorded (Log.Started, which advances the epochs of the
// sessions bound to an older one) and its end recorded.
type Shared struct {
	endpoint
	cfg Config

	startMu sync.Mutex // one start at a time
	mu      sync.Mutex
	sup     *supervisor.Supervisor
	stop    chan struct{}
	stopped bool
	work    sync.WaitGroup // watcher and listeners
	// The probe's schema of the executable, generated while the first
	// instance starts (it needs the binary, not the server).
	schema     *probe.Schema
	schemaErr  error
	schemaDone chan struct{}
	logFile    *os.File
}

// NewShared returns the shared app-server, started by nothing yet.
func NewShared(cfg Config, book Log) *Shared {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Shared{endpoint: newEndpoint(cfg.Log, book), cfg: cfg, stop: make(chan struct{})}
	s.ensure = s.acquire
	return s
}

// Running is the running, recorded instance as its users need it.
type Running struct {
	Nonce       string
	PID         int
	Socket      string
	CodexBinary string
	CodexHome   string
	// Probe is nil when the capability probe passed.
	Probe error
}

// Ensure returns the running, recorded instance, starting the supervisor
// the first time and waiting while it restarts one. Its probe may have
// failed: only a managed session needs it to pass.
func (s *Shared) Ensure(ctx context.Context) (Running, error) {
	in, err := s.acquire(ctx)
	if err != nil {
		return Running{}, err
	}
	inst := in.proc.(*supervisor.Instance)
	s.mu.Lock()
	bin := s.sup.Binary()
	s.mu.Unlock()
	return Running{Nonce: in.nonce, PID: inst.Identity.PID, Socket: inst.Socket, CodexBinary: bin, CodexHome: s.cfg.CodexHome, Probe: in.probe}, nil
}

// EnsureRunning starts the shared app-server if it is not running and
// returns the running instance's nonce.
func (s *Shared) EnsureRunning(ctx context.Context) (string, error) {
	in, err := s.acquire(ctx)
	if err != nil {
		return "", err
	}
	return in.nonce, nil
}

func (s *Shared) acquire(ctx context.Context) (*instance, error) {
	s.startMu.Lock()
	defer s.startMu.Unlock()
	for {
		s.mu.Lock()
		sup, stopped := s.sup, s.stopped
		s.mu.Unlock()
		if stopped {
			return nil, errs.New(errs.EHOSTDOWN, "the daemon is stopping")
		}
		cur, changed := s.running()
		if cur != nil {
			return cur, nil
		}
		if sup == nil {
			if err := s.start(ctx); err != nil {
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
// the supervisor; the watcher records the first instance.
func (s *Shared) start(ctx context.Context) error {
	bin, err := home.LookCodex(s.cfg.Codex)
	if err != nil {
		return err
	}
	if err := home.CheckUnshared("codex_binary", bin, true); err != nil {
		return err
	}
	if err := os.MkdirAll(s.cfg.CodexHome, 0o700); err != nil {
		return errs.Wrap(errs.ENOTCONF, err, "codex_home %s", s.cfg.CodexHome)
	}
	if s.logFile == nil {
		if s.logFile, err = os.OpenFile(s.cfg.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			return errs.Wrap(errs.EACCES, err, "app-server log")
		}
	}
	sup, err := supervisor.New(supervisor.Config{
		Codex: bin, Args: s.cfg.Args, CodexHome: s.cfg.CodexHome, Dir: s.cfg.RunDir, Env: s.cfg.Env, Log: s.logFile,
		ClientInfo: appserver.ClientInfo{Name: "cbth", Title: "cbth", Version: s.cfg.Version},
		// The daemon reads turns, not their text as it streams.
		Capabilities: appserver.Capabilities{ExperimentalAPI: true, OptOutNotificationMethods: []string{appserver.NoteAgentMessageDelta}},
		Clock:        s.cfg.Clock, Logger: s.log,
		StartTimeout: s.cfg.StartTimeout,
	})
	if err != nil {
		return err
	}
	if err := s.takeOver(ctx, sup.Socket()); err != nil {
		return err
	}
	if s.schemaDone == nil { // once: a start that failed may be tried again
		done := make(chan struct{})
		s.schemaDone = done
		go func() {
			defer close(done)
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s.schema, s.schemaErr = probe.LoadSchema(sctx, bin, sup.Env(), s.cfg.TempDir)
		}()
	}
	inst, err := sup.Start(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.sup = sup
	s.mu.Unlock()
	s.work.Add(1)
	go s.watch(inst)
	return nil
}

// watch follows the supervisor's instances for as long as the daemon
// runs: each is listened to, probed and recorded, and its end recorded.
func (s *Shared) watch(inst *supervisor.Instance) {
	defer s.work.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-s.stop
		cancel()
	}()
	defer cancel()
	for {
		in := &instance{proc: inst, nonce: inst.Identity.Nonce}
		listening := make(chan struct{})
		s.work.Add(1)
		go func() {
			defer s.work.Done()
			s.listen(in, s.stop, listening)
		}()
		<-listening
		recorded := s.adopt(ctx, in, inst)
		select {
		case <-inst.Exited():
		case <-s.stop:
			<-inst.Exited() // Stop terminates it
		}
		reason, status := codex.ExitExited, ""
		if st := inst.ExitState(); st != nil {
			status = st.String()
		}
		if s.isStopped() {
			reason = codex.ExitStopped
		}
		if recorded {
			if err := s.book.Exited(context.Background(), in.nonce, reason, status); err != nil {
				s.log.Error("record app-server exit", "instance", in.nonce, "err", err)
			}
		}
		s.retire(in)
		if s.isStopped() {
			return
		}
		next, err := s.sup.Instance(ctx)
		if err != nil {
			s.log.Info("codex app-server supervision ended", "err", err)
			return
		}
		inst = next
	}
}

func (s *Shared) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// adopt probes a new instance and records it; it is then handed out. A
// probe that fails is recorded too: the instance serves exploratory
// foregrounds, and managed sessions refuse it.
func (s *Shared) adopt(ctx context.Context, in *instance, inst *supervisor.Instance) bool {
	in.report, in.probe = s.runProbe(ctx, inst)
	st := events.AppServerStarted{PID: inst.Identity.PID, StartedAt: inst.Identity.StartedAt, Nonce: in.nonce,
		Socket: inst.Socket, CodexBinary: s.sup.Binary(), CodexHome: s.cfg.CodexHome, UserAgent: inst.Init.UserAgent,
		ProbePassed: in.probe == nil}
	if in.probe != nil {
		st.ProbeCode = string(errs.CodeOf(in.probe))
	}
	if in.report != nil {
		st.ProbeMissing = in.report.Missing
		st.Probe, _ = json.Marshal(in.report)
	}
	if err := s.book.Started(ctx, st); err != nil {
		s.log.Error("record app-server start", "instance", in.nonce, "err", err)
		return false
	}
	s.log.Info("codex app-server ready", "instance", inst.Identity.String(), "probe_passed", in.probe == nil, "probe", errString(in.probe))
	s.publish(in)
	return true
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// runProbe proves the capabilities delivery needs on a fresh connection.
// The schema is read once per executable.
func (s *Shared) runProbe(ctx context.Context, inst *supervisor.Instance) (*probe.Report, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	<-s.schemaDone
	if s.schema == nil {
		// The first try failed; every new instance tries again.
		if s.schema, s.schemaErr = probe.LoadSchema(ctx, s.sup.Binary(), s.sup.Env(), s.cfg.TempDir); s.schemaErr != nil {
			return nil, s.schemaErr
		}
	}
	c, err := inst.Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return probe.Probe(ctx, c, s.schema, probe.Options{ClientInfo: appserver.ClientInfo{Name: "cbth", Title: "cbth", Version: s.cfg.Version}, Steer: s.cfg.Steer})
}

// Stop stops the app-server (recording its end) and waits for the
// goroutines. The log must still take records.
func (s *Shared) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	close(s.stop)
	sup := s.sup
	s.mu.Unlock()
	var err error
	if sup != nil {
		err = sup.Stop(ctx)
	}
	s.work.Wait()
	if s.logFile != nil {
		s.logFile.Close()
	}
	return err
}
