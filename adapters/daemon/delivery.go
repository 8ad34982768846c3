package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// deliveryConfig turns the file configuration into the commands' input.
func (d *Daemon) deliveryConfig() command.DeliveryConfig {
	c := d.opt.Config
	return command.DeliveryConfig{
		MaxJobsPerBatch: c.Delivery.MaxJobsPerBatch, MaxTotalBytes: c.Delivery.MaxTotalBytes,
		MaxWaitWindow: c.Delivery.MaxWaitWindow.Duration, MinSendInterval: c.Delivery.MinSendInterval.Duration,
		Cooldown: c.Delivery.Cooldown.Duration, RedeliveryWindow: c.Delivery.RedeliveryWindow.Duration,
		MaxDeliveryAttempts: c.Delivery.MaxDeliveryAttempts, EligibleBackoff: c.Delivery.EligibleBackoff.Duration,
		EligibleBackoffMax: c.Delivery.EligibleBackoffMax.Duration, EligibleBackoffJitter: c.Delivery.EligibleBackoffJitter,
		InlinePayloadLimit: c.Delivery.InlinePayloadLimit, ObservationWindow: c.Delivery.ObservationWindow.Duration,
		MinArtifactTTL: c.MinArtifactTTL.Duration, PostCloseTTL: c.PostCloseTTL.Duration,
	}
}

// target returns the registered target of a target kind, if any. cli and
// desktop arrive with their adapters; until then their batches wait in
// the FIFO (and their windows still expire).
func (d *Daemon) target(kind command.Target) target.Target {
	for _, t := range d.targets {
		if t.Spec().Target() == kind {
			return t
		}
	}
	return nil
}

// scheduler is the state of delivery between passes: which threads have
// a delivery in flight (at most one each), how many workers each target
// runs, and when a head will next become deliverable.
type scheduler struct {
	pass sync.Mutex // one pass at a time

	mu      sync.Mutex
	busy    map[string]bool // threads with a delivery in flight
	running map[string]int  // target -> workers
	wake    time.Time
	halted  bool // a handover: no delivery starts any more
	workers sync.WaitGroup
	// held is, per thread, why its head's target held it back when it
	// last prepared a delivery: a reason only the target's fresh read
	// gives (the Codex CLI's permission gate), shown by delivery_gate
	// until the head goes or changes.
	held map[string]heldHead
}

// heldHead is a head a Preparer held back, and why.
type heldHead struct {
	batch      string
	generation uint64
	reason     string
	at         time.Time
}

// hold remembers why thread's head was held back (reason ""
// forgets it).
func (s *scheduler) hold(thread string, h target.Head, reason string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = map[string]heldHead{}
	}
	if reason == "" {
		delete(s.held, thread)
		return
	}
	s.held[thread] = heldHead{batch: h.BatchID, generation: h.Generation, reason: reason, at: at}
}

// heldReason is why the head (batch, generation) of thread was held back
// when last prepared, if it was.
func (s *scheduler) heldReason(thread, batch string, generation uint64) (heldHead, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[thread]
	return h, ok && h.batch == batch && h.generation == generation
}

// halt stops new deliveries from starting; those in flight go on.
func (s *scheduler) halt() {
	s.mu.Lock()
	s.halted = true
	s.mu.Unlock()
}

// claim reserves thread for a delivery by target; false if the thread has
// one in flight or, full set, the target's workers are all busy.
func (s *scheduler) claim(kind, thread string, limit int) (ok, full bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[thread] {
		return false, false
	}
	if s.running[kind] >= limit || s.halted {
		return false, true
	}
	s.busy[thread] = true
	s.running[kind]++
	return true, false
}

func (s *scheduler) release(kind, thread string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.busy, thread)
	s.running[kind]--
}

func (s *scheduler) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.busy)
}

func (s *scheduler) nextWake() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wake
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// schedule runs scheduling passes. A pass walks each target's heads in
// the canonical fair order (command.FairOrder), asks the core whether
// each may get a fresh delivery now and then the target's gate, and
// starts a delivery for each one let through: on its own worker, up to
// delivery.workers per target, so a delivery that hangs holds up its own
// thread only. A pull target's head only gets its attempt prepared.
//
// Every pass, on a kick or on the timer, starts with the deterministic
// overdue sweep at the pass's own now (seed 004: no delivery before the
// sweep), so a head whose window ended since the last sweep is closed,
// never delivered; the core's eligibility checks the window too. The
// sweep runs when a deadline fell due since the last one (sweepDue): a
// sweep at now with none due would emit nothing, and costs a commit.
//
// In manual mode (a manual clock) deliveries run one after another inside
// the pass, in fair order, and passes repeat until one starts nothing:
// the same script then always appends the same events.
func (d *Daemon) schedule(ctx context.Context) { d.schedulePasses(ctx, "pass") }

