package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/daemon/codexmod"
	"github.com/cbth-dev/cbth/adapters/daemon/cortexmod"
	"github.com/cbth-dev/cbth/adapters/daemon/desktopmod"
	"github.com/cbth-dev/cbth/adapters/daemon/gatewaymod"
	"github.com/cbth-dev/cbth/adapters/daemon/inspectmod"
	"github.com/cbth-dev/cbth/adapters/daemon/mcpmod"
	"github.com/cbth-dev/cbth/adapters/daemon/pluginmod"
	"github.com/cbth-dev/cbth/adapters/daemon/tasksmod"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
	"github.com/cbth-dev/cbth/internal/proc"
	"github.com/cbth-dev/cbth/internal/rotate"
	"golang.org/x/sys/unix"
)

// DaemonCmd groups the daemon commands.
type DaemonCmd struct {
	Run     DaemonRunCmd     `cmd:"" help:"Run the daemon in the foreground (other commands start it on demand)."`
	Status  DaemonStatusCmd  `cmd:"" help:"Show the daemon's pid, version, uptime, log head, active jobs and idle deadline."`
	Stop    DaemonStopCmd    `cmd:"" help:"Ask the running daemon to stop (running tasks are stopped; their jobs fail)."`
	Restart DaemonRestartCmd `cmd:"" help:"Hand the home over to a daemon of this binary, without losing work (after an upgrade)."`
}

// DaemonRunCmd is `cbth daemon run`.
type DaemonRunCmd struct {
	Quiet      bool `help:"Log only to $CBTH_HOME/log/daemon.log, not to stderr."`
	Supervised bool `help:"Never exit on idle: a service manager runs this daemon (cbth service install)."`
}

// Run runs the daemon until it is stopped, signalled or idle.
func (c *DaemonRunCmd) Run(env *Env) error {
	// Nothing of whoever started the daemon stays open in it, nor
	// passes on to its tasks (spec/tasks.md, "Supervision").
	if err := proc.CloseInherited(); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "close inherited descriptors")
	}
	h, err := env.Home()
	if err != nil {
		return err
	}
	if err := h.Ensure(); err != nil {
		return err
	}
	// The log opens first, so that every reason not to start (the
	// configuration included) is in it.
	logFile, err := os.OpenFile(h.DaemonLog(), os.O_CREATE|os.O_APPEND|os.O_WRONLY|syscall.O_NOFOLLOW, home.FileMode)
	if err != nil {
		return errs.Wrap(errs.EACCES, err, "open %s", h.DaemonLog())
	}
	sink := &logSink{f: logFile}
	defer func() { sink.f.Close() }()
	var w io.Writer = sink
	if !c.Quiet {
		w = io.MultiWriter(sink, env.Stderr)
	}
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})).With("pid", os.Getpid())
	switch err = c.run(env, h, log, sink); {
	case err == daemon.ErrRunning:
		// Lost a start race or started twice: the other daemon serves.
		log.Info("another daemon holds the lock; exiting")
		if env.JSON {
			return env.emit(map[string]string{"outcome": "already_running"}, nil)
		}
		fmt.Fprintln(env.Stderr, "cbth: a daemon is already running for", h.Root)
		return nil
	case err != nil:
		log.Error("exiting", "err", err, "code", errs.CodeOf(err))
	}
	return err
}

// logSink is daemon.log as the daemon's logger writes it: a file that
// can be replaced under the logger when it is rotated.
type logSink struct {
	mu sync.Mutex
	f  *os.File
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Write(p)
}

// rotate moves daemon.log aside past max bytes (keeping keep older
// copies) and goes on in a new one. Only the daemon that holds the home
// calls it (daemon.Options.Locked).
func (s *logSink) rotate(path string, max int64, keep int, log *slog.Logger) {
	s.mu.Lock()
	done, err := rotate.IfOver(path, max, keep)
	if err == nil && done {
		var f *os.File
		if f, err = os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY|syscall.O_NOFOLLOW, home.FileMode); err == nil {
			s.f.Close()
			s.f = f
		}
	}
	s.mu.Unlock()
	switch {
	case err != nil:
		log.Warn("rotate daemon.log", "err", err)
	case done:
		log.Info("log rotated", "path", path, "max_bytes", max, "keep", keep)
	}
}

func (s *logSink) file() *os.File {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f
}

func (c *DaemonRunCmd) run(env *Env, h home.Home, log *slog.Logger, sink *logSink) error {
	cfg, err := h.LoadConfig(env.Getenv)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	opt := daemon.Options{Home: h, Config: cfg, Clock: engine.SystemClock{}, Version: Version, Log: log, Supervised: c.Supervised,
		Modules: daemonModules(),
		Locked:  func() { sink.rotate(h.DaemonLog(), cfg.Log.MaxBytes, cfg.Log.Keep, log) }}
	if c.Quiet {
		// A daemon started by a command reports to it through its
		// stdout until it serves (see spawnDaemon); from then on its
		// standard output and error, a runtime crash report included,
		// go to its log.
		opt.Ready = func() { redirectStdio(sink.file(), log) }
	}
	if v := env.Getenv("CBTH_TEST_CLOCK"); v != "" {
		// A stopped clock for deterministic runs: time moves only with
		// `cbth debug clock advance`, and nothing happens on a timer.
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return errs.New(errs.EINVAL, "CBTH_TEST_CLOCK=%q is not an RFC 3339 time", v)
		}
		opt.Clock, opt.Manual = engine.NewManualClock(t), true
		log.Warn("manual clock: time moves only on request", "now", t)
	}
	daemon.TuneGC(env.Getenv)
	return daemon.Run(ctx, opt)
}

