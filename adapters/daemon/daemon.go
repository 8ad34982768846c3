// Package daemon runs cbth's single writer: it takes the home's lock, opens
// the log, catches the projections up, runs the deterministic overdue
// sweep, and only then answers requests on the socket. It exits on its own
// once nothing keeps it busy for the idle timeout.
//
// It is the host: the lifecycle, the loop, the sweep, the operation
// table, the delivery core (jobs, batches, the scheduler and the
// targets' calls) and the handover. Each product feature is a Module
// (module.go) in a package of its own beside this one, composed by the
// caller (cmd/cbth); the host knows them only through that interface.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbth-dev/cbth/adapters/artifact"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/task"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/confine"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
	"github.com/cbth-dev/cbth/projections"
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
	// Ready, when set, is called once the daemon serves requests.
	Ready func()
	// Locked, when set, is called as soon as the daemon holds the
	// home's lock, before it logs anything: the place to rotate the log
	// it writes to (a daemon that lost the start race never gets there).
	Locked func()
	// Manual makes the daemon act only when asked: no timer-driven sweep
	// or delivery, the scheduler runs inside each request and on clock
	// advances. Used with a manual clock for deterministic runs.
	Manual bool
	// Targets are the delivery targets besides the built-in debug and
	// desktop ones; each target kind at most once. One of a built-in's
	// kind replaces it.
	Targets []target.Target
	// Supervised says a service manager runs the daemon (cbth service):
	// it never leaves on idle, so Desktop snapshots stay confirmed.
	Supervised bool
	// NoSync skips every fsync, the log's and the file projections'. Only
	// tests that must not wait on the disk set it; it voids durability.
	NoSync bool
	// Modules are the daemon's features, in the order they start,
	// reconcile and catch up (cmd/cbth composes them).
	Modules []Module
}

// Daemon is a running daemon.
type Daemon struct {
	opt       Options
	eng       *engine.Engine
	srv       *ipc.Server
	table     api.Table
	artifacts artifact.Store
	debug     *target.DebugTarget
	targets   []target.Target // the registered delivery targets, by name
	started   time.Time
	stop      context.CancelFunc
	kick      chan struct{}
	sched     scheduler
	hooks     parkHooks
	host      *Host

	inflight     atomic.Int64
	mu           sync.Mutex
	lastActivity time.Time
	idleDeadline time.Time
	lastSweep    command.SweepResult
	sweptHead    uint64             // the log head when the last sweep finished
	sweptLeft    map[index.Due]bool // deadlines by its now the last sweep left as they were
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
	lock, err := takeLock(h)
	if err != nil {
		return err
	}
	defer lock.Close()
	if opt.Locked != nil {
		opt.Locked()
	}

	if err := h.CheckSocket(); err != nil {
		return err
	}
	if err := os.Remove(h.Socket()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return errs.Wrap(errs.EINTERNAL, err, "remove stale socket")
	}
	ln, err := ipc.Listen(h.Socket())
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := &Daemon{opt: opt, stop: cancel, started: opt.Clock.Now(), kick: make(chan struct{}, 1),
		artifacts: artifact.Store{Dir: h.Artifacts(), MaxBytes: opt.Config.MaxResultBytes},
		debug:     &target.DebugTarget{Dir: h.DebugDir(), Now: opt.Clock.Now},
		sched:     scheduler{busy: map[string]bool{}, running: map[string]int{}},
		hooks:     parkHooks{kick: make(chan struct{}, 1), done: make(chan struct{})}}
	d.table = d.ops()
	if opt.Manual {
		close(d.hooks.done) // hooks run inside the sweep
	} else {
		go d.parkHookLoop(ctx)
	}
	ready := make(chan struct{})
	confined := confine.NewTracker()
	d.srv = &ipc.Server{Handler: d.handle, Version: opt.Version, Log: opt.Log, UID: os.Getuid(), Ready: ready,
		Versionless: func(op string) bool { return d.table[op].Versionless }, Refuse: confined.Why}
	served := make(chan error, 1)
	go func() { served <- d.srv.Serve(ctx, ln) }()

	d.eng, err = engine.Open(h.DB(), engine.Options{Projections: projections.Store{}, Clock: opt.Clock, LockTimeout: 5 * time.Second, Logger: opt.Log, NoSync: opt.NoSync})
	if err != nil {
		cancel()
		<-served
		return refuseLog(h, err)
	}
	d.host = &Host{Eng: d.eng, Home: h, Config: opt.Config, Clock: opt.Clock, Log: opt.Log, Version: opt.Version,
		Artifacts: d.artifacts, Manual: opt.Manual, NoSync: opt.NoSync, Confined: confined, d: d}
	started := 0
	defer func() {
		// What outlives a request stops before the log closes:
		// deliveries record their answers, hooks their runs, the
		// modules what they run (tasks their ends, app-servers theirs).
		cancel()
		d.sched.workers.Wait()
		<-d.hooks.done
		for _, m := range opt.Modules[:started] {
			// Each module has its own budget: one slow to stop
			// leaves the next its whole time.
			stopCtx, stopCancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := m.Stop(stopCtx); err != nil {
				opt.Log.Error("stop "+m.Name(), "err", err)
			}
			stopCancel()
		}
		d.eng.Close()
	}()
	for _, m := range opt.Modules {
		if err := m.Start(ctx, d.host); err != nil {
			cancel()
			<-served
			return err
		}
		started++
	}
	d.setTargets()
	if err := d.startup(ctx); err != nil {
		cancel()
		<-served
		return err
	}
	d.touch()
	close(ready)
	opt.Log.Info("serving", "socket", h.Socket(), "version", opt.Version, "head", d.eng.Head())
	if st := confine.Check(); !st.Available {
		// Best effort: agents' shell.exec and the provider helper still
		// run, but nothing keeps them to the agent root (doctor says so too).
		opt.Log.Warn("CONFINEMENT UNAVAILABLE: agents' shell.exec and the provider helper run unconfined", "why", st.Mechanism)
	}
	if opt.Ready != nil {
		opt.Ready()
	}

	err = d.loop(ctx)
	cancel()
	// A request stuck in a system call (a file on a hung network mount)
	// must not keep the daemon from stopping: after a grace period it
	// exits without waiting, and the closed log refuses what the request
	// would append.
	grace := time.NewTimer(shutdownGrace)
	defer grace.Stop()
	select {
	case serr := <-served:
		if err == nil {
			err = serr
		}
	case <-grace.C:
		opt.Log.Warn("requests still running; stopping without them", "grace", shutdownGrace)
	}
	opt.Log.Info("stopped", "reason", err)
	return err
}

