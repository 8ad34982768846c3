package command

import (
	"strconv"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Sweep is the deterministic overdue sweep: it looks only at deadlines due
// by now (through the deadline index, so its cost follows what is due, not
// what exists) and emits the events they call for. The same log and the
// same now always give the same events.
//
// One run closes at most one batch per thread, because a close changes
// which batch heads the thread; the daemon runs the sweep again with the
// same now until it emits nothing, so the outcome is still a pure function
// of the log and now.
type Sweep struct {
	engine.Answers[SweepResult]
	Config DeliveryConfig
}

// SweepResult tells the daemon which side effects to carry out after the
// sweep's events are durable.
type SweepResult struct {
	Now       time.Time `json:"now"`
	Due       int       `json:"due"`
	Collected []string  `json:"collected_artifacts,omitempty"`
	Closed    []string  `json:"closed_batches,omitempty"`
	Parked    []string  `json:"parked_batches,omitempty"`
	TimedOut  []string  `json:"timed_out_jobs,omitempty"`
	// Omitted counts the ids a Capped result leaves out.
	Omitted int `json:"omitted,omitempty"`
}

// Capped returns r with each list cut to its first n ids, counting the
// rest in Omitted: a sweep after a long stop may close or collect
// thousands, and what reports it (daemon status) must stay small. The log
// has every one.
func (r SweepResult) Capped(n int) SweepResult {
	cut := func(ids []string) []string {
		if len(ids) <= n {
			return ids
		}
		r.Omitted += len(ids) - n
		return ids[:n:n]
	}
	r.Collected, r.Closed, r.Parked, r.TimedOut = cut(r.Collected), cut(r.Closed), cut(r.Parked), cut(r.TimedOut)
	return r
}

// Decide implements engine.Decider. Every deadline kind a state can emit
// (index.DueKinds) has its case here; the daemon does not count a
// deadline it has swept past as work due.
func (c Sweep) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	res := SweepResult{Now: now}
	var emits []engine.Emit
	touched := map[string]bool{} // threads already changed in this run
	closeB := func(b *aggregate.Batch, reason string) error {
		more, err := c.Config.closeBatch(v, now, b, reason, "sweep")
		if err != nil {
			return err
		}
		emits = append(emits, more...)
		touched[b.SourceThreadID] = true
		res.Closed = append(res.Closed, b.ID)
		return nil
	}
	for _, d := range v.DueBy(now) {
		res.Due++
		switch d.Name {
		case index.DueRedeliveryWindow:
			b, err := engine.Batch(v, d.ID)
			if err != nil {
				return engine.Decision{}, err
			}
			if b == nil || !b.Open() || touched[b.SourceThreadID] || now.Before(b.RedeliveryWindowEndsAt) {
				continue
			}
			reason := CloseWindowExhausted
			if b.ReplayPolicy == aggregate.ReplayManual {
				reason = CloseManualExpired
			}
			if err := closeB(b, reason); err != nil {
				return engine.Decision{}, err
			}
		case index.DueMaxAttempts:
			b, err := engine.Batch(v, d.ID)
			if err != nil {
				return engine.Decision{}, err
			}
			// Never while the last attempt's turn is observed: the turn
			// ends the batch (delivered, or parked), not the budget.
			if b == nil || !b.Open() || touched[b.SourceThreadID] || b.State != fsm.BatchCooldown || now.Before(b.CooldownUntil) ||
				!b.BudgetSpent() || b.ReplayPolicy != aggregate.ReplayAutomatic || !b.ObservationDeadline.IsZero() {
				continue
			}
			if err := closeB(b, CloseMaxAttempts); err != nil {
				return engine.Decision{}, err
			}
		case index.DueObservation:
			a, err := engine.Attempt(v, d.ID)
			if err != nil {
				return engine.Decision{}, err
			}
			if a == nil || !a.Tracking() || now.Before(a.ObservationDeadline) || touched[a.SourceThreadID] {
				continue
			}
			b, err := engine.Batch(v, a.BatchID)
			if err != nil {
				return engine.Decision{}, err
			}
			emits = append(emits, engine.Emit{Stream: AttemptStream(a.ID), Payload: &events.AttemptAbandoned{Reason: "observation deadline passed", ObservationState: "expired"}})
			if b != nil && b.Open() && b.ReplayPolicy == aggregate.ReplayAutomatic {
				emits = append(emits, Park(b, "observation deadline passed without a completed turn", a.ID))
				res.Parked = append(res.Parked, b.ID)
			}
			touched[a.SourceThreadID] = true
		case index.DueArtifactGC:
			a, err := engine.Artifact(v, d.ID)
			if err != nil {
				return engine.Decision{}, err
			}
			if a == nil || a.State != fsm.ArtifactStored || len(a.OpenBatchIDs) > 0 || now.Before(a.GCEligibleAt) {
				continue
			}
			emits = append(emits, engine.Emit{Stream: events.StreamID{Kind: events.KindArtifact, ID: d.ID}, Payload: &events.ArtifactCollected{Reason: "retention_expired"}})
			res.Collected = append(res.Collected, d.ID)
		case index.DueJobTimeout:
			j, err := engine.Job(v, d.ID)
			if err != nil {
				return engine.Decision{}, err
			}
			if j == nil || j.State != fsm.JobRunning || j.TimeoutAt.IsZero() || now.Before(j.TimeoutAt) {
				continue
			}
			emits = append(emits, engine.Emit{Stream: jobStream(j.ID), Payload: &events.JobFailed{
				Reason: "job_timeout: no complete or fail report by " + j.TimeoutAt.Format(time.RFC3339)}})
			res.TimedOut = append(res.TimedOut, j.ID)
		case index.DueParkHook:
			// The daemon runs the hook and records the run (it is a side
			// effect, not a decision); that record moves the deadline.
		case index.DueArmPending:
			// No proof came by the deadline (note-arm would have armed
			// it, note-paused abandoned it): neither the arm nor its
			// absence is provable, so the seed's third outcome.
			a, err := engine.Attempt(v, d.ID)
			if err != nil {
				return engine.Decision{}, err
			}
			if a == nil || a.State != fsm.AttemptArmPending || now.Before(a.ArmPendingDeadline) || touched[a.SourceThreadID] {
				continue
			}
			emits = append(emits, engine.Emit{Stream: AttemptStream(a.ID), Payload: &events.AttemptAbandoned{
				Reason: "arm_pending_deadline passed: the arm is neither proven effective nor proven never effective"}})
			b, err := engine.Batch(v, a.BatchID)
			if err != nil {
				return engine.Decision{}, err
			}
			if b != nil && b.Open() && b.ReplayPolicy == aggregate.ReplayAutomatic {
				emits = append(emits, Park(b, "arm_pending_deadline passed without proof of the arm or of the caller heartbeat paused", a.ID))
				res.Parked = append(res.Parked, b.ID)
			}
			bd, err := BindingOf(v, a.SourceThreadID)
			if err != nil {
				return engine.Decision{}, err
			}
			if bd != nil && bd.State == fsm.BindingBound {
				emits = append(emits, engine.Emit{Stream: BindingStream(bd.ID), Payload: &events.BindingDegraded{
					Reason: "arm_pending_deadline of generation " + itoa(a.Generation) + " passed unresolved"}})
			}
			touched[a.SourceThreadID] = true
		case index.DueBindingPause:
			bd, err := engine.Binding(v, d.ID)
			if err != nil {
				return engine.Decision{}, err
			}
			if bd == nil || bd.State != fsm.BindingBound || !bd.Unquiesced() || now.Before(bd.PauseDeadline) || touched[bd.SourceThreadID] {
				continue
			}
			more, err := DegradeBinding(v, bd, "pause_deadline of generation "+itoa(bd.ArmedGeneration)+" passed without a verified pause")
			if err != nil {
				return engine.Decision{}, err
			}
			emits = append(emits, more...)
			touched[bd.SourceThreadID] = true
		case index.DueAttemptPause:
			// The binding's pause deadline (binding.pause) is the one
			// acted on; the attempt's copy is what the bridge reads.
		case index.DueQueueValidation:
			inst, err := Installation(v)
			if err != nil {
				return engine.Decision{}, err
			}
			if inst == nil || inst.QueueValidation == nil || now.Before(inst.QueueValidation.Deadline) {
				continue
			}
			q := inst.QueueValidation
			emits = append(emits, engine.Emit{Stream: events.StreamID{Kind: events.KindInstallation, ID: InstallationID},
				Payload: &events.InstallationQueueValidationFailed{ThreadID: q.ThreadID, Marker: q.Marker, QueuedItemID: q.QueuedItemID,
					CodexHome: q.CodexHome, Reason: events.QueueNotDrained,
					Detail: "no turn of thread " + q.ThreadID + " drained the marker from Codex's queue by " + q.Deadline.Format(time.RFC3339)}})
		case index.DueRecoveryGC:
			b, err := engine.Batch(v, d.ID)
			if err != nil {
				return engine.Decision{}, err
			}
			if b == nil || b.Open() || b.BoundaryRecoveryEnvelope == nil || now.Before(b.BoundaryRecoveryRetention) {
				continue
			}
			emits = append(emits, engine.Emit{Stream: BatchStream(b.ID), Payload: &events.BatchRecoveryCollected{RetentionUntil: b.BoundaryRecoveryRetention}})
		default:
			return engine.Decision{}, errs.New(errs.EINTERNAL, "the sweep has no case for deadline kind %q", d.Name)
		}
	}
	return c.Answer(engine.Decision{Outcome: OutcomeSwept, Emits: emits}, res), nil
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
