package sessions

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/probe"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/google/uuid"
)

// DaemonConfig configures the Codex daemon transport.
type DaemonConfig struct {
	// CodexHome is the user's Codex home (absolute): its daemon's socket
	// is DaemonSocket(CodexHome).
	CodexHome string
	// Codex is the codex executable whose schema the probe reads when the
	// daemon's own cannot be found (a name looked up in PATH, or a path).
	Codex   string
	Env     []string // the environment codex subcommands run with
	TempDir string   // scratch space (the probe's schema files)
	Version string   // cbth's, for clientInfo
	// Home is this cbth home: the lock that keeps a second home off the
	// same Codex daemon names it.
	Home  string
	Clock engine.Clock
	Log   *slog.Logger
	// Steer makes the probe require turn/steer.
	Steer bool
}

// Daemon is the Codex daemon a plain `codex` runs for the user's Codex
// home: cbth is a second client on its socket, found from the Codex home
// alone, checked before use (CheckDaemonSocket, and the peer's uid),
// probed fail-closed, and recorded as an instance of transport
// codex_daemon: one per process the daemon finds there, a new one after
// cbth restarts (nothing proves the stream continuous across that).
// cbth never starts or stops that daemon.
type Daemon struct {
	endpoint
	cfg DaemonConfig

	connect sync.Mutex // one connection attempt at a time
	mu      sync.Mutex
	lock    *os.File // held while this home delivers into the Codex home
	schemas map[string]*probe.Schema
	stop    chan struct{}
	stopped bool
	work    sync.WaitGroup
}

// NewDaemon returns the Codex daemon transport, connected to nothing yet.
func NewDaemon(cfg DaemonConfig, book Log) *Daemon {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{endpoint: newEndpoint(cfg.Log, book), cfg: cfg, schemas: map[string]*probe.Schema{}, stop: make(chan struct{})}
	d.ensure = d.acquire
	return d
}

// Socket is the path the daemon listens on.
func (d *Daemon) Socket() string { return DaemonSocket(d.cfg.CodexHome) }

// CodexHome is the Codex home the daemon serves.
func (d *Daemon) CodexHome() string { return d.cfg.CodexHome }

// Found is the running instance as Ensure found it.
type Found struct {
	Nonce     string
	PID       int
	UserAgent string
	// Probe is nil when the capability probe passed.
	Probe error
}

// Ensure returns the running, recorded instance of the Codex daemon,
// connecting to it when cbth is not: EHOSTDOWN when no daemon runs,
// EACCES when its socket is not safe to use, EBUSY when another cbth home
// delivers into this Codex home. Its probe may have failed.
func (d *Daemon) Ensure(ctx context.Context) (Found, error) {
	in, err := d.acquire(ctx)
	if err != nil {
		return Found{}, err
	}
	p := in.proc.(*daemonProc)
	return Found{Nonce: in.nonce, PID: p.pid, UserAgent: p.userAgent, Probe: in.probe}, nil
}

// Connected is the instance cbth follows now, if any; it connects to
// nothing.
func (d *Daemon) Connected() (Found, bool) {
	in, _ := d.running()
	if in == nil {
		return Found{}, false
	}
	p := in.proc.(*daemonProc)
	return Found{Nonce: in.nonce, PID: p.pid, UserAgent: p.userAgent, Probe: in.probe}, true
}

func (d *Daemon) acquire(ctx context.Context) (*instance, error) {
	if in, _ := d.running(); in != nil {
		return in, nil
	}
	d.connect.Lock()
	defer d.connect.Unlock()
	if in, _ := d.running(); in != nil {
		return in, nil
	}
	d.mu.Lock()
	stopped := d.stopped
	d.mu.Unlock()
	if stopped {
		return nil, errs.New(errs.EHOSTDOWN, "the daemon is stopping")
	}
	if err := d.takeLock(); err != nil {
		return nil, err
	}
	p, err := d.dial(ctx)
	if err != nil {
		return nil, err
	}
	in := &instance{proc: p, nonce: uuid.Must(uuid.NewV7()).String()}
	listening := make(chan struct{})
	d.work.Add(1)
	go d.follow(in, listening)
	<-listening
	if err := d.adopt(ctx, in, p); err != nil {
		p.client.Close()
		return nil, err
	}
	return in, nil
}

// dial connects to the daemon's socket once it passed the checks, and
// initializes the connection.
func (d *Daemon) dial(ctx context.Context) (*daemonProc, error) {
	path := d.Socket()
	if _, err := CheckDaemonSocket(path, os.Getuid()); err != nil {
		return nil, err
	}
	c, peer, err := d.connectOnce(ctx, path)
	if err != nil {
		return nil, err
	}
	start, err := processStart(peer)
	if err != nil {
		c.Close()
		return nil, errs.Wrap(errs.EHOSTDOWN, err, "the Codex daemon (pid %d)", peer)
	}
	init, err := c.Initialize(ctx, d.clientInfo(), d.capabilities())
	if err != nil {
		c.Close()
		return nil, err
	}
	return &daemonProc{d: d, path: path, pid: peer, start: start, userAgent: init.UserAgent, client: c, exited: make(chan struct{})}, nil
}

func (d *Daemon) connectOnce(ctx context.Context, path string) (*appserver.Client, int, error) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	t, peer, err := appserver.DialUnix(dctx, path)
	if err != nil {
		return nil, 0, err
	}
	return appserver.New(t, appserver.Options{Logger: d.log}), peer.PID, nil
}

func (d *Daemon) clientInfo() appserver.ClientInfo {
	return appserver.ClientInfo{Name: "cbth", Title: "cbth", Version: d.cfg.Version}
}