func (d *Daemon) schedulePasses(ctx context.Context, why string) {
	for pass := 0; ; pass++ {
		now := d.opt.Clock.Now()
		// The sweep runs outside the pass lock: its side effects (a
		// timed-out job's task stopped) may ask for a pass themselves.
		if _, due := d.sweepDue(now); due {
			if err := d.sweepAt(ctx, why, now); err != nil {
				d.opt.Log.Error("sweep before a scheduling pass", "err", err)
				return
			}
		}
		d.sched.pass.Lock()
		started := d.schedulePass(ctx, now)
		last := started == 0 || !d.opt.Manual || pass == 99
		if last {
			for _, m := range d.opt.Modules {
				if s, ok := m.(Scheduled); ok {
					s.Scheduled(ctx)
				}
			}
		}
		d.sched.pass.Unlock()
		if last {
			return
		}
	}
}

func (d *Daemon) schedulePass(ctx context.Context, now time.Time) (started int) {
	cfg := d.deliveryConfig()
	var wake time.Time
	for _, t := range d.targets {
		spec := t.Spec()
		var heads []target.Head
		err := d.eng.Read(func(s engine.Snapshot) error {
			refs, err := command.FairOrderHeads(s, spec.Target())
			if err != nil {
				return err
			}
			for _, ref := range refs {
				th := ref.ThreadID
				if spec.Kind == target.Pull {
					// A head prepared for its pull target waits for the
					// target's helpers: one read tells, where the core's
					// rules would read the batch too.
					a, err := command.LiveAttempt(s, th)
					if err != nil {
						return err
					}
					if waitsForHelpers(a, ref.BatchID) {
						continue
					}
				}
				el, err := cfg.Eligible(s, now, th)
				if err != nil {
					return err
				}
				if !el.OK {
					wake = earliest(wake, el.Wake)
					continue
				}
				b := el.Batch
				heads = append(heads, target.Head{ThreadID: th, BatchID: b.ID, Generation: b.Generation,
					Policy: b.Policy, RequiresArtifactRead: b.RequiresArtifactRead})
			}
			return nil
		})
		if err != nil {
			d.opt.Log.Error("scheduling pass", "target", spec.Name, "err", err)
			continue
		}
		for _, h := range heads {
			ok, full := d.sched.claim(spec.Name, h.ThreadID, d.opt.Config.Delivery.Workers)
			if full {
				break // a finishing worker asks for the next pass
			}
			if !ok {
				continue
			}
			g := t.Gate(ctx, h)
			if !g.OK {
				if g.Park {
					d.parkHead(ctx, spec.Name, h, g.Reason)
				}
				d.sched.release(spec.Name, h.ThreadID)
				wake = earliest(wake, g.Retry)
				continue
			}
			started++
			if d.opt.Manual {
				d.deliver(ctx, t, h, g)
				d.sched.release(spec.Name, h.ThreadID)
				continue
			}
			d.sched.workers.Add(1)
			go func() {
				defer d.sched.workers.Done()
				d.deliver(ctx, t, h, g)
				d.sched.release(spec.Name, h.ThreadID)
				d.poke(ctx)
			}()
		}
	}
	d.sched.mu.Lock()
	d.sched.wake = wake
	d.sched.mu.Unlock()
	return started
}

