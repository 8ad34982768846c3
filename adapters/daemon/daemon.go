// Package daemon runs cbth's single writer: it takes the home's lock, opens
// the log, catches the projections up, runs the deterministic overdue
// sweep, and only then answers requests on the socket. It exits on its own
// once nothing keeps it busy for the idle timeout.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbth-dev/cbth/adapters/artifact"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/errs"
	"github.com/cbth-dev/cbth/engine/projections"
	"github.com/cbth-dev/cbth/events"
	"golang.org/x/sys/unix"
)

// ErrRunning is returned by Run when another daemon holds the home's lock.
// It is a literal rather than errs.New: errs.New formats through fmt, and
// a package-level call would run fmt at every start of the binary, the
// object runner's included.
var ErrRunning error = &errs.Error{Code: errs.EBUSY, Message: "another cbth daemon is running for this home"}

// Options configure Run.
type Options struct {
	Home    home.Home
	Config  home.Config
	Clock   engine.Clock
	Version string
	Log     *slog.Logger
	// Manual makes the daemon act only when asked: no timer-driven sweep
	// or delivery, the scheduler runs inside each request and on clock
	// advances. Used with a manual clock for deterministic runs.
	Manual bool
}

// Daemon is a running daemon.
type Daemon struct {
	opt       Options
	eng       *engine.Engine
	srv       *ipc.Server
	artifacts artifact.Store
	debug     *target.DebugTarget
	started   time.Time
	stop      context.CancelFunc
	kick      chan struct{}
	schedMu   sync.Mutex
	ctx       context.Context // the daemon's lifetime

	sockMu  sync.Mutex
	sockets map[string]context.CancelFunc // model sockets being served

	inflight     atomic.Int64
	mu           sync.Mutex
	lastActivity time.Time
	idleDeadline time.Time
	lastSweep    command.SweepResult
}

// Run runs the daemon until ctx ends, a stop request arrives, or it has
// been idle for the configured timeout.
func Run(ctx context.Context, opt Options) error {
	if opt.Clock == nil {
		opt.Clock = engine.SystemClock{}
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	h := opt.Home
	if err := h.Ensure(); err != nil {
		return err
	}
	// The lock comes first: before the log is opened and before a stale
	// socket is removed, so two daemons can never both get that far.
	lock, err := takeLock(h.Lock())
	if err != nil {
		return err
	}
	defer lock.Close()

	if err := os.Remove(h.Socket()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return errs.Wrap(errs.EINTERNAL, err, "remove stale socket")
	}
	ln, err := ipc.Listen(h.Socket())
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := &Daemon{opt: opt, stop: cancel, ctx: ctx, sockets: map[string]context.CancelFunc{}, started: opt.Clock.Now(), kick: make(chan struct{}, 1),
		artifacts: artifact.Store{Dir: h.Artifacts(), MaxBytes: opt.Config.MaxResultBytes},
		debug:     &target.DebugTarget{Dir: h.DebugDir(), Now: opt.Clock.Now}}
	ready := make(chan struct{})
	d.srv = &ipc.Server{Handler: d.handle, Version: opt.Version, Log: opt.Log, UID: os.Getuid(), Ready: ready}
	served := make(chan error, 1)
	go func() { served <- d.srv.Serve(ctx, ln) }()

	d.eng, err = engine.Open(h.DB(), engine.Options{Clock: opt.Clock, LockTimeout: 5 * time.Second, Logger: opt.Log})
	if err != nil {
		cancel()
		<-served
		return err
	}
	defer d.eng.Close()
	if err := d.startup(ctx); err != nil {
		cancel()
		<-served
		return err
	}
	d.touch()
	close(ready)
	opt.Log.Info("serving", "socket", h.Socket(), "version", opt.Version, "head", d.eng.Head())

	err = d.loop(ctx)
	cancel()
	if serr := <-served; err == nil {
		err = serr
	}
	opt.Log.Info("stopped", "reason", err)
	return err
}

func takeLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, home.FileMode)
	if err != nil {
		return nil, errs.Wrap(errs.EACCES, err, "open %s", path)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrRunning
		}
		return nil, errs.Wrap(errs.EINTERNAL, err, "lock %s", path)
	}
	// The pid is only for people; the flock is the single-instance guard.
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

// startup catches the projections up and runs the overdue sweep before any
// request is served.
func (d *Daemon) startup(ctx context.Context) error {
	var checkpoint uint64
	if err := d.eng.View(func(v *projections.Tx) error { checkpoint = v.Checkpoint(); return nil }); err != nil {
		return err
	}
	if checkpoint != d.eng.Head() {
		d.opt.Log.Warn("projections behind the log; rebuilding", "checkpoint", checkpoint, "head", d.eng.Head())
		st, err := d.eng.Rebuild(ctx)
		if err != nil {
			return fmt.Errorf("catch up projections: %w", err)
		}
		d.opt.Log.Info("projections rebuilt", "events", st.Events, "aggregates", st.Aggregates)
	}
	res, err := d.eng.Execute(ctx, engine.Meta{Actor: events.ActorSweep, CorrelationID: "startup-reconcile"}, command.ReconcileInFlight{Config: d.deliveryConfig()})
	if err != nil {
		return fmt.Errorf("reconcile in-flight deliveries: %w", err)
	}
	if len(res.Events) > 0 {
		d.opt.Log.Warn("in-flight deliveries parked after restart", "events", len(res.Events))
	}
	if err := d.sweep(ctx, "startup"); err != nil {
		return err
	}
	if err := d.catchUpTrees(); err != nil {
		return err
	}
	// At start no ingest is in flight, so every orphan can go.
	return d.removeOrphans(time.Time{})
}