// shutdownGrace bounds how long a stopping daemon waits for requests in
// flight.
const shutdownGrace = 5 * time.Second

func takeLock(h home.Home) (*os.File, error) {
	f, err := h.OpenLock()
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrRunning
		}
		return nil, errs.Wrap(errs.EINTERNAL, err, "lock %s", h.Lock())
	}
	// The pid is only for people; the flock is the single-instance guard.
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

// startup catches the projections up, starts the targets, reconciles the
// deliveries the last daemon left in flight and runs the overdue sweep,
// all before any request is served.
func (d *Daemon) startup(ctx context.Context) error {
	current, err := d.eng.ProjectionsCurrent()
	if err != nil {
		return err
	}
	if !current {
		d.opt.Log.Warn("projections behind the log or of another version; rebuilding", "head", d.eng.Head())
		st, err := d.eng.Rebuild(ctx)
		if err != nil {
			return fmt.Errorf("catch up projections: %w", err)
		}
		d.opt.Log.Info("projections rebuilt", "events", st.Events, "aggregates", st.Aggregates)
	}
	if err := d.startTargets(ctx); err != nil {
		return err
	}
	if err := d.reconcile(ctx); err != nil {
		return err
	}
	for _, m := range d.opt.Modules {
		if err := m.Reconcile(ctx); err != nil {
			return err
		}
	}
	if err := d.sweep(ctx, "startup"); err != nil {
		return err
	}
	// At start no ingest is in flight, so every orphan can go: before
	// the modules serve what may ingest (the gateway).
	if err := d.removeOrphans(time.Time{}); err != nil {
		return err
	}
	for _, m := range d.opt.Modules {
		if c, ok := m.(CatchUpper); ok {
			if err := c.CatchUp(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// setTargets registers the delivery targets: the built-in debug one, the
// modules', and Options.Targets, which replace those of their kind
// (tests put fakes in). Each kind at most once, sorted by name.
func (d *Daemon) setTargets() {
	d.targets = []target.Target{d.debug}
	for _, m := range d.opt.Modules {
		if t, ok := m.(Targeter); ok {
			d.targets = append(d.targets, t.Targets()...)
		}
	}
	for _, t := range d.opt.Targets {
		d.targets = slices.DeleteFunc(d.targets, func(b target.Target) bool { return b.Spec().Name == t.Spec().Name })
		d.targets = append(d.targets, t)
	}
	slices.SortFunc(d.targets, func(a, b target.Target) int { return strings.Compare(a.Spec().Name, b.Spec().Name) })
}

// maxSweepIDs bounds each list of ids daemon status shows of the last
// sweep.
const maxSweepIDs = 100

// sweep runs the deterministic overdue sweep with one captured now, again
// with the same now until it has nothing left to do, then carries out the
// side effects its events call for. Every deadline at or before now has
// then been handled: the daemon counts only later ones as work due.
func (d *Daemon) sweep(ctx context.Context, why string) error {
	return d.sweepAt(ctx, why, d.opt.Clock.Now())
}

// sweepAt is sweep at a now the caller captured (a scheduling pass's).
func (d *Daemon) sweepAt(ctx context.Context, why string, now time.Time) error {
	total := command.SweepResult{Now: now}
	for round := 0; round < 1000; round++ {
		sr, res, err := engine.ExecAt[command.SweepResult](ctx, d.eng, engine.Meta{Actor: events.ActorSweep, CorrelationID: "sweep:" + why}, now, command.Sweep{Config: d.deliveryConfig()})
		if err != nil {
			return fmt.Errorf("%s sweep: %w", why, err)
		}
		if round == 0 {
			total.Due = sr.Due
		}
		total.Collected = append(total.Collected, sr.Collected...)
		total.Closed = append(total.Closed, sr.Closed...)
		total.Parked = append(total.Parked, sr.Parked...)
		total.TimedOut = append(total.TimedOut, sr.TimedOut...)
		for _, id := range sr.Collected {
			if err := d.artifacts.Remove(id); err != nil {
				d.opt.Log.Error("artifact gc", "artifact", id, "err", err)
			}
		}
		if len(res.Events) == 0 {
			break
		}
	}
	// What the sweep acted on left the index; what is still due by now
	// the sweep leaves as it is (a park hook's, a Desktop attempt's
	// pause deadline) until its state changes.
	left := map[index.Due]bool{}
	_ = d.eng.Read(func(s engine.Snapshot) error {
		for _, due := range s.DueBy(now) {
			left[due] = true
		}
		return nil
	})
	d.mu.Lock()
	d.lastSweep, d.sweptHead, d.sweptLeft = total.Capped(maxSweepIDs), d.eng.Head(), left
	d.mu.Unlock()
	if len(total.Closed)+len(total.Parked)+len(total.Collected)+len(total.TimedOut) > 0 || why == "startup" {
		d.opt.Log.Info("sweep", "why", why, "now", now.Format(time.RFC3339Nano), "due", total.Due,
			"closed", len(total.Closed), "parked", len(total.Parked), "collected", len(total.Collected), "timed_out", len(total.TimedOut))
	}
	d.kickParkHooks(ctx, now)
	for _, m := range d.opt.Modules {
		if s, ok := m.(Swept); ok {
			s.Swept(ctx)
		}
	}
	d.jobsEnded(ctx, total.TimedOut, task.StopJobTimeout)
	return nil
}

// sweepDue reports whether a deadline fell due since the last sweep: one
// after the time that sweep used, or, when the log moved since, one by
// then that the sweep did not leave as it was (a commit after a sweep may
// add a deadline at or before its time). A deadline the sweep handles by
// doing nothing never counts again, so a scheduling pass does not commit
// an empty sweep for it.
func (d *Daemon) sweepDue(now time.Time) (time.Time, bool) {
	d.mu.Lock()
	last, head, left := d.lastSweep.Now, d.sweptHead, d.sweptLeft
	d.mu.Unlock()
	var at time.Time
	var due bool
	_ = d.eng.Read(func(s engine.Snapshot) error {
		if n, ok := s.NextDueAfter(last); ok && !n.At.After(now) {
			at, due = n.At, true
		} else if d.eng.Head() != head {
			for _, n := range s.DueBy(last) {
				if !left[n] {
					at, due = n.At, true
					break
				}
			}
		}
		return nil
	})
	return at, due
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
	var live map[string]bool
	err := d.eng.Read(func(s engine.Snapshot) error {
		var err error
		live, err = query.StoredArtifacts(s)
		return err
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

// loop sweeps what falls due, runs a scheduling pass when asked or when a
// head's wake-up time comes, and watches the idle rule.
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
			if err := d.eng.Damaged(); err != nil {
				// Serving on would build on a file known to be damaged.
				d.opt.Log.Error("the log is damaged; exiting", "err", err)
				return refuseLog(d.opt.Home, err)
			}
			d.host.KeepSocket(ctx, d.opt.Home.Socket(), d.srv.Serve)
			now := d.opt.Clock.Now()
			if !d.opt.Manual {
				// A pass sweeps what fell due first.
				_, due := d.sweepDue(now)
				if w := d.sched.nextWake(); due || (!w.IsZero() && !w.After(now)) {
					d.schedulePasses(ctx, "timer")
				}
			}
			for _, m := range d.opt.Modules {
				if t, ok := m.(Ticker); ok {
					t.Tick(ctx)
				}
			}
			if d.idle(now) {
				d.opt.Log.Info("idle timeout reached; exiting", "idle_timeout", d.opt.Config.IdleTimeout.Duration)
				return nil
			}
		}
	}
}

func (d *Daemon) nextDue() (time.Time, bool) {
	var at time.Time
	var ok bool
	_ = d.eng.Read(func(s engine.Snapshot) error {
		due, found := s.NextDue()
		at, ok = due.At, found
		return nil
	})
	return at, ok
}

// busy reports what keeps the daemon alive right now: active jobs,
// attached integration clients, requests and deliveries in flight,
// accepted turns being observed (until their deadlines, however far),
// sweep work or a delivery due within the idle timeout, and whatever its
// targets name. Deadlines further out do not count, nor do parked batches
// or deadlines already swept: the next start sweeps and delivers.
func (d *Daemon) busy(now time.Time) (reasons []string) {
	if n := d.activeJobs(); n > 0 {
		reasons = append(reasons, plural.Count(n, "active job", "active jobs"))
	}
	if n := d.srv.Attached(); n > 0 {
		reasons = append(reasons, plural.Count(n, "integration client", "integration clients"))
	}
	if n := d.inflight.Load(); n > 0 {
		reasons = append(reasons, plural.Count(n, "request", "requests")+" in flight")
	}
	if n := d.sched.inFlight(); n > 0 {
		reasons = append(reasons, plural.Count(n, "delivery", "deliveries")+" in flight")
	}
	if d.parkHooksRunning() {
		reasons = append(reasons, "park hooks running")
	}
	for _, m := range d.opt.Modules {
		reasons = append(reasons, m.KeepAlive()...)
	}
	var tracked int
	var latest time.Time
	_ = d.eng.Read(func(s engine.Snapshot) error { tracked, latest = query.Tracked(s, now); return nil })
	if tracked > 0 {
		reasons = append(reasons, fmt.Sprintf("observing %s until %s", plural.Count(tracked, "accepted turn", "accepted turns"), latest.Format(time.RFC3339)))
	}
	horizon := now.Add(d.opt.Config.IdleTimeout.Duration)
	if at, due := d.sweepDue(horizon); due {
		reasons = append(reasons, "work due at "+at.Format(time.RFC3339))
	}
	if w := d.sched.nextWake(); !w.IsZero() && w.Before(horizon) {
		reasons = append(reasons, "delivery due at "+w.Format(time.RFC3339))
	}
	for _, t := range d.targets {
		if k, ok := t.(target.KeepAliver); ok {
			reasons = append(reasons, k.KeepAlive(now)...)
		}
	}
	return reasons
}

func (d *Daemon) idle(now time.Time) bool {
	if d.opt.Supervised || len(d.busy(now)) > 0 {
		d.touch()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.idleDeadline = d.lastActivity.Add(d.opt.Config.IdleTimeout.Duration)
	return !now.Before(d.idleDeadline)
}

func (d *Daemon) activeJobs() int {
	var n int
	_ = d.eng.Read(func(s engine.Snapshot) error { n = query.ActiveJobs(s); return nil })
	return n
}

func (d *Daemon) status() api.Status {
	now := d.opt.Clock.Now()
	var checkpoint uint64
	var parked, undelivered int
	_ = d.eng.Read(func(s engine.Snapshot) error {
		checkpoint, parked, undelivered = s.Checkpoint(), query.Parked(s), query.Undelivered(s)
		return nil
	})
	head := d.eng.Head()
	reasons := d.busy(now)
	d.mu.Lock()
	deadline, sweep := d.lastActivity.Add(d.opt.Config.IdleTimeout.Duration), d.lastSweep
	d.mu.Unlock()
	st := api.Status{
		PID: os.Getpid(), Version: d.opt.Version, Protocol: ipc.Proto, Home: d.opt.Home.Root,
		StartedAt:     d.started,
		UptimeSeconds: now.Sub(d.started).Seconds(), LogHeadSeq: head, Checkpoint: checkpoint,
		ActiveJobs: d.activeJobs(), AttachedClients: d.srv.Attached(), ParkedBatches: parked, UndeliveredBatches: undelivered,
		Deliveries:  d.sched.inFlight(),
		IdleTimeout: d.opt.Config.IdleTimeout.Duration.String(), IdleDeadline: deadline, BusyReasons: reasons, LastSweep: sweep,
	}
	for _, m := range d.opt.Modules {
		m.Status(&st)
	}
	if head > checkpoint {
		st.ProjectionLag = head - checkpoint
	}
	if st.BusyReasons == nil {
		st.BusyReasons = []string{}
	}
	if next, ok := d.nextDue(); ok {
		st.NextDue = &next
	}
	return st
}