// deliver carries one delivery to thread out. For a push target: the
// accept_pending barrier is durable before the target is called, and
// the target's answer is recorded after (even when the daemon is
// stopping meanwhile: an answer is evidence). A Preparer reads first;
// what it read is recorded in the barrier's append, so the delivery
// costs one commit before the send, and its answer carries the send. For
// a pull target: the head's attempt is prepared, nothing more.
func (d *Daemon) deliver(ctx context.Context, t target.Target, h target.Head, g target.Gate) {
	thread, spec := h.ThreadID, t.Spec()
	cfg := d.deliveryConfig()
	if spec.ObservationWindow > 0 {
		cfg.ObservationWindow = spec.ObservationWindow
	}
	meta := engine.Meta{Actor: events.ActorAdapter, CorrelationID: "deliver:" + thread}
	var send func(context.Context, command.Delivery) target.Result
	switch tt := t.(type) {
	case target.Preparer:
		// Acquisition before the barrier: a failure here leaves nothing
		// pending (the head waits, or goes to the operator path).
		g = tt.Prepare(ctx, h, g)
		if !g.OK {
			d.recordGate(ctx, meta, g.Route.Gate)
			if g.Park {
				d.sched.hold(thread, h, "", time.Time{})
				d.parkHead(ctx, spec.Name, h, g.Reason)
			} else {
				d.sched.hold(thread, h, g.Reason, d.opt.Clock.Now())
				d.opt.Log.Info("delivery held back", "target", spec.Name, "thread", thread, "reason", g.Reason)
			}
			if !g.Retry.IsZero() {
				d.sched.mu.Lock()
				d.sched.wake = earliest(d.sched.wake, g.Retry)
				d.sched.mu.Unlock()
			}
			return
		}
		d.sched.hold(thread, h, "", time.Time{})
		send = g.Send
	case target.Pusher:
		send = tt.Deliver
	}
	route := g.Route
	if route.RPCKind == "" {
		route.RPCKind = spec.RPCKind
	}
	if route.DeliveryMode == "" {
		route.DeliveryMode = spec.DeliveryMode
	}
	if send == nil {
		// A pull target's head (or a Preparer's that carries no send) is
		// only prepared: its target's helpers move it on.
		id, res, err := engine.Exec[string](ctx, d.eng, meta, command.PrepareAttempt{Config: cfg, ThreadID: thread, DeliveryMode: route.DeliveryMode})
		if err != nil {
			d.opt.Log.Error("prepare attempt", "thread", thread, "err", err)
		} else if res.Outcome == command.OutcomePrepared {
			d.opt.Log.Info("attempt prepared", "thread", thread, "attempt", id)
		}
		return
	}
	val, res, err := engine.Exec[command.Delivery](ctx, d.eng, meta, command.StartDelivery{Config: cfg, ThreadID: thread, Route: route})
	if err != nil {
		d.opt.Log.Error("start delivery", "thread", thread, "err", err)
		return
	}
	if res.Outcome != command.OutcomeStarted {
		// The reading goes into the log all the same.
		d.recordGate(ctx, meta, route.Gate)
		return
	}
	del := val
	timeout := d.opt.Config.Delivery.DeliveryTimeout.Duration
	if spec.AcceptTimeout > 0 {
		timeout = spec.AcceptTimeout
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	out := send(dctx, del)
	cancel()
	rctx := context.WithoutCancel(ctx)
	meta.CorrelationID = "deliver:" + del.AttemptID
	rec, err := d.eng.Execute(rctx, meta, command.RecordOutcome{Config: cfg, AttemptID: del.AttemptID, RPCRequestID: del.RPCRequestID,
		ManagedSessionID: del.ManagedSessionID, SessionEpoch: del.SessionEpoch,
		Outcome: out.Outcome, TurnID: out.TurnID, Reason: out.Reason, Tracks: out.Tracks, Handoff: out.Handoff, CodexHome: out.CodexHome})
	if err != nil {
		d.opt.Log.Error("record delivery outcome", "thread", thread, "attempt", del.AttemptID, "err", err)
		if ack, ok := t.(target.Acknowledger); ok {
			ack.Recorded(del, "")
		}
		return
	}
	d.opt.Log.Info("delivery", "thread", thread, "batch", del.BatchID, "attempt", del.AttemptID, "generation", del.Generation, "outcome", rec.Outcome)
	if ack, ok := t.(target.Acknowledger); ok {
		defer ack.Recorded(del, rec.Outcome)
	}
	if rec.Outcome != command.Accepted {
		return
	}
	for _, ev := range out.Turn {
		if _, err := d.observe(rctx, target.TurnEvent{AttemptID: del.AttemptID, TurnID: out.TurnID, Event: ev,
			ManagedSessionID: del.ManagedSessionID, SessionEpoch: del.SessionEpoch}); err != nil {
			d.opt.Log.Error("record turn event", "attempt", del.AttemptID, "event", ev, "err", err)
			return
		}
	}
}

// waitsForHelpers says whether a pull target's head attempt a (of batch)
// is prepared for the target's own helpers to move on. An attempt that
// went through a barrier before (a send a Preparer gave it was proven
// refused, and it is back to prepared to be retried in place) does not:
// the scheduler sends it again once its back-off ends.
func waitsForHelpers(a *aggregate.Attempt, batch string) bool {
	return a != nil && a.State == fsm.AttemptPrepared && a.BatchID == batch && a.RPCKind == ""
}

// recordGate records what a Preparer's gate read for a head that did not
// go (with the barrier it would have been recorded in the same append):
// the Codex CLI's permission reading. A reading the session no longer
// takes is logged only.
func (d *Daemon) recordGate(ctx context.Context, meta engine.Meta, g command.BarrierGate) {
	if g == nil {
		return
	}
	if _, err := d.eng.Execute(ctx, meta, g.Record()); err != nil {
		d.opt.Log.Info("permission reading not recorded", "err", err)
	}
}

// parkHead moves a head its target can never take automatically to
// manual resolution (target.Gate's Park).
func (d *Daemon) parkHead(ctx context.Context, kind string, h target.Head, reason string) {
	res, err := d.eng.Execute(ctx, engine.Meta{Actor: events.ActorAdapter, CorrelationID: "park:" + h.BatchID},
		command.ParkHead{ThreadID: h.ThreadID, BatchID: h.BatchID, Reason: reason})
	if err != nil {
		d.opt.Log.Error("park head", "target", kind, "thread", h.ThreadID, "batch", h.BatchID, "err", err)
		return
	}
	if res.Outcome == command.OutcomeParked {
		d.opt.Log.Warn("head parked by its target", "target", kind, "thread", h.ThreadID, "batch", h.BatchID, "reason", reason)
		d.kickParkHooks(ctx, d.opt.Clock.Now())
	}
}

// observe records a turn event through the session and epoch guard.
func (d *Daemon) observe(ctx context.Context, ev target.TurnEvent) (engine.Outcome, error) {
	res, err := d.eng.Execute(ctx, engine.Meta{Actor: events.ActorAdapter, CorrelationID: "turn:" + ev.AttemptID},
		command.ObserveTurn{Config: d.deliveryConfig(), AttemptID: ev.AttemptID, TurnID: ev.TurnID, Event: ev.Event,
			ManagedSessionID: ev.ManagedSessionID, SessionEpoch: ev.SessionEpoch})
	if err != nil {
		return "", err
	}
	if res.Outcome != command.Observed && res.Outcome != command.CloseDelivered {
		d.opt.Log.Info("turn event", "attempt", ev.AttemptID, "event", ev.Event, "session", ev.ManagedSessionID,
			"epoch", ev.SessionEpoch, "outcome", res.Outcome)
	}
	return res.Outcome, nil
}

// sink is the daemon's target.Sink: turn events that arrive after Deliver
// returned. A close or a park may let the thread's next batch go.
type sink struct{ d *Daemon }

func (s sink) Observe(ctx context.Context, ev target.TurnEvent) (engine.Outcome, error) {
	out, err := s.d.observe(ctx, ev)
	if err == nil && (out == command.CloseDelivered || out == command.Parked) {
		s.d.poke(ctx)
	}
	return out, err
}

// startTargets starts the targets that have a lifetime.
func (d *Daemon) startTargets(ctx context.Context) error {
	for _, t := range d.targets {
		if s, ok := t.(target.Starter); ok {
			if err := s.Start(ctx, target.Host{Sink: sink{d}, Log: d.opt.Log.With("target", t.Spec().Name), Wake: func() { d.poke(ctx) }}); err != nil {
				return fmt.Errorf("start target %s: %w", t.Spec().Name, err)
			}
		}
	}
	return nil
}

// reconcile runs at start-up, before anything is delivered: each target
// may prove what became of its attempts left in flight by the previous
// daemon; ReconcileInFlight then parks every one left unproven.
func (d *Daemon) reconcile(ctx context.Context) error {
	var open []query.InFlightAttempt
	if err := d.eng.Read(func(s engine.Snapshot) error {
		var err error
		open, err = query.InFlight(s)
		return err
	}); err != nil {
		return err
	}
	cfg := d.deliveryConfig()
	meta := engine.Meta{Actor: events.ActorSweep, CorrelationID: "startup-reconcile"}
	var continuing []command.SessionRef
	for _, t := range d.targets {
		r, ok := t.(target.Reconciler)
		if !ok {
			continue
		}
		var mine []target.InFlight
		for _, o := range open {
			if a := o.Attempt; o.TargetKind == t.Spec().Target() {
				mine = append(mine, target.InFlight{AttemptID: a.ID, ThreadID: a.SourceThreadID, BatchID: a.BatchID, State: a.State,
					RPCRequestID: a.RPCRequestID, RPCKind: a.RPCKind, Marker: a.RPCCorrelationMarker, TurnID: a.TurnID,
					ManagedSessionID: a.ManagedSessionID, SessionEpoch: a.SessionEpoch})
			}
		}
		if len(mine) == 0 {
			continue
		}
		for _, p := range r.Reconcile(ctx, mine) {
			switch {
			case p.Continues:
				continuing = append(continuing, command.SessionRef{AttemptID: p.AttemptID, ManagedSessionID: p.ManagedSessionID, SessionEpoch: p.SessionEpoch})
			case p.Outcome != "":
				res, err := d.eng.Execute(ctx, meta, command.RecordOutcome{Config: cfg, AttemptID: p.AttemptID, RPCRequestID: p.RPCRequestID,
					ManagedSessionID: p.ManagedSessionID, SessionEpoch: p.SessionEpoch, Outcome: p.Outcome, TurnID: p.TurnID, Reason: p.Reason, Tracks: p.Tracks})
				if err != nil {
					return fmt.Errorf("record %s's proof for attempt %s: %w", t.Spec().Name, p.AttemptID, err)
				}
				d.opt.Log.Info("in-flight attempt proven after restart", "target", t.Spec().Name, "attempt", p.AttemptID, "outcome", res.Outcome)
				if res.Outcome != command.Accepted {
					continue
				}
			}
			// Turn events the target found already happened: recorded
			// now, before what is left unproven is parked.
			for _, ev := range p.Turn {
				out, err := d.eng.Execute(ctx, meta, command.ObserveTurn{Config: cfg, AttemptID: p.AttemptID, TurnID: p.TurnID, Event: ev,
					ManagedSessionID: p.ManagedSessionID, SessionEpoch: p.SessionEpoch})
				if err != nil {
					return fmt.Errorf("record %s's turn event %s for attempt %s: %w", t.Spec().Name, ev, p.AttemptID, err)
				}
				d.opt.Log.Info("turn event proven after restart", "target", t.Spec().Name, "attempt", p.AttemptID, "event", ev, "outcome", out.Outcome)
			}
		}
	}
	res, err := d.eng.Execute(ctx, meta, command.ReconcileInFlight{Config: cfg, Continuing: continuing})
	if err != nil {
		return fmt.Errorf("reconcile in-flight deliveries: %w", err)
	}
	if len(res.Events) > 0 {
		d.opt.Log.Warn("in-flight deliveries parked after restart", "events", len(res.Events))
	}
	return nil
}

// gate explains, for people, whether a thread's head may get a fresh
// delivery now and if not why: the core's rules, then its target's gate.
func (d *Daemon) gate(ctx context.Context, now time.Time, thread string) string {
	var el command.Eligibility
	err := d.eng.Read(func(s engine.Snapshot) error {
		var err error
		el, err = d.deliveryConfig().Eligible(s, now, thread)
		return err
	})
	if err != nil {
		return "unknown: " + err.Error()
	}
	if !el.OK {
		if !el.Wake.IsZero() {
			return el.Reason + " until " + el.Wake.Format(time.RFC3339)
		}
		return el.Reason
	}
	b := el.Batch
	t := d.target(b.TargetKind)
	if t == nil {
		return "waiting for a " + string(b.TargetKind) + " target (none runs in this daemon yet)"
	}
	prepared := t.Spec().Kind == target.Pull && waitsForHelpers(el.Attempt, b.ID)
	g := t.Gate(ctx, target.Head{ThreadID: thread, BatchID: b.ID, Generation: b.Generation, Policy: b.Policy, RequiresArtifactRead: b.RequiresArtifactRead})
	if !g.OK {
		if !g.Retry.IsZero() {
			return g.Reason + " until " + g.Retry.Format(time.RFC3339)
		}
		return g.Reason
	}
	if prepared {
		return "prepared: offered to its target (" + string(b.TargetKind) + ") to move on"
	}
	if hh, ok := d.sched.heldReason(thread, b.ID, b.Generation); ok {
		return hh.reason + " (when last prepared, at " + hh.at.Format(time.RFC3339) + ")"
	}
	return "eligible"
}

// debugTurn reports a turn event on the debug target's open turn.
func (d *Daemon) debugTurn(ctx context.Context, a api.DebugTurnArgs) (api.DebugTurnReply, error) {
	ev := "turn_" + a.Event
	ok := false
	for _, e := range command.TurnEvents {
		ok = ok || e == ev
	}
	if !ok {
		return api.DebugTurnReply{}, errs.New(errs.EINVAL, "unknown turn event %q (want started, completed, failed, interrupted or replaced)", a.Event)
	}
	r, err := d.debug.Turn(ctx, a.SourceThreadID, ev, a.SessionEpoch)
	if err != nil {
		return api.DebugTurnReply{}, err
	}
	return api.DebugTurnReply{Outcome: r.Outcome, SourceThreadID: a.SourceThreadID, AttemptID: r.AttemptID, TurnID: r.TurnID,
		Event: r.Event, ManagedSessionID: r.ManagedSessionID, SessionEpoch: r.SessionEpoch}, nil
}

// parkHooks runs the operator's hook for each parked batch, and each
// batch closed undelivered, whose notification is due, and records every
// run. A failed run is retried
// with a growing back-off, five times at most. Outside manual mode it
// runs on its own goroutine, woken after each sweep, so a slow hook (up
// to 30 s) never holds up the loop.
type parkHooks struct {
	kick    chan struct{}
	running sync.Mutex // one run of the due hooks at a time
	busy    atomic.Bool
	done    chan struct{} // closed when the hook goroutine ends
}

func (d *Daemon) kickParkHooks(ctx context.Context, now time.Time) {
	if d.opt.Manual {
		d.runParkHooks(ctx, now)
		return
	}
	select {
	case d.hooks.kick <- struct{}{}:
	default:
	}
}

func (d *Daemon) parkHookLoop(ctx context.Context) {
	defer close(d.hooks.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.hooks.kick:
			d.hooks.busy.Store(true)
			d.runParkHooks(ctx, d.opt.Clock.Now())
			d.hooks.busy.Store(false)
		}
	}
}

