package command

import (
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/events"
)

// Sweep is the deterministic overdue sweep: it looks only at deadlines due
// by now (through the deadline index, so its cost follows what is due, not
// what exists) and emits the events they call for. The same log and the
// same now always give the same events.
type Sweep struct{}

// SweepResult tells the daemon which side effects to carry out after the
// sweep's events are durable.
type SweepResult struct {
	Now       time.Time `json:"now"`
	Due       int       `json:"due"`
	Collected []string  `json:"collected_artifacts,omitempty"`
}

// Decide implements engine.Decider.
func (Sweep) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	res := SweepResult{Now: now}
	var emits []engine.Emit
	for _, d := range v.DueBy(now) {
		res.Due++
		switch d.Name {
		case "artifact.gc":
			s, err := v.State(events.KindArtifact, d.ID)
			if err != nil {
				return engine.Decision{}, err
			}
			a, ok := s.(*aggregate.Artifact)
			if !ok || a.Status != "stored" || len(a.OpenBatchIDs) > 0 || now.Before(a.GCEligibleAt) {
				continue
			}
			emits = append(emits, engine.Emit{Stream: events.StreamID{Kind: events.KindArtifact, ID: d.ID}, Payload: &events.ArtifactCollected{Reason: "retention_expired"}})
			res.Collected = append(res.Collected, d.ID)
		}
	}
	return engine.Decision{Outcome: "swept", Emits: emits, Value: res}, nil
}
