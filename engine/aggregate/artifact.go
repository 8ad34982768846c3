package aggregate

import (
	"time"

	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
)

// Artifact is a result file held in the managed store.
type Artifact struct {
	Header[fsm.ArtifactState]
	SourceJobID       string    `json:"source_job_id"`
	ManagedPath       string    `json:"managed_path"`
	ManifestPath      string    `json:"manifest_path"`
	ContentType       string    `json:"content_type"`
	SizeBytes         int64     `json:"size_bytes"`
	SHA256            string    `json:"sha256"`
	MinRetentionUntil time.Time `json:"min_retention_until"`
	OpenBatchIDs      []string  `json:"open_batch_ids,omitempty"`
	LastBatchClosedAt time.Time `json:"last_batch_closed_at,omitzero"`
	OperatorPinUntil  time.Time `json:"operator_pin_until,omitzero"`
	GCEligibleAt      time.Time `json:"gc_eligible_at"`
	CollectedReason   string    `json:"collected_reason,omitempty"`
	// RecoveryLeaseID and RecoveryLeaseDeadline are the operator's
	// current recovery read lease (one at a time: a new one rotates it).
	RecoveryLeaseID       string    `json:"artifact_recovery_lease_id,omitempty"`
	RecoveryLeaseDeadline time.Time `json:"artifact_recovery_lease_deadline,omitzero"`
	RecoveryLeaseBatchID  string    `json:"artifact_recovery_lease_batch_id,omitempty"`
}

func (a *Artifact) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.ArtifactIngested:
		a.SourceJobID, a.ManagedPath, a.ManifestPath = p.SourceJobID, p.ManagedPath, p.ManifestPath
		a.ContentType, a.SizeBytes, a.SHA256 = p.ContentType, p.SizeBytes, p.SHA256
		a.MinRetentionUntil, a.GCEligibleAt = p.MinRetentionUntil, p.MinRetentionUntil
	case *events.ArtifactReferenced:
		a.OpenBatchIDs = appendUnique(a.OpenBatchIDs, p.BatchID)
	case *events.ArtifactReleased:
		a.OpenBatchIDs = remove(a.OpenBatchIDs, p.BatchID)
		a.LastBatchClosedAt, a.GCEligibleAt = p.LastBatchClosedAt, p.GCEligibleAt
	case *events.ArtifactPinned:
		a.OperatorPinUntil, a.GCEligibleAt = p.PinUntil, p.GCEligibleAt
	case *events.ArtifactCollected:
		a.CollectedReason = p.Reason
		a.RecoveryLeaseID, a.RecoveryLeaseDeadline, a.RecoveryLeaseBatchID = "", time.Time{}, ""
	case *events.ArtifactRecoveryLeaseIssued:
		a.RecoveryLeaseID, a.RecoveryLeaseDeadline, a.RecoveryLeaseBatchID = p.LeaseID, p.Deadline, p.BatchID
	case *events.ArtifactRecoveryLeaseRevoked:
		if a.RecoveryLeaseID == p.LeaseID {
			a.RecoveryLeaseID, a.RecoveryLeaseDeadline, a.RecoveryLeaseBatchID = "", time.Time{}, ""
		}
	}
}

// Deadlines implements Deadliner: an artifact is due for GC only when no
// open batch references it.
func (a *Artifact) Deadlines() []Deadline {
	if a.State != fsm.ArtifactStored || len(a.OpenBatchIDs) > 0 {
		return nil
	}
	return []Deadline{{index.DueArtifactGC, a.GCEligibleAt}}
}
