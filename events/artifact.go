package events

import "time"

// KindArtifact is the stream of one artifact.
const KindArtifact Kind = "artifact"

// artifactEvents declares the artifact events (see declarations).
func artifactEvents() []declaration {
	return []declaration{
		decl[ArtifactIngested](KindArtifact),
		decl[ArtifactReferenced](KindArtifact),
		decl[ArtifactReleased](KindArtifact),
		decl[ArtifactPinned](KindArtifact),
		decl[ArtifactCollected](KindArtifact),
		decl[ArtifactRecoveryLeaseIssued](KindArtifact),
		decl[ArtifactRecoveryLeaseRevoked](KindArtifact),
	}
}

// ArtifactIngested records a result file copied into the managed store.
type ArtifactIngested struct {
	SourceJobID       string    `json:"source_job_id"`
	ManagedPath       string    `json:"managed_path"`
	ManifestPath      string    `json:"manifest_path"`
	ContentType       string    `json:"content_type"`
	SizeBytes         int64     `json:"size_bytes"`
	SHA256            string    `json:"sha256"`
	MinRetentionUntil time.Time `json:"min_retention_until"`
}

const TypeArtifactIngested = "artifact.ingested"

func (ArtifactIngested) EventType() string { return TypeArtifactIngested }

// ArtifactReferenced records that an open batch now references the artifact.
type ArtifactReferenced struct {
	BatchID string `json:"batch_id"`
}

const TypeArtifactReferenced = "artifact.referenced"

func (ArtifactReferenced) EventType() string { return TypeArtifactReferenced }

// ArtifactReleased records that a referencing batch reached a terminal state.
type ArtifactReleased struct {
	BatchID           string    `json:"batch_id"`
	LastBatchClosedAt time.Time `json:"last_batch_closed_at"`
	GCEligibleAt      time.Time `json:"gc_eligible_at"`
}

const TypeArtifactReleased = "artifact.released"

func (ArtifactReleased) EventType() string { return TypeArtifactReleased }

// ArtifactPinned sets an operator pin that keeps the artifact from GC.
type ArtifactPinned struct {
	PinUntil     time.Time `json:"operator_pin_until"`
	GCEligibleAt time.Time `json:"gc_eligible_at"`
}

const TypeArtifactPinned = "artifact.pinned"

func (ArtifactPinned) EventType() string { return TypeArtifactPinned }

// ArtifactCollected records the GC of an artifact's files.
type ArtifactCollected struct {
	Reason string `json:"reason"`
}

const TypeArtifactCollected = "artifact.collected"

func (ArtifactCollected) EventType() string { return TypeArtifactCollected }

// ArtifactRecoveryLeaseIssued issues (or rotates: the previous lease
// ends) the artifact's short-lived operator recovery read lease.
type ArtifactRecoveryLeaseIssued struct {
	LeaseID  string    `json:"artifact_recovery_lease_id"`
	Deadline time.Time `json:"artifact_recovery_lease_deadline"`
	BatchID  string    `json:"batch_id"`
}

const TypeArtifactRecoveryLeaseIssued = "artifact.recovery_lease_issued"

func (ArtifactRecoveryLeaseIssued) EventType() string { return TypeArtifactRecoveryLeaseIssued }

// ArtifactRecoveryLeaseRevoked ends the artifact's recovery lease.
type ArtifactRecoveryLeaseRevoked struct {
	LeaseID string `json:"artifact_recovery_lease_id"`
}

const TypeArtifactRecoveryLeaseRevoked = "artifact.recovery_lease_revoked"

func (ArtifactRecoveryLeaseRevoked) EventType() string { return TypeArtifactRecoveryLeaseRevoked }
