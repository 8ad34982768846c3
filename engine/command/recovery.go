package command

import (
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Operator recovery of large artifacts (spec/desktop.md, "Operator
// recovery"): `cbth desktop issue-artifact-leases --batch-id` issues a
// short-lived artifact recovery lease for each artifact of the batch too
// large to be inline (`cbth batch inspect` only shows them); `cbth
// desktop read-artifact` reads it by chunks under the lease. A lease ends at its deadline, when a new one rotates it, when
// the artifact is collected, or when the operator revokes it.

// IssueRecoveryLeases issues a lease for each stored artifact of the
// batch over the inline limit, keeping one still valid unless Rotate.
// LeaseIDs are drawn by the caller from a secure random source, one per
// artifact of the batch, in order.
type IssueRecoveryLeases struct {
	engine.Answers[[]RecoveryLease]

	BatchID     string
	InlineLimit int64
	TTL         time.Duration
	Rotate      bool
	LeaseIDs    []string
}

// RecoveryLease is one artifact's lease.
type RecoveryLease struct {
	ArtifactID string
	LeaseID    string
	Deadline   time.Time
}

// Decide implements engine.Decider.
func (c IssueRecoveryLeases) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	b, err := engine.Batch(v, c.BatchID)
	if err != nil || b == nil {
		return engine.Decision{Outcome: OutcomeNone}, err
	}
	var emits []engine.Emit
	var out []RecoveryLease
	for i, id := range b.ArtifactIDs {
		a, err := engine.Artifact(v, id)
		if err != nil {
			return engine.Decision{}, err
		}
		if a == nil || a.State != fsm.ArtifactStored || a.SizeBytes <= c.InlineLimit {
			continue
		}
		if !c.Rotate && a.RecoveryLeaseID != "" && now.Before(a.RecoveryLeaseDeadline) {
			out = append(out, RecoveryLease{ArtifactID: id, LeaseID: a.RecoveryLeaseID, Deadline: a.RecoveryLeaseDeadline})
			continue
		}
		if i >= len(c.LeaseIDs) || len(c.LeaseIDs[i]) < 32 {
			return engine.Decision{}, errs.New(errs.EINTERNAL, "no lease id drawn for artifact %d", i)
		}
		ev := &events.ArtifactRecoveryLeaseIssued{LeaseID: c.LeaseIDs[i], Deadline: now.Add(c.TTL), BatchID: b.ID}
		emits = append(emits, engine.Emit{Stream: events.StreamID{Kind: events.KindArtifact, ID: id}, Payload: ev})
		out = append(out, RecoveryLease{ArtifactID: id, LeaseID: ev.LeaseID, Deadline: ev.Deadline})
	}
	outcome := OutcomeUnchanged
	if len(emits) > 0 {
		outcome = OutcomeIssued
	}
	return c.Answer(engine.Decision{Outcome: outcome, Emits: emits}, out), nil
}

// RevokeRecoveryLease ends an artifact's recovery lease. Outcomes
// "revoked", "no_lease".
type RevokeRecoveryLease struct{ ArtifactID string }

// Decide implements engine.Decider.
func (c RevokeRecoveryLease) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	a, err := artifactNamed(v, c.ArtifactID)
	if err != nil {
		return engine.Decision{}, err
	}
	if a.State != fsm.ArtifactStored || a.RecoveryLeaseID == "" {
		return engine.Decision{Outcome: OutcomeNoLease}, nil
	}
	return engine.Decision{Outcome: OutcomeRevoked, Emits: []engine.Emit{{Stream: events.StreamID{Kind: events.KindArtifact, ID: a.ID},
		Payload: &events.ArtifactRecoveryLeaseRevoked{LeaseID: a.RecoveryLeaseID}}}}, nil
}

// LeaseValid reports why an artifact may not be read under lease ("" if
// it may): the artifact must be stored and the lease its current one,
// before its deadline.
func LeaseValid(a *aggregate.Artifact, lease string, now time.Time) string {
	switch {
	case a == nil:
		return "no such artifact"
	case a.State != fsm.ArtifactStored:
		return "the artifact was collected"
	case a.RecoveryLeaseID == "" || a.RecoveryLeaseID != lease:
		return "not the artifact's current recovery lease (never issued, rotated or revoked)"
	case !now.Before(a.RecoveryLeaseDeadline):
		return "the lease expired at " + a.RecoveryLeaseDeadline.Format(time.RFC3339)
	}
	return ""
}
