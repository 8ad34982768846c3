package desktop

import (
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The Codex Desktop adapter's writeback, part 2: the bridge's two-step
// arm (note-arm-pending, note-arm), the pause proof (note-paused) and
// their deadlines. The transcript relay (relay.go) applies the same
// commands. spec/desktop.md states every rule with its test.

// DesktopConfig holds the Desktop writeback knobs ([desktop]).
type DesktopConfig struct {
	// ArmLease is how long a bridge arm lease lasts; the attempt's
	// arm_pending_deadline is the lease's deadline.
	ArmLease time.Duration
	// PauseAfter is pause_not_before minus the arm (at least 90 s: one
	// full caller period plus scheduler jitter); PauseWindow is
	// pause_deadline minus pause_not_before (at least 90 s).
	PauseAfter  time.Duration
	PauseWindow time.Duration
	// RecoveryInlineBytes is max_boundary_recovery_inline_bytes.
	RecoveryInlineBytes int64
	// RecoveryLease is how long an artifact recovery lease lasts.
	RecoveryLease time.Duration
	// MarkerTTL is how long an issued relay marker may be consumed.
	MarkerTTL time.Duration
}

// ArmToken names the attempt a bridge helper acts on: the thread, the
// attempt and its generation, and the bridge wake's own request id.
type ArmToken struct {
	ThreadID        string
	AttemptID       string
	Generation      uint64
	BridgeRequestID string
}

func (t ArmToken) check() error {
	for _, f := range []struct{ what, v string }{{"source thread id", t.ThreadID}, {"attempt id", t.AttemptID},
		{"bridge request id", t.BridgeRequestID}} {
		if err := command.CheckID(f.what, f.v); err != nil {
			return err
		}
	}
	if t.Generation == 0 {
		return errs.New(errs.EINVAL, "generation must be at least 1")
	}
	return nil
}

// headAttempt resolves (thread, attempt, generation) to the thread's head
// batch and that attempt. why is non-empty when the token is stale: the
// attempt unknown, of another thread or generation, or no longer the head
// batch's current attempt.
func headAttempt(v engine.Reader, thread, attemptID string, gen uint64) (b *aggregate.Batch, a *aggregate.Attempt, why string, err error) {
	a, err = engine.Attempt(v, attemptID)
	if err != nil {
		return nil, nil, "", err
	}
	switch {
	case a == nil:
		return nil, nil, "no attempt " + attemptID, nil
	case a.SourceThreadID != thread:
		return nil, a, "attempt " + attemptID + " is not of thread " + thread, nil
	case a.Generation != gen:
		return nil, a, "attempt " + attemptID + " is generation " + itoa(a.Generation) + ", not " + itoa(gen), nil
	}
	b, err = engine.Batch(v, a.BatchID)
	if err != nil {
		return nil, a, "", err
	}
	switch {
	case b == nil || !b.Open():
		return b, a, "the attempt's batch is closed", nil
	case !b.IsHead:
		return b, a, "the attempt's batch is not the thread's head", nil
	case b.HeadAttemptID != a.ID || b.Generation != gen:
		return b, a, "superseded by generation " + itoa(b.Generation), nil
	case !a.Live():
		return b, a, "attempt is " + string(a.State) + ": " + a.EndReason, nil
	}
	return b, a, "", nil
}

// ArmLease is what note-arm-pending answers: the bridge arm lease.
type ArmLease struct {
	AttemptID     string
	Generation    uint64
	LeaseID       string
	LeaseDeadline time.Time
	PendingSince  time.Time
	Deadline      time.Time
}

func leaseOf(a *aggregate.Attempt) ArmLease {
	return ArmLease{AttemptID: a.ID, Generation: a.Generation, LeaseID: a.BridgeArmLeaseID, LeaseDeadline: a.BridgeArmLeaseDeadline,
		PendingSince: a.ArmPendingSince, Deadline: a.ArmPendingDeadline}
}

// NoteArmPending is `cbth desktop note-arm-pending`: the durable barrier
// before the bridge arms the caller heartbeat. It moves the thread's
// current head attempt prepared -> arm_pending once, recording the
// bridge request id and a new bridge arm lease. The same request id again
// gets the same lease ("already_pending"); another request id while the
// attempt is arm_pending is EBUSY and never sees the lease; a token that
// is not the current head attempt, or an attempt past prepared, is
// ESTALE. Only "arm_pending" appends.
type NoteArmPending struct {
	engine.Answers[ArmLease]

	Config ArmConfig
	ArmToken
	// Fingerprints are the validation fingerprints the daemon's own
	// executable observes, by read transport.
	Fingerprints map[string]string
}

// ArmConfig is what the arm commands read of the configuration.
type ArmConfig struct {
	Delivery command.DeliveryConfig
	Desktop  DesktopConfig
}

// Decide implements engine.Decider.
func (c NoteArmPending) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := c.check(); err != nil {
		return engine.Decision{}, err
	}
	b, a, why, err := headAttempt(v, c.ThreadID, c.AttemptID, c.Generation)
	if err != nil {
		return engine.Decision{}, err
	}
	if why != "" {
		return engine.Decision{}, errs.New(errs.ESTALE, "stale: %s", why)
	}
	switch a.State {
	case fsm.AttemptPrepared:
	case fsm.AttemptArmPending:
		if a.BridgeRequestID == c.BridgeRequestID {
			return c.Answer(engine.Decision{Outcome: command.OutcomeAlreadyPending}, leaseOf(a)), nil
		}
		return engine.Decision{}, errs.New(errs.EBUSY, "lease_held: attempt %s is arm_pending for another bridge request (until it settles, at the latest at %s)",
			a.ID, a.ArmPendingDeadline.Format(time.RFC3339))
	default:
		return engine.Decision{}, errs.New(errs.ESTALE, "stale: attempt %s is %s, not prepared", a.ID, a.State)
	}
	inst, err := command.Installation(v)
	if err != nil {
		return engine.Decision{}, err
	}
	bd, err := command.BindingOf(v, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	g := aggregate.DesktopGate(now, b, bd, inst, observed(c.Fingerprints, inst))
	if err != nil {
		return engine.Decision{}, err
	}
	if !g.OK {
		return engine.Decision{}, errs.New(errs.ESTALE, "stale: the thread may not be armed: %s", g.Reason)
	}
	deadline := now.Add(c.Config.Desktop.ArmLease)
	ev := &events.AttemptArmPendingNoted{BridgeRequestID: c.BridgeRequestID, LeaseID: v.NewID(), LeaseDeadline: deadline, ArmPendingDeadline: deadline}
	return c.Answer(engine.Decision{Outcome: command.OutcomeArmPending, Emits: []engine.Emit{{Stream: command.AttemptStream(a.ID), Payload: ev}}}, ArmLease{AttemptID: a.ID, Generation: a.Generation, LeaseID: ev.LeaseID, LeaseDeadline: deadline, PendingSince: now, Deadline: deadline}), nil
}

// Armed is what note-arm answers.
type Armed struct {
	AttemptID            string
	Generation           uint64
	CooldownUntil        time.Time
	PauseNotBefore       time.Time
	PauseDeadline        time.Time
	DeliveryAttemptCount int
}

// NoteArm is `cbth desktop note-arm`: after Codex accepted the
// automation_update, it moves the arm_pending head attempt to cooldown
// once, when the request id and lease are the durable ones. In the same
// append: the batch counts the attempt (the only place a Desktop attempt
// counts), the binding's armed_generation becomes the generation (its
// quiesce cleared) with pause_not_before and pause_deadline, and the
// bridge's ready cursor moves past the thread. A retry after success is
// "already_armed" and appends nothing; any mismatch is ESTALE.
type NoteArm struct {
	engine.Answers[Armed]

	Config ArmConfig
	ArmToken
	LeaseID string
}

// Decide implements engine.Decider.
func (c NoteArm) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := c.check(); err != nil {
		return engine.Decision{}, err
	}
	if err := command.CheckID("bridge arm lease id", c.LeaseID); err != nil {
		return engine.Decision{}, err
	}
	b, a, why, err := headAttempt(v, c.ThreadID, c.AttemptID, c.Generation)
	if err != nil {
		return engine.Decision{}, err
	}
	if why != "" {
		return engine.Decision{}, errs.New(errs.ESTALE, "stale: %s", why)
	}
	if a.State != fsm.AttemptArmPending && a.State != fsm.AttemptCooldown {
		return engine.Decision{}, errs.New(errs.ESTALE, "stale: attempt %s is %s, not arm_pending", a.ID, a.State)
	}
	if a.BridgeRequestID != c.BridgeRequestID || a.BridgeArmLeaseID != c.LeaseID {
		return engine.Decision{}, errs.New(errs.ESTALE, "stale: the bridge request id or arm lease is not the attempt's")
	}
	if a.State == fsm.AttemptCooldown {
		return c.Answer(engine.Decision{Outcome: command.OutcomeAlreadyArmed}, Armed{AttemptID: a.ID, Generation: a.Generation, CooldownUntil: a.CooldownUntil,
			PauseNotBefore: a.PauseNotBefore, PauseDeadline: a.PauseDeadline, DeliveryAttemptCount: b.DeliveryAttemptCount}), nil
	}
	bd, err := command.BindingOf(v, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	if bd == nil || bd.State != fsm.BindingBound {
		return engine.Decision{}, errs.New(errs.ESTALE, "stale: thread %s is not bound", c.ThreadID)
	}
	emits, res, err := c.Config.arm(v, now, b, a, bd)
	if err != nil {
		return engine.Decision{}, err
	}
	return c.Answer(engine.Decision{Outcome: command.OutcomeArmed, Emits: emits}, res), nil
}

// arm returns the events of a durable arm of attempt a of head batch b.
func (c ArmConfig) arm(v engine.Reader, now time.Time, b *aggregate.Batch, a *aggregate.Attempt, bd *aggregate.Binding) ([]engine.Emit, Armed, error) {
	notBefore := now.Add(c.Desktop.PauseAfter)
	res := Armed{AttemptID: a.ID, Generation: a.Generation, CooldownUntil: now.Add(c.Delivery.Cooldown),
		PauseNotBefore: notBefore, PauseDeadline: notBefore.Add(c.Desktop.PauseWindow), DeliveryAttemptCount: b.DeliveryAttemptCount + 1}
	scope, err := command.CursorScope(v, b)
	if err != nil {
		return nil, res, err
	}
	return []engine.Emit{
		{Stream: command.AttemptStream(a.ID), Payload: &events.AttemptArmed{CooldownUntil: res.CooldownUntil, PauseNotBefore: res.PauseNotBefore, PauseDeadline: res.PauseDeadline}},
		{Stream: command.BatchStream(b.ID), Payload: &events.BatchDeliveryAccepted{AttemptID: a.ID, Generation: a.Generation,
			CooldownUntil: res.CooldownUntil, NextDeliveryNotBefore: now.Add(c.Delivery.MinSendInterval)}},
		{Stream: command.BindingStream(bd.ID), Payload: &events.BindingArmed{Generation: a.Generation, PauseNotBefore: res.PauseNotBefore, PauseDeadline: res.PauseDeadline}},
		{Stream: command.CursorStream(scope), Payload: &events.CursorAdvanced{ReadyAt: b.FirstReadyAt, ThreadID: b.SourceThreadID, Reason: "armed"}},
	}, res, nil
}

// NotePaused is `cbth desktop note-paused` (the seed names no helper for
// it: spec/desktop.md, settled ambiguity 2): the bridge's proof that the
// caller heartbeat of a generation is paused, deleted or otherwise
// quiesced.
//
//   - For the binding's armed generation it records the quiesce
//     ("quiesced"; "already_quiesced" appends nothing). Before the
//     binding's pause_not_before it is refused with EAGAIN: the caller
//     may not have had its wake yet.
//   - For the generation of the thread's arm_pending attempt, under the
//     same bridge request, it is the proof the arm never took effect: the
//     attempt is abandoned and the batch stays automatic ("arm_abandoned").
//   - Any other (older) generation is a no-op: ESTALE.
type NotePaused struct {
	ThreadID        string
	Generation      uint64
	BridgeRequestID string
}

// Decide implements engine.Decider.
func (c NotePaused) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	bd, err := pauseBinding(v, c.ThreadID, c.BridgeRequestID)
	if err != nil {
		return engine.Decision{}, err
	}
	if c.Generation > 0 && c.Generation == bd.ArmedGeneration {
		if !bd.ArmedGenerationQuiesced.IsZero() {
			return engine.Decision{Outcome: command.OutcomeAlreadyQuiesced}, nil
		}
		if now.Before(bd.PauseNotBefore) {
			return engine.Decision{}, errs.New(errs.EAGAIN, "pause_too_early: generation %d may not be paused before pause_not_before %s",
				c.Generation, bd.PauseNotBefore.Format(time.RFC3339))
		}
		return engine.Decision{Outcome: command.OutcomeQuiesced, Emits: []engine.Emit{{Stream: command.BindingStream(bd.ID),
			Payload: &events.BindingQuiesced{Generation: c.Generation}}}}, nil
	}
	a, err := command.LiveAttempt(v, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	if a != nil && a.State == fsm.AttemptArmPending && a.Generation == c.Generation && a.BridgeRequestID == c.BridgeRequestID {
		return engine.Decision{Outcome: command.OutcomeArmAbandoned, Emits: []engine.Emit{{Stream: command.AttemptStream(a.ID),
			Payload: &events.AttemptAbandoned{Reason: "arm never took effect: the caller heartbeat is proven paused"}}}}, nil
	}
	return engine.Decision{}, errs.New(errs.ESTALE, "stale_generation: generation %d is not the armed generation (%d) nor an arm in flight: nothing to pause",
		c.Generation, bd.ArmedGeneration)
}

// observed is the fingerprint of fps for the installation's transport.
func observed(fps map[string]string, inst *aggregate.Installation) string {
	if inst == nil {
		return ""
	}
	return fps[inst.ReadTransport]
}

// pauseBinding is the binding a pause proof for thread, sent under a
// bridge request, applies to: any binding of the thread not unbound.
// note-paused and the paused relay marker check it the same way.
func pauseBinding(v engine.View, thread, bridgeRequestID string) (*aggregate.Binding, error) {
	if err := command.CheckID("source thread id", thread); err != nil {
		return nil, err
	}
	if err := command.CheckID("bridge request id", bridgeRequestID); err != nil {
		return nil, err
	}
	bd, err := command.BindingOf(v, thread)
	if err != nil {
		return nil, err
	}
	if bd == nil || bd.State == fsm.BindingUnbound {
		return nil, errs.New(errs.ESTALE, "stale: thread %s is not bound", thread)
	}
	return bd, nil
}
