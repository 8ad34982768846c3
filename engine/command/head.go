package command

import (
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/events"
)

// A target's and an operator's moves of a thread's head that are neither
// a delivery nor a close: parking it for the operator, skipping it in
// the fair order.

// ParkHead moves a thread's head batch to manual resolution because its
// target can never deliver it automatically (target.Gate's Park), and
// abandons its live attempt. It acts only while BatchID is still the
// automatic head: outcomes "parked", "unchanged".
type ParkHead struct {
	engine.Answers[string]

	ThreadID string
	BatchID  string
	Reason   string
}

// Decide implements engine.Decider.
func (c ParkHead) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	open, err := OpenBatches(v, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	if len(open) == 0 || open[0].ID != c.BatchID || !open[0].IsHead || open[0].ReplayPolicy != aggregate.ReplayAutomatic {
		return engine.Decision{Outcome: OutcomeUnchanged}, nil
	}
	b := open[0]
	var emits []engine.Emit
	attemptID := ""
	if a, err := LiveAttempt(v, c.ThreadID); err != nil {
		return engine.Decision{}, err
	} else if a != nil && a.BatchID == b.ID {
		attemptID = a.ID
		emits = append(emits, engine.Emit{Stream: AttemptStream(a.ID), Payload: &events.AttemptAbandoned{Reason: "parked: " + c.Reason}})
	}
	emits = append(emits, Park(b, c.Reason, attemptID))
	return c.Answer(engine.Decision{Outcome: OutcomeParked, Emits: emits}, b.ID), nil
}

// SkipHead is an explicit skip of a thread's head in the fair-ready
// order: the cursor of the head's scope (its target's, or for a Desktop
// head its bridge's) moves past it, so every other ready head of that
// scope comes first; the batch stays open and untouched. Outcomes
// "skipped", "no_head".
type SkipHead struct {
	engine.Answers[string]
	ThreadID string
}

// Decide implements engine.Decider.
func (c SkipHead) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := CheckID("source thread id", c.ThreadID); err != nil {
		return engine.Decision{}, err
	}
	open, err := OpenBatches(v, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	if len(open) == 0 || !open[0].IsHead {
		return engine.Decision{Outcome: OutcomeNoHead}, nil
	}
	b := open[0]
	scope, err := CursorScope(v, b)
	if err != nil {
		return engine.Decision{}, err
	}
	return c.Answer(engine.Decision{Outcome: OutcomeSkipped, Emits: []engine.Emit{{Stream: CursorStream(scope),
		Payload: &events.CursorAdvanced{ReadyAt: b.FirstReadyAt, ThreadID: b.SourceThreadID, Reason: "skipped"}}}}, b.ID), nil
}
