package daemon

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/cbth-dev/cbth/adapters/artifact"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/internal/confine"
	"github.com/cbth-dev/cbth/internal/rotate"
)

// Module is one feature of the daemon (Codex Desktop, tasks, the Codex
// CLI, CortexFS, ...). The host runs the lifecycle, the loop, the sweep,
// the operation table and the delivery core; a module adds its
// operations, its delivery targets and its own work, and answers for
// itself when the host asks what keeps the daemon up or what to show in
// its status. Modules are composed by whoever calls Run (cmd/cbth); one
// module never reaches into another's state: what it needs of another
// feature comes through the log or an interface handed to it there.
type Module interface {
	// Name names the module in logs.
	Name() string
	// Ops registers the module's operations. It is called once, before
	// the log opens; a handler runs only once the daemon serves, after
	// Start.
	Ops(t api.Table)
	// Start hands the module the host's services once the log is open,
	// before start-up: the module sets itself up and appends nothing.
	Start(ctx context.Context, h *Host) error
	// Reconcile runs at start-up, after the delivery targets proved
	// what they could of their attempts in flight and before the
	// overdue sweep: what the last daemon left undone is settled.
	Reconcile(ctx context.Context) error
	// KeepAlive names what of the module keeps the daemon from leaving
	// on idle now (none: nothing).
	KeepAlive() []string
	// Status fills in the module's fields of daemon status.
	Status(st *api.Status)
	// Stop ends what the module runs. The host calls it once it stopped
	// serving and its deliveries finished, before the log closes, so
	// what stops can still be recorded.
	Stop(ctx context.Context) error
}

// Optional capabilities: a module that has one implements its interface,
// and the host finds it by a type assertion.
type (
	// Targeter contributes delivery targets (asked after Start). A
	// target of a kind Options.Targets puts in is replaced by that one.
	Targeter interface{ Targets() []target.Target }
	// CatchUpper brings what the module serves from the log up to date
	// at start-up, after the overdue sweep and before requests are
	// served: file projections, sockets.
	CatchUpper interface {
		CatchUp(ctx context.Context) error
	}
	// Ticker is called at each tick of the daemon's loop, after the
	// sweep and the scheduling it called for.
	Ticker interface {
		Tick(ctx context.Context)
	}
	// Scheduled is called after each scheduling pass.
	Scheduled interface{ Scheduled(ctx context.Context) }
	// Swept is called after each overdue sweep (the start-up one
	// included), once its side effects are under way and before
	// JobWatcher hears of the jobs it timed out: what the sweep parked
	// or closed is in the log.
	Swept interface{ Swept(ctx context.Context) }
	// JobWatcher is told of jobs that ended other than by their own
	// report: cancelled (task.StopJobCancelled) or failed at their
	// job_timeout (task.StopJobTimeout).
	JobWatcher interface {
		JobsEnded(ctx context.Context, jobs []string, reason string)
	}
	// Drainer is a module whose work a handover lets finish
	// (daemon.handover).
	Drainer interface {
		// Drain refuses new work from now on and, with stop, stops
		// what runs, returning how many it stopped; false when a
		// handover is already under way.
		Drain(ctx context.Context, stop bool) (stopped int, ok bool)
		// Left is how much work is left, and a channel closed when
		// some of it ends.
		Left() (n int, changed <-chan struct{})
		// Resume takes new work again: the handover gave up.
		Resume(ctx context.Context)
	}
)

// Base gives a module the Module methods it has nothing to do in.
type Base struct{}

func (Base) Reconcile(context.Context) error { return nil }
func (Base) KeepAlive() []string             { return nil }
func (Base) Status(*api.Status)              {}
func (Base) Stop(context.Context) error      { return nil }

// Host is what the host lends its modules: the log, the home and its
// configuration, the clock, the log file, the artifact store, and the
// delivery core's operations a feature builds on.
type Host struct {
	Eng       *engine.Engine
	Home      home.Home
	Config    home.Config
	Clock     engine.Clock
	Log       *slog.Logger
	Version   string
	Artifacts artifact.Store
	// Manual: the daemon acts only when asked (Options.Manual).
	Manual bool
	// NoSync: no fsync (Options.NoSync).
	NoSync bool
	// Confined tracks the confined programs the daemon runs (agents'
	// shell.exec, the provider helper), whose processes it refuses to
	// serve: run them under confine.WithTracker(ctx, Confined).
	Confined *confine.Tracker

	d *Daemon
}

// DeliveryConfig is the delivery core's configuration.
func (h *Host) DeliveryConfig() command.DeliveryConfig { return h.d.deliveryConfig() }

// Poke asks for a scheduling pass: a change may let a batch go.
func (h *Host) Poke(ctx context.Context) { h.d.poke(ctx) }

// Sweep runs the overdue sweep now.
func (h *Host) Sweep(ctx context.Context, why string) error { return h.d.sweep(ctx, why) }

// Schedule runs a scheduling pass now.
func (h *Host) Schedule(ctx context.Context) { h.d.schedule(ctx) }

// Replaced reports whether Options.Targets put in a target of kind, in
// place of the one a module would run.
func (h *Host) Replaced(kind string) bool {
	for _, t := range h.d.opt.Targets {
		if t.Spec().Name == kind {
			return true
		}
	}
	return false
}

// Submit is job.submit.
func (h *Host) Submit(ctx context.Context, a api.SubmitArgs) (api.SubmitReply, error) {
	return h.d.submit(ctx, a)
}

// Submitted is the job a submission made (from its id and result), or
// the one an earlier submission with its key made (deduplicated).
func (h *Host) Submitted(id string, res engine.Result, err error) (query.JobView, bool, error) {
	return h.d.submitted(id, res, err)
}

// Job is a job's view.
func (h *Host) Job(id string) (query.JobView, error) { return h.d.job(id) }

// Cancel cancels a job through wrap (which may record more in the same
// append), and tells the modules it ended.
func (h *Host) Cancel(ctx context.Context, m engine.Meta, id string, wrap func(command.CancelJob) engine.Decider, reason string) (api.TransitionReply, error) {
	return h.d.cancel(ctx, m, id, wrap, reason)
}

// Inspect is a batch's inspection with its delivery gate.
func (h *Host) Inspect(ctx context.Context, id string) (query.BatchInspection, error) {
	return h.d.inspect(ctx, id)
}

// ThreadTarget is where a result for thread goes when the submitter did
// not say.
func (h *Host) ThreadTarget(thread string) (command.Target, error) { return h.d.threadTarget(thread) }

// BusyReasons is what keeps the daemon up now (daemon status).
func (h *Host) BusyReasons(now time.Time) []string { return h.d.busy(now) }

// RotateLog rotates the log file name of the log directory past [log]
// max_bytes, keeping [log] keep older copies: at start, before what
// writes it opens it (daemon.log is its writer's: Options.Locked).
func (h *Host) RotateLog(name string) {
	p, c := filepath.Join(h.Home.LogDir(), name), h.Config.Log
	if done, err := rotate.IfOver(p, c.MaxBytes, c.Keep); err != nil {
		h.Log.Warn("rotate log", "path", p, "err", err)
	} else if done {
		h.Log.Info("log rotated", "path", p, "max_bytes", c.MaxBytes, "keep", c.Keep)
	}
}

// Ops is the operation table a daemon composed of mods serves.
func Ops(mods []Module) api.Table {
	return (&Daemon{opt: Options{Modules: mods}}).ops()
}
