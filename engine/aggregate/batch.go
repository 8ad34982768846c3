package aggregate

import (
	"slices"
	"time"

	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
)

// Batch is a delivery batch: the unit delivered to a caller thread.
type Batch struct {
	Header[fsm.BatchState]
	SourceThreadID              string                   `json:"source_thread_id"`
	TargetKind                  events.Target            `json:"target_kind"`
	JobIDs                      []string                 `json:"job_ids"`
	ArtifactIDs                 []string                 `json:"artifact_ids,omitempty"`
	Summary                     string                   `json:"summary"`
	OpenedSeq                   uint64                   `json:"opened_seq"`
	FirstReadyAt                time.Time                `json:"first_ready_at"`
	LastReadyAt                 time.Time                `json:"last_ready_at"`
	MergeUntil                  time.Time                `json:"merge_until,omitzero"`
	MaterializedAt              time.Time                `json:"materialized_at,omitzero"`
	LastDeliveryAttemptAt       time.Time                `json:"last_delivery_attempt_at,omitzero"`
	NextDeliveryNotBefore       time.Time                `json:"next_delivery_not_before,omitzero"`
	CooldownUntil               time.Time                `json:"cooldown_until,omitzero"`
	ObservationDeadline         time.Time                `json:"delivery_observation_deadline,omitzero"`
	EligibleAfter               time.Time                `json:"eligible_after,omitzero"`
	RedeliveryWindowEndsAt      time.Time                `json:"redelivery_window_ends_at"`
	MaxDeliveryAttempts         int                      `json:"max_delivery_attempts"`
	DeliveryAttemptCount        int                      `json:"delivery_attempt_count"`
	HeadAttemptID               string                   `json:"head_attempt_id,omitempty"`
	Generation                  uint64                   `json:"generation"`
	SnapshotRevision            uint64                   `json:"snapshot_revision,omitempty"`
	ContinuationBoundaryState   string                   `json:"continuation_boundary_state"`
	ContinuationBoundaryAt      time.Time                `json:"continuation_boundary_crossed_at,omitzero"`
	BoundaryAttemptID           string                   `json:"boundary_attempt_id,omitempty"`
	BoundaryGeneration          uint64                   `json:"boundary_generation,omitempty"`
	BoundarySnapshotRevision    uint64                   `json:"boundary_snapshot_revision,omitempty"`
	BoundaryRecoveryEnvelope    *events.RecoveryEnvelope `json:"boundary_recovery_envelope,omitempty"`
	BoundaryRecoverySeq         uint64                   `json:"boundary_recovery_envelope_seq,omitempty"` // the event that holds it
	BoundaryRecoveryBytes       int64                    `json:"boundary_recovery_envelope_bytes,omitempty"`
	BoundaryRecoveryRetention   time.Time                `json:"boundary_recovery_retention_until,omitzero"`
	BoundaryRecoveryOperatorPin time.Time                `json:"boundary_recovery_operator_pin_until,omitzero"`
	BoundaryRecoveryCollected   time.Time                `json:"boundary_recovery_collected_at,omitzero"`
	IsHead                      bool                     `json:"head"`
	ParkNotifyAttempts          int                      `json:"park_notify_attempts,omitempty"`
	ParkNotified                bool                     `json:"park_notified,omitempty"`
	ParkNextRetry               time.Time                `json:"park_next_retry,omitzero"`
	ReplayPolicy                string                   `json:"replay_policy"`
	ReplayPolicyReason          string                   `json:"replay_policy_reason,omitempty"`
	ClosedAt                    time.Time                `json:"closed_at,omitzero"`
	CloseReason                 string                   `json:"close_reason,omitempty"`
	Undelivered                 bool                     `json:"undelivered,omitempty"`
	CloseDetail                 string                   `json:"close_detail,omitempty"`
	SupersededBy                string                   `json:"superseded_by,omitempty"`
	DeliveryMode                string                   `json:"delivery_mode,omitempty"`
	Policy                      events.DeliveryPolicy    `json:"delivery_policy"`
	InlinePayloadBytes          int64                    `json:"inline_payload_bytes"`
	ArtifactCount               int                      `json:"artifact_count"`
	RequiresArtifactRead        bool                     `json:"requires_artifact_read"`
	DeliveryTarget              *events.DeliveryTarget   `json:"delivery_target,omitempty"`
}

