package command

import (
	"slices"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// SupersedeBatch closes a thread's head batch with close_reason
// superseded because a newer batch of the thread replaced its result
// (`cbth batch supersede`, spec/delivery.md, "Superseding a head"). In
// one append: the head closes (batch.superseded), its live attempt is
// abandoned, its jobs and artifacts are carried into the next batch of
// the thread (batch.jobs_added, job.carried, the artifacts referenced by
// it and released by the old one), that batch is promoted to head and
// the fair order's cursor steps on. A new delivery of the next batch then
// carries the old jobs too; FIFO order is otherwise unchanged. A head
// with no batch behind it has nothing to be superseded by: ESTATE.
type SupersedeBatch struct {
	engine.Answers[string]

	Config  DeliveryConfig
	BatchID string
	Reason  string
}

// Decide implements engine.Decider.
func (c SupersedeBatch) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := CheckID("batch id", c.BatchID); err != nil {
		return engine.Decision{}, err
	}
	if c.Reason == "" {
		return engine.Decision{}, errs.New(errs.EINVAL, "give the reason the head was superseded")
	}
	b, err := engine.Batch(v, c.BatchID)
	if err != nil {
		return engine.Decision{}, err
	}
	if b == nil {
		return engine.Decision{}, errs.New(errs.ENOENT, "no batch %s", c.BatchID)
	}
	if !b.Open() {
		if b.CloseReason == CloseSuperseded {
			return c.Answer(engine.Decision{Outcome: OutcomeAlreadySuperseded}, b.SupersededBy), nil
		}
		return engine.Decision{}, errs.New(errs.ESTATE, "batch %s is already closed (%s)", b.ID, b.CloseReason)
	}
	if !b.IsHead {
		return engine.Decision{}, errs.New(errs.ESTATE, "batch %s is not the head of thread %s: only the head is superseded", b.ID, b.SourceThreadID)
	}
	open, err := OpenBatches(v, b.SourceThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	var next *aggregate.Batch
	for _, o := range open {
		if o.ID != b.ID {
			next = o
			break
		}
	}
	switch {
	case next == nil:
		return engine.Decision{}, errs.New(errs.ESTATE, "thread %s has no batch behind %s to supersede it", b.SourceThreadID, b.ID)
	case next.TargetKind != b.TargetKind || !sameTarget(next.DeliveryTarget, b.DeliveryTarget):
		return engine.Decision{}, errs.New(errs.ESTATE, "batch %s goes to another target than %s: its jobs cannot be carried into it", next.ID, b.ID)
	}

	emits := []engine.Emit{{Stream: BatchStream(b.ID), Payload: &events.BatchSuperseded{Reason: c.Reason, SupersededBy: next.ID, JobIDs: b.JobIDs}}}
	if a, err := LiveAttempt(v, b.SourceThreadID); err != nil {
		return engine.Decision{}, err
	} else if a != nil && a.BatchID == b.ID {
		emits = append(emits, engine.Emit{Stream: AttemptStream(a.ID), Payload: &events.AttemptAbandoned{Reason: "batch superseded by " + next.ID}})
	}
	// The carried jobs take their place by ready time: they were ready
	// before the next batch's own (it opened only once b took no more),
	// so a delivery of it lists them, and their summaries, first.
	order, err := byReadyTime(v, append(slices.Clone(b.JobIDs), next.JobIDs...))
	if err != nil {
		return engine.Decision{}, err
	}
	emits = append(emits, engine.Emit{Stream: BatchStream(next.ID), Payload: &events.BatchJobsAdded{
		JobIDs: b.JobIDs, ArtifactIDs: b.ArtifactIDs, Summary: b.Summary + "\n" + next.Summary,
		LastReadyAt: Latest(next.LastReadyAt, b.LastReadyAt), Policy: next.Policy.Stricter(b.Policy),
		InlinePayloadBytes: next.InlinePayloadBytes + b.InlinePayloadBytes, RequiresArtifactRead: next.RequiresArtifactRead || b.RequiresArtifactRead,
		ReadyOrder: order, FirstReadyAt: earlier(next.FirstReadyAt, b.FirstReadyAt),
	}})
	for _, j := range b.JobIDs {
		job, err := engine.Job(v, j)
		if err != nil {
			return engine.Decision{}, err
		}
		if job != nil && job.State == fsm.JobReady && job.BatchID == b.ID {
			emits = append(emits, engine.Emit{Stream: jobStream(j), Payload: &events.JobCarried{FromBatchID: b.ID, BatchID: next.ID}})
		}
	}
	for _, id := range b.ArtifactIDs {
		a, err := engine.Artifact(v, id)
		if err != nil {
			return engine.Decision{}, err
		}
		if a == nil || a.State != fsm.ArtifactStored {
			continue
		}
		as := events.StreamID{Kind: events.KindArtifact, ID: id}
		emits = append(emits,
			engine.Emit{Stream: as, Payload: &events.ArtifactReferenced{BatchID: next.ID}},
			engine.Emit{Stream: as, Payload: &events.ArtifactReleased{BatchID: b.ID, LastBatchClosedAt: now,
				GCEligibleAt: Latest(a.MinRetentionUntil, now.Add(c.Config.PostCloseTTL), a.OperatorPinUntil)}})
	}
	emits = append(emits, engine.Emit{Stream: BatchStream(next.ID), Payload: &events.BatchPromoted{NextDeliveryNotBefore: c.Config.notBefore(v, b.SourceThreadID)}})
	scope, err := CursorScope(v, b)
	if err != nil {
		return engine.Decision{}, err
	}
	emits = append(emits, engine.Emit{Stream: CursorStream(scope), Payload: &events.CursorAdvanced{ReadyAt: b.FirstReadyAt, ThreadID: b.SourceThreadID, Reason: "superseded: " + c.Reason}})
	return c.Answer(engine.Decision{Outcome: OutcomeSuperseded, Emits: emits}, next.ID), nil
}

// byReadyTime orders job ids by the time each became ready, keeping the
// given order among equals.
func byReadyTime(v engine.Reader, ids []string) ([]string, error) {
	ready := make(map[string]time.Time, len(ids))
	for _, id := range ids {
		j, err := engine.Job(v, id)
		if err != nil {
			return nil, err
		}
		if j != nil {
			ready[id] = j.ReadyAt
		}
	}
	slices.SortStableFunc(ids, func(a, b string) int { return ready[a].Compare(ready[b]) })
	return ids, nil
}

// earlier is the earlier of two set times.
func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