// daemonModules are the daemon's features, in the order they start,
// reconcile, catch up and stop: tasks stop first (their ends are
// recorded while the rest still runs); CortexFS catches up its session
// directories and trees, then Desktop publishes its snapshot, then the
// gateway starts serving. The MCP tools run task_run's tasks on the task
// runner.
func daemonModules() []daemon.Module {
	tasks := tasksmod.New()
	codex := codexmod.New()
	return []daemon.Module{tasks, codex, pluginmod.New(), cortexmod.New(), desktopmod.New(), gatewaymod.New(), mcpmod.New(tasks, codex), inspectmod.New()}
}

// redirectStdio points descriptors 1 and 2 at f.
func redirectStdio(f *os.File, log *slog.Logger) {
	for _, fd := range []int{1, 2} {
		if err := unix.Dup2(int(f.Fd()), fd); err != nil {
			log.Error("redirect standard descriptors to the log", "fd", fd, "err", err)
		}
	}
}

// DaemonStatusCmd is `cbth daemon status`.
type DaemonStatusCmd struct{}

// Run prints the status.
func (c *DaemonStatusCmd) Run(env *Env) error {
	st, err := call(env, api.DaemonStatus, api.Empty{})
	if err != nil {
		return err
	}
	return env.emit(st, func(w io.Writer) {
		fmt.Fprintf(w, "cbth daemon %s, pid %d, up %s\n", st.Version, st.PID, time.Duration(st.UptimeSeconds*float64(time.Second)).Round(time.Second))
		fmt.Fprintf(w, "home:            %s\n", st.Home)
		fmt.Fprintf(w, "log head:        seq %d (projections at %d, lag %d)\n", st.LogHeadSeq, st.Checkpoint, st.ProjectionLag)
		fmt.Fprintf(w, "active jobs:     %d\n", st.ActiveJobs)
		fmt.Fprintf(w, "clients:         %d attached\n", st.AttachedClients)
		fmt.Fprintf(w, "deliveries:      %d in flight, %s parked, %d closed undelivered\n", st.Deliveries, plural.Count(st.ParkedBatches, "batch", "batches"), st.UndeliveredBatches)
		if len(st.BusyReasons) > 0 {
			fmt.Fprintf(w, "kept alive by:   %s\n", strings.Join(st.BusyReasons, "; "))
		}
		fmt.Fprintf(w, "idle exit after: %s (at %s unless busy)\n", st.IdleTimeout, st.IdleDeadline.Local().Format(time.TimeOnly))
		if st.NextDue != nil {
			fmt.Fprintf(w, "next deadline:   %s\n", st.NextDue.Local().Format(time.RFC3339))
		}
	})
}

// DaemonStopCmd is `cbth daemon stop`. It never starts a daemon.
type DaemonStopCmd struct {
	Wait time.Duration `help:"How long to wait for the daemon to exit." default:"10s"`
}

// Run asks the daemon to stop and waits until its socket is gone.
func (c *DaemonStopCmd) Run(env *Env) error {
	h, err := env.Home()
	if err != nil {
		return err
	}
	cl, err := ipc.Dial(h.Socket(), Version)
	if err != nil {
		if ipc.Absent(err) && h.DaemonRunning() {
			// It holds the lock but cannot be reached (its socket file
			// was removed): stop it by signal instead.
			return c.signal(env, h)
		}
		if ipc.Absent(err) {
			return env.emit(map[string]string{"outcome": "already_stopped"}, func(w io.Writer) { fmt.Fprintln(w, "no daemon is running") })
		}
		return errs.Wrap(errs.EHOSTDOWN, err, "connect")
	}
	p, err := api.Ping.Call(cl, api.Empty{})
	if err == nil {
		_, err = api.DaemonStop.Call(cl, api.Empty{})
	}
	cl.Close()
	if errs.CodeOf(err) == errs.EVERSION {
		// A daemon of another protocol: it stops cleanly on SIGTERM too.
		return c.signal(env, h)
	}
	if err != nil {
		return err
	}
	return c.waitExit(env, h, p.PID)
}

func (c *DaemonStopCmd) waitExit(env *Env, h home.Home, pid int) error {
	deadline := time.Now().Add(c.Wait)
	for time.Now().Before(deadline) {
		if !h.DaemonRunning() {
			return env.emit(map[string]any{"outcome": "stopped", "pid": pid}, func(w io.Writer) { fmt.Fprintf(w, "daemon %d stopped\n", pid) })
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errs.New(errs.ETIMEDOUT, "daemon %d did not exit within %s", pid, c.Wait)
}

// signal stops the lock holder with SIGTERM, which it handles as a stop
// request. Its pid is in the lock file, written by the holder itself.
func (c *DaemonStopCmd) signal(env *Env, h home.Home) error {
	pid, err := lockPID(h)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return errs.Wrap(errs.EHOSTDOWN, err, "signal daemon %d", pid)
	}
	return c.waitExit(env, h, pid)
}