// Replay policies and boundary states.
const (
	ReplayAutomatic = "automatic"
	ReplayManual    = "manual_resolution_only"
	BoundaryNot     = "not_crossed"
	BoundaryCrossed = "crossed_unacknowledged"
)

// Open reports whether the batch has not reached its terminal state.
func (b *Batch) Open() bool { return b.State != fsm.BatchClosed }

func (b *Batch) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.BatchOpened:
		b.SourceThreadID, b.TargetKind = p.SourceThreadID, p.TargetKind
		b.JobIDs, b.ArtifactIDs, b.Summary = p.JobIDs, p.ArtifactIDs, p.Summary
		b.OpenedSeq = e.Seq
		b.FirstReadyAt, b.LastReadyAt, b.MergeUntil = p.FirstReadyAt, p.LastReadyAt, p.MergeUntil
		b.Policy, b.InlinePayloadBytes, b.RequiresArtifactRead = p.Policy, p.InlinePayloadBytes, p.RequiresArtifactRead
		b.ArtifactCount = len(p.ArtifactIDs)
		b.MaxDeliveryAttempts, b.RedeliveryWindowEndsAt = p.MaxDeliveryAttempts, p.RedeliveryWindowEndsAt
		b.ReplayPolicy, b.ContinuationBoundaryState = ReplayAutomatic, BoundaryNot
		b.IsHead, b.NextDeliveryNotBefore = p.Head, p.NextDeliveryNotBefore
		b.DeliveryTarget = p.DeliveryTarget
	case *events.BatchPromoted:
		b.IsHead, b.NextDeliveryNotBefore = true, p.NextDeliveryNotBefore
	case *events.BatchParkNotified:
		b.ParkNotifyAttempts, b.ParkNotified, b.ParkNextRetry = p.Attempt, p.OK, p.NextRetryAt
	case *events.BatchJobsAdded:
		b.JobIDs = appendUnique(b.JobIDs, p.JobIDs...)
		if len(p.ReadyOrder) > 0 {
			b.JobIDs = slices.Clone(p.ReadyOrder)
		}
		if !p.FirstReadyAt.IsZero() {
			b.FirstReadyAt = p.FirstReadyAt
		}
		b.ArtifactIDs = appendUnique(b.ArtifactIDs, p.ArtifactIDs...)
		b.ArtifactCount = len(b.ArtifactIDs)
		b.Summary, b.LastReadyAt, b.Policy = p.Summary, p.LastReadyAt, p.Policy
		b.InlinePayloadBytes, b.RequiresArtifactRead = p.InlinePayloadBytes, p.RequiresArtifactRead
	case *events.BatchMaterialized:
		b.HeadAttemptID, b.Generation, b.SnapshotRevision = p.AttemptID, p.Generation, p.SnapshotRevision
		b.MaterializedAt = e.RecordedAt
		if p.DeliveryMode != "" {
			b.DeliveryMode = p.DeliveryMode
		}
		b.MergeUntil = time.Time{}
	case *events.BatchDeliveryAccepted:
		b.DeliveryAttemptCount++
		b.LastDeliveryAttemptAt = e.RecordedAt
		b.CooldownUntil, b.NextDeliveryNotBefore = p.CooldownUntil, p.NextDeliveryNotBefore
		b.ObservationDeadline = p.ObservationDeadline
	case *events.BatchReplayPolicyChanged:
		b.ReplayPolicy, b.ReplayPolicyReason = p.ReplayPolicy, p.Reason
		if p.ReplayPolicy == ReplayManual {
			b.ParkNotified, b.ParkNotifyAttempts, b.ParkNextRetry = false, 0, e.RecordedAt
		}
	case *events.BatchEligibleAfterSet:
		b.EligibleAfter = p.EligibleAfter
	case *events.BatchClosed:
		b.ClosedAt, b.CloseReason, b.CloseDetail = e.RecordedAt, p.CloseReason, p.Detail
		b.IsHead = false
		if p.Undelivered {
			// Told like a park: the park hook falls due now, whatever
			// a park before it was told.
			b.Undelivered = true
			b.ParkNotified, b.ParkNotifyAttempts, b.ParkNextRetry = false, 0, e.RecordedAt
		}
	case *events.BatchSuperseded:
		b.ClosedAt, b.CloseReason, b.CloseDetail = e.RecordedAt, "superseded", p.Reason
		b.SupersededBy = p.SupersededBy
		b.IsHead = false
	case *events.BatchHandoffRecorded:
		env := p.Envelope
		b.ContinuationBoundaryState = BoundaryCrossed
		b.ContinuationBoundaryAt = e.RecordedAt
		b.BoundaryAttemptID, b.BoundaryGeneration, b.BoundarySnapshotRevision = p.AttemptID, p.Generation, p.SnapshotRevision
		b.BoundaryRecoveryEnvelope, b.BoundaryRecoverySeq = &env, e.Seq
		b.BoundaryRecoveryBytes = p.EnvelopeBytes
		b.BoundaryRecoveryRetention = env.RetentionUntil
		b.ReplayPolicy = ReplayManual
		b.ClosedAt, b.CloseReason = e.RecordedAt, "handoff_recorded"
		b.IsHead = false
	case *events.BatchQueuedToCodex:
		b.ClosedAt, b.CloseReason = e.RecordedAt, "handoff_recorded"
		b.CloseDetail = "queued as item " + p.QueuedItemID + " of Codex's queue for the thread (" + p.CodexHome +
			"); Codex runs it as a turn with the thread's own permissions when it drains the queue"
		b.IsHead = false
	case *events.BatchRecoveryPinned:
		b.BoundaryRecoveryOperatorPin, b.BoundaryRecoveryRetention = p.PinUntil, p.RetentionUntil
	case *events.BatchRecoveryCollected:
		b.BoundaryRecoveryEnvelope, b.BoundaryRecoveryCollected, b.BoundaryRecoverySeq = nil, e.RecordedAt, 0
	}
}