func (d *Daemon) capabilities() appserver.Capabilities {
	// cbth reads turns, not their text as it streams.
	return appserver.Capabilities{ExperimentalAPI: true, OptOutNotificationMethods: []string{appserver.NoteAgentMessageDelta}}
}

// adopt probes the instance, records it and hands it out.
func (d *Daemon) adopt(ctx context.Context, in *instance, p *daemonProc) error {
	bin, schema, err := d.schema(ctx, p.pid)
	if err != nil {
		in.probe = err // nothing proves what it serves: fail closed
	} else if in.report, in.probe = d.probe(ctx, p, schema); in.report == nil && in.probe != nil {
		switch errs.CodeOf(in.probe) {
		case errs.ETIMEDOUT, errs.EHOSTDOWN, errs.ESTALE:
			// No answer proves nothing either way: not usable now, and
			// nothing to record.
			return in.probe
		}
	}
	st := events.AppServerStarted{Transport: codex.TransportCodexDaemon, PID: p.pid, StartedAt: d.cfg.Clock.Now(), Nonce: in.nonce,
		Socket: p.path, CodexBinary: bin, CodexHome: d.cfg.CodexHome, UserAgent: p.userAgent, ProbePassed: in.probe == nil}
	if in.probe != nil {
		st.ProbeCode = string(errs.CodeOf(in.probe))
	}
	if in.report != nil {
		st.ProbeMissing = in.report.Missing
		st.Probe, _ = json.Marshal(in.report)
	}
	if err := d.book.Started(ctx, st); err != nil {
		return err
	}
	d.mu.Lock()
	in.recorded = true
	d.mu.Unlock()
	d.log.Info("codex daemon found", "instance", in.nonce, "pid", p.pid, "user_agent", p.userAgent, "probe_passed", in.probe == nil, "probe", errString(in.probe))
	d.publish(in)
	return nil
}

// schema is the probe's schema of the executable that serves: the
// daemon's own binary when it can be found, else the configured codex.
func (d *Daemon) schema(ctx context.Context, pid int) (string, *probe.Schema, error) {
	bin := serverExecutable(pid)
	if !fileExists(bin) {
		bin = "" // gone since it started (an npm update replaced it)
	}
	if bin == "" {
		if managed := filepath.Join(d.cfg.CodexHome, "packages", "app-server-daemon", "current", "bin", "codex"); fileExists(managed) {
			bin = managed
		}
	}
	if bin == "" {
		var err error
		if bin, err = home.LookCodex(d.cfg.Codex); err != nil {
			return "", nil, err
		}
	}
	d.mu.Lock()
	s := d.schemas[bin]
	d.mu.Unlock()
	if s != nil {
		return bin, s, nil
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	env := append(withoutCodexHome(d.cfg.Env), "CODEX_HOME="+d.cfg.CodexHome)
	s, err := probe.LoadSchema(sctx, bin, env, d.cfg.TempDir)
	if err != nil {
		return bin, nil, err
	}
	d.mu.Lock()
	d.schemas[bin] = s
	d.mu.Unlock()
	return bin, s, nil
}

// probe proves the capabilities the transport needs on a connection of
// its own: delivery's, and thread/loaded/list (a thread's load state,
// read without loading it).
func (d *Daemon) probe(ctx context.Context, p *daemonProc, s *probe.Schema) (*probe.Report, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, peer, err := d.connectOnce(ctx, p.path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if peer != p.pid {
		return nil, errs.New(errs.ESTALE, "the Codex daemon's socket is served by pid %d now, not %d", peer, p.pid)
	}
	return probe.Probe(ctx, c, s, probe.Options{ClientInfo: d.clientInfo(), Steer: d.cfg.Steer, Require: []string{appserver.MethodThreadLoaded}})
}

// follow listens to the instance until its process is gone (or cbth
// stops), then records its end.
func (d *Daemon) follow(in *instance, ready chan struct{}) {
	defer d.work.Done()
	d.listen(in, d.stop, ready)
	reason := codex.ExitExited
	d.mu.Lock()
	if d.stopped {
		reason = codex.ExitStopped
	}
	recorded := in.recorded
	d.mu.Unlock()
	if recorded {
		if err := d.book.Exited(context.Background(), in.nonce, reason, ""); err != nil {
			d.log.Error("record codex daemon end", "instance", in.nonce, "err", err)
		}
		d.log.Info("codex daemon connection ended", "instance", in.nonce, "reason", reason)
	}
	d.retire(in)
}

// Loaded reports whether the running instance has thread loaded, without
// loading it.
func (d *Daemon) Loaded(ctx context.Context, instance, thread string) (bool, error) {
	c, err := d.Client(instance)
	if err != nil {
		return false, err
	}
	ids, err := c.ThreadLoaded(ctx)
	if err != nil {
		return false, err
	}
	for _, id := range ids {
		if id == thread {
			return true, nil
		}
	}
	return false, nil
}

// Stop ends cbth's connection (the daemon itself runs on) and records
// the end of the stream it followed.
func (d *Daemon) Stop() {
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		return
	}
	d.stopped = true
	close(d.stop)
	d.mu.Unlock()
	if in, _ := d.running(); in != nil {
		in.proc.Client().Close()
	}
	d.work.Wait()
	d.mu.Lock()
	if d.lock != nil {
		d.lock.Close()
		d.lock = nil
	}
	d.mu.Unlock()
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func withoutCodexHome(env []string) []string {
	var out []string
	for _, kv := range env {
		if len(kv) >= len("CODEX_HOME=") && kv[:len("CODEX_HOME=")] == "CODEX_HOME=" {
			continue
		}
		out = append(out, kv)
	}
	return out
}