func (d *Daemon) parkHooksRunning() bool { return d.hooks.busy.Load() }

func (d *Daemon) runParkHooks(ctx context.Context, now time.Time) {
	d.hooks.running.Lock()
	defer d.hooks.running.Unlock()
	var due []query.ParkNotice
	_ = d.eng.Read(func(s engine.Snapshot) error {
		var err error
		due, err = query.ParkHooksDue(s, now)
		return err
	})
	for _, b := range due {
		n := b.Attempts + 1
		ev := &events.BatchParkNotified{Attempt: n}
		hook := d.opt.Config.ParkHook
		if len(hook) == 0 {
			ev.OK, ev.Error = true, "no park_hook configured"
		} else {
			hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			cmd := exec.CommandContext(hctx, hook[0], hook[1:]...)
			cmd.Env = append(cmd.Environ(), "CBTH_BATCH_ID="+b.BatchID, "CBTH_THREAD_ID="+b.ThreadID,
				"CBTH_NOTICE="+b.Notice, "CBTH_REASON="+b.Reason, "CBTH_JOB_IDS="+strings.Join(b.JobIDs, ","),
				"CBTH_HOME="+d.opt.Home.Root)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			cancel()
			ev.OK = err == nil
			if err != nil {
				ev.ExitCode = cmd.ProcessState.ExitCode()
				ev.Error = strings.TrimSpace(fmt.Sprintf("%v %s", err, firstLine(stderr.String())))
				if n < 5 {
					ev.NextRetryAt = now.Add(time.Duration(n*n) * 10 * time.Second)
				}
			}
		}
		_, err := d.eng.Append(context.WithoutCancel(ctx), engine.Meta{Actor: events.ActorSweep, CorrelationID: "park-hook:" + b.BatchID},
			events.StreamID{Kind: events.KindBatch, ID: b.BatchID}, b.Version, ev)
		if err != nil && errs.CodeOf(err) != errs.ECONFLICT {
			d.opt.Log.Error("record park hook", "batch", b.BatchID, "err", err)
		}
		msg := "batch parked for manual resolution"
		if b.Notice == query.NoticeUndelivered {
			msg = "batch closed undelivered: its result was never confirmed delivered"
		}
		d.opt.Log.Warn(msg, "batch", b.BatchID, "thread", b.ThreadID, "reason", b.Reason, "jobs", len(b.JobIDs),
			"hook_attempt", n, "hook_ok", ev.OK, "hook_error", ev.Error)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