// Parked reports whether the batch waits for manual resolution.
func (b *Batch) Parked() bool { return b.Open() && b.ReplayPolicy == ReplayManual }

// Counts implements Counter.
func (b *Batch) Counts() []string {
	if b.Undelivered && !b.Open() {
		return []string{CountBatchUndelivered}
	}
	return nil
}

// Deadlines implements Deadliner. Only work the sweep does is a deadline:
// the times at which a head may be delivered again (merge window, send
// interval, back-off, cooldown) are the scheduler's wake-ups, not sweep
// work, and a deadline the sweep has acted on changes the state so that
// it leaves the index.
func (b *Batch) Deadlines() []Deadline {
	var out []Deadline
	if (b.ReplayPolicy == ReplayManual || b.Undelivered) && !b.ParkNotified && !b.ParkNextRetry.IsZero() {
		out = append(out, Deadline{index.DueParkHook, b.ParkNextRetry})
	}
	if !b.Open() {
		if b.BoundaryRecoveryEnvelope != nil {
			out = append(out, Deadline{index.DueRecoveryGC, b.BoundaryRecoveryRetention})
		}
		return out
	}
	out = append(out, Deadline{index.DueRedeliveryWindow, b.RedeliveryWindowEndsAt})
	if b.BudgetSpent() && b.State == fsm.BatchCooldown && b.ReplayPolicy == ReplayAutomatic && b.ObservationDeadline.IsZero() {
		// The last counted attempt was a wake-up: the batch closes when
		// its cooldown ends. An observed turn ends the batch itself.
		out = append(out, Deadline{index.DueMaxAttempts, b.CooldownUntil})
	}
	return out
}

// BudgetSpent reports whether the batch has had every delivery attempt
// it may count.
func (b *Batch) BudgetSpent() bool {
	return b.MaxDeliveryAttempts > 0 && b.DeliveryAttemptCount >= b.MaxDeliveryAttempts
}

// Indexes implements Indexer.
func (b *Batch) Indexes() []IndexEntry {
	out := []IndexEntry{{index.BatchThread, index.ThreadOpenKey(b.SourceThreadID, b.OpenedSeq)}}
	if !b.Open() {
		return out
	}
	out = append(out, IndexEntry{index.ThreadOpen, index.ThreadOpenKey(b.SourceThreadID, b.OpenedSeq)})
	if b.IsHead {
		out = append(out, IndexEntry{index.Head, index.HeadKey(b.TargetKind, b.FirstReadyAt, b.SourceThreadID)})
	}
	if b.ReplayPolicy == ReplayManual {
		out = append(out, IndexEntry{index.Parked, ""})
	}
	return out
}