// sweep runs the deterministic overdue sweep with one captured now, again
// with the same now until it has nothing left to do, then carries out the
// side effects its events call for.
func (d *Daemon) sweep(ctx context.Context, why string) error {
	now := d.opt.Clock.Now()
	total := command.SweepResult{Now: now}
	for round := 0; round < 1000; round++ {
		res, err := d.eng.ExecuteAt(ctx, engine.Meta{Actor: events.ActorSweep, CorrelationID: "sweep:" + why}, now, command.Sweep{Config: d.deliveryConfig()})
		if err != nil {
			return fmt.Errorf("%s sweep: %w", why, err)
		}
		sr, _ := res.Value.(command.SweepResult)
		if round == 0 {
			total.Due = sr.Due
		}
		total.Collected = append(total.Collected, sr.Collected...)
		total.Closed = append(total.Closed, sr.Closed...)
		total.Parked = append(total.Parked, sr.Parked...)
		for _, id := range sr.Collected {
			if err := d.artifacts.Remove(id); err != nil {
				d.opt.Log.Error("artifact gc", "artifact", id, "err", err)
			}
		}
		if len(res.Events) == 0 {
			break
		}
	}
	d.mu.Lock()
	d.lastSweep = total
	d.mu.Unlock()
	if len(total.Closed)+len(total.Parked)+len(total.Collected) > 0 || why == "startup" {
		d.opt.Log.Info("sweep", "why", why, "now", now.Format(time.RFC3339Nano), "due", total.Due,
			"closed", len(total.Closed), "parked", len(total.Parked), "collected", len(total.Collected))
	}
	d.runParkHooks(ctx, now)
	return nil
}

// poke asks for a scheduling pass: at once in manual mode (inside the
// request), otherwise from the loop.
func (d *Daemon) poke(ctx context.Context) {
	if d.opt.Manual {
		d.schedule(ctx)
		return
	}
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

func (d *Daemon) removeOrphans(notAfter time.Time) error {
	live := map[string]bool{}
	err := d.eng.View(func(v *projections.Tx) error {
		return v.ForEach(events.KindArtifact, func(s aggregate.State) error {
			if s.Head().Status == "stored" {
				live[s.Head().ID] = true
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	orphans, err := d.artifacts.Orphans(func(id string) bool { return live[id] }, notAfter)
	if err != nil {
		return err
	}
	for _, o := range orphans {
		d.opt.Log.Info("removing orphan artifact entry", "entry", o)
		if err := d.artifacts.RemoveEntry(o); err != nil {
			d.opt.Log.Error("remove orphan", "entry", o, "err", err)
		}
	}
	return nil
}

func (d *Daemon) touch() {
	d.mu.Lock()
	d.lastActivity = d.opt.Clock.Now()
	d.mu.Unlock()
}

// loop sweeps what falls due and watches the idle rule.
func (d *Daemon) loop(ctx context.Context) error {
	tick := d.opt.Config.Delivery.SweepInterval.Duration
	if idle := d.opt.Config.IdleTimeout.Duration / 4; idle < tick {
		tick = idle
	}
	if tick < 10*time.Millisecond {
		tick = 10 * time.Millisecond
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	orphanEvery := time.NewTicker(time.Minute)
	defer orphanEvery.Stop()
	if !d.opt.Manual {
		d.schedule(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-orphanEvery.C:
			_ = d.removeOrphans(d.opt.Clock.Now().Add(-d.opt.Config.OrphanGrace.Duration))
		case <-d.kick:
			d.schedule(ctx)
		case <-t.C:
			now := d.opt.Clock.Now()
			if !d.opt.Manual {
				if next, ok := d.nextDue(); ok && !next.After(now) {
					if err := d.sweep(ctx, "timer"); err != nil {
						d.opt.Log.Error("sweep", "err", err)
					}
				}
				d.schedule(ctx)
			}
			if d.idle(now) {
				d.opt.Log.Info("idle timeout reached; exiting", "idle_timeout", d.opt.Config.IdleTimeout.Duration)
				return nil
			}
		}
	}
}

func (d *Daemon) nextDue() (time.Time, bool) {
	var due projections.Due
	var ok bool
	_ = d.eng.View(func(v *projections.Tx) error { due, ok = v.NextDue(); return nil })
	return due.At, ok
}

// busy reports what keeps the daemon alive right now: active jobs,
// attached integration clients, requests in flight, or work due within the
// idle timeout. Deadlines further out do not count: the next start sweeps
// them.
func (d *Daemon) busy(now time.Time) (reasons []string) {
	if n := d.activeJobs(); n > 0 {
		reasons = append(reasons, fmt.Sprintf("%d active jobs", n))
	}
	if n := d.srv.Attached(); n > 0 {
		reasons = append(reasons, fmt.Sprintf("%d integration clients", n))
	}
	if n := d.inflight.Load(); n > 0 {
		reasons = append(reasons, fmt.Sprintf("%d requests in flight", n))
	}
	if next, ok := d.nextDue(); ok && next.Before(now.Add(d.opt.Config.IdleTimeout.Duration)) {
		reasons = append(reasons, "work due at "+next.Format(time.RFC3339))
	}
	return reasons
}

func (d *Daemon) idle(now time.Time) bool {
	if len(d.busy(now)) > 0 {
		d.touch()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.idleDeadline = d.lastActivity.Add(d.opt.Config.IdleTimeout.Duration)
	return !now.Before(d.idleDeadline)
}

func (d *Daemon) activeJobs() int {
	var n uint64
	_ = d.eng.View(func(v *projections.Tx) error {
		n = v.Count(aggregate.CountJobActive)
		return nil
	})
	return int(n)
}
