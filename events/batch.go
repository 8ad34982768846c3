package events

import "time"

// KindBatch is the stream of one delivery batch.
const KindBatch Kind = "batch"

// batchEvents declares the batch events (see declarations).
func batchEvents() []declaration {
	return []declaration{
		decl[BatchOpened](KindBatch),
		decl[BatchPromoted](KindBatch),
		decl[BatchParkNotified](KindBatch),
		decl[BatchJobsAdded](KindBatch),
		decl[BatchMaterialized](KindBatch),
		decl[BatchDeliveryAccepted](KindBatch),
		decl[BatchReplayPolicyChanged](KindBatch),
		decl[BatchEligibleAfterSet](KindBatch),
		decl[BatchSuperseded](KindBatch),
		decl[BatchClosed](KindBatch),
		decl[BatchHandoffRecorded](KindBatch),
		decl[BatchQueuedToCodex](KindBatch),
		decl[BatchRecoveryPinned](KindBatch),
		decl[BatchRecoveryCollected](KindBatch),
	}
}

// BatchOpened opens a delivery batch at the tail of a thread's FIFO.
type BatchOpened struct {
	SourceThreadID         string         `json:"source_thread_id"`
	TargetKind             Target         `json:"target_kind"`
	JobIDs                 []string       `json:"job_ids"`
	ArtifactIDs            []string       `json:"artifact_ids,omitempty"`
	Summary                string         `json:"summary"`
	FirstReadyAt           time.Time      `json:"first_ready_at"`
	LastReadyAt            time.Time      `json:"last_ready_at"`
	Policy                 DeliveryPolicy `json:"delivery_policy"`
	InlinePayloadBytes     int64          `json:"inline_payload_bytes"`
	RequiresArtifactRead   bool           `json:"requires_artifact_read"`
	MaxDeliveryAttempts    int            `json:"max_delivery_attempts"`
	RedeliveryWindowEndsAt time.Time      `json:"redelivery_window_ends_at"`
	MergeUntil             time.Time      `json:"merge_until,omitzero"`
	// Head is set when the thread had no open batch: this one is its head.
	Head                  bool      `json:"head,omitempty"`
	NextDeliveryNotBefore time.Time `json:"next_delivery_not_before,omitzero"`
	// DeliveryTarget is its jobs' resolved codex_app_server target (a
	// batch only ever holds jobs of one target).
	DeliveryTarget *DeliveryTarget `json:"delivery_target,omitempty"`
}

const TypeBatchOpened = "batch.opened"

func (BatchOpened) EventType() string { return TypeBatchOpened }

// BatchPromoted makes a queued batch its thread's head once the batch in
// front of it closed.
type BatchPromoted struct {
	NextDeliveryNotBefore time.Time `json:"next_delivery_not_before,omitzero"`
}

const TypeBatchPromoted = "batch.promoted"

func (BatchPromoted) EventType() string { return TypeBatchPromoted }

// BatchParkNotified records one run of the operator's park hook.
type BatchParkNotified struct {
	Attempt     int       `json:"attempt"`
	OK          bool      `json:"ok"`
	ExitCode    int       `json:"exit_code"`
	Error       string    `json:"error,omitempty"`
	NextRetryAt time.Time `json:"next_retry_at,omitzero"`
}

const TypeBatchParkNotified = "batch.park_notified"

func (BatchParkNotified) EventType() string { return TypeBatchParkNotified }

// BatchJobsAdded merges further adjacent ready jobs into a queued batch.
type BatchJobsAdded struct {
	JobIDs               []string       `json:"job_ids"`
	ArtifactIDs          []string       `json:"artifact_ids,omitempty"`
	Summary              string         `json:"summary"`
	LastReadyAt          time.Time      `json:"last_ready_at"`
	Policy               DeliveryPolicy `json:"delivery_policy"`
	InlinePayloadBytes   int64          `json:"inline_payload_bytes"`
	RequiresArtifactRead bool           `json:"requires_artifact_read"`
	// ReadyOrder, when set, is the batch's whole job list after the
	// merge, by ready time: a supersede carries older jobs into a newer
	// batch, and they go before its own. Empty: the added jobs go last.
	ReadyOrder []string `json:"ready_order,omitempty"`
	// FirstReadyAt, when set, moves the batch's first ready time earlier
	// (carried jobs were ready before the batch's own).
	FirstReadyAt time.Time `json:"first_ready_at,omitzero"`
}

const TypeBatchJobsAdded = "batch.jobs_added"

func (BatchJobsAdded) EventType() string { return TypeBatchJobsAdded }

// BatchMaterialized binds a new attempt and snapshot to the batch.
type BatchMaterialized struct {
	AttemptID        string `json:"attempt_id"`
	Generation       uint64 `json:"generation"`
	SnapshotRevision uint64 `json:"snapshot_revision"`
	DeliveryMode     string `json:"delivery_mode,omitempty"`
}

const TypeBatchMaterialized = "batch.materialized"

func (BatchMaterialized) EventType() string { return TypeBatchMaterialized }

// BatchDeliveryAccepted records that the channel accepted a delivery; only
// these count against max_delivery_attempts.
type BatchDeliveryAccepted struct {
	AttemptID             string    `json:"attempt_id"`
	Generation            uint64    `json:"generation"`
	CooldownUntil         time.Time `json:"cooldown_until"`
	NextDeliveryNotBefore time.Time `json:"next_delivery_not_before"`
	// ObservationDeadline is set when the accepted turn is observed: the
	// turn, not the cooldown, then decides how the batch ends.
	ObservationDeadline time.Time `json:"delivery_observation_deadline,omitzero"`
}

const TypeBatchDeliveryAccepted = "batch.delivery_accepted"

func (BatchDeliveryAccepted) EventType() string { return TypeBatchDeliveryAccepted }

// BatchReplayPolicyChanged parks a batch for manual resolution (or, in
// principle, back to automatic).
type BatchReplayPolicyChanged struct {
	ReplayPolicy string `json:"replay_policy"`
	Reason       string `json:"reason"`
	AttemptID    string `json:"attempt_id,omitempty"`
}

const TypeBatchReplayPolicyChanged = "batch.replay_policy_changed"

func (BatchReplayPolicyChanged) EventType() string { return TypeBatchReplayPolicyChanged }

// BatchEligibleAfterSet takes a candidate out of the immediate-eligible set
// until the given time after a failure before acceptance.
type BatchEligibleAfterSet struct {
	EligibleAfter time.Time `json:"eligible_after"`
	Reason        string    `json:"reason"`
}

const TypeBatchEligibleAfterSet = "batch.eligible_after_set"

func (BatchEligibleAfterSet) EventType() string { return TypeBatchEligibleAfterSet }

// BatchSuperseded closes a head batch whose result a newer batch of the
// thread replaced (close_reason superseded): its jobs and artifacts are
// carried into SupersededBy, the next batch of its thread, in the same
// append.
type BatchSuperseded struct {
	Reason       string   `json:"reason"`
	SupersededBy string   `json:"superseded_by"`
	JobIDs       []string `json:"job_ids"`
}

const TypeBatchSuperseded = "batch.superseded"

func (BatchSuperseded) EventType() string { return TypeBatchSuperseded }

// BatchClosed is a batch reaching its terminal state.
type BatchClosed struct {
	CloseReason string `json:"close_reason"`
	Detail      string `json:"detail,omitempty"`
	// Undelivered marks a close by which cbth gave the batch up without
	// a confirmed delivery (command.UndeliveredReasons): the operator is
	// told of it as of a park. Absent in logs written before it existed,
	// whose closes replay as they were, with no notice.
	Undelivered bool `json:"undelivered,omitempty"`
}

const TypeBatchClosed = "batch.closed"

func (BatchClosed) EventType() string { return TypeBatchClosed }

// RecoveryEnvelope is the operator-only evidence kept when a Desktop caller
// crossed the continuation boundary.
type RecoveryEnvelope struct {
	BatchID              string    `json:"batch_id"`
	SourceThreadID       string    `json:"source_thread_id"`
	AttemptID            string    `json:"attempt_id"`
	Generation           uint64    `json:"generation"`
	SnapshotRevision     uint64    `json:"snapshot_revision"`
	ClosedAt             time.Time `json:"closed_at"`
	CloseReason          string    `json:"close_reason"`
	InlinePayloadSummary string    `json:"inline_payload_summary,omitempty"`
	InlinePayloadRef     string    `json:"inline_payload_ref,omitempty"`
	ArtifactManifestRefs []string  `json:"artifact_manifest_refs,omitempty"`
	ArtifactIDs          []string  `json:"artifact_ids,omitempty"`
	CreatedAt            time.Time `json:"created_at"`
	RetentionUntil       time.Time `json:"retention_until"`
}

// BatchHandoffRecorded closes a batch with close_reason handoff_recorded
// and stores its boundary recovery envelope in the same event.
type BatchHandoffRecorded struct {
	AttemptID        string           `json:"attempt_id"`
	Generation       uint64           `json:"generation"`
	SnapshotRevision uint64           `json:"snapshot_revision"`
	Envelope         RecoveryEnvelope `json:"boundary_recovery_envelope"`
	EnvelopeBytes    int64            `json:"boundary_recovery_envelope_bytes"`
}

const TypeBatchHandoffRecorded = "batch.handoff_recorded"

func (BatchHandoffRecorded) EventType() string { return TypeBatchHandoffRecorded }

// BatchQueuedToCodex closes a batch with close_reason handoff_recorded:
// its result is an item of Codex's own durable queue for the thread
// (`codex queue`), named here, which Codex runs as a turn with the
// thread's own permissions when it drains the queue. cbth never edits
// the queue after.
type BatchQueuedToCodex struct {
	AttemptID    string `json:"attempt_id"`
	Generation   uint64 `json:"generation"`
	QueuedItemID string `json:"queued_item_id"`
	CodexHome    string `json:"codex_home"`
}

const TypeBatchQueuedToCodex = "batch.queued_to_codex"

func (BatchQueuedToCodex) EventType() string { return TypeBatchQueuedToCodex }

// BatchRecoveryPinned sets an operator pin on a batch's recovery envelope.
type BatchRecoveryPinned struct {
	PinUntil       time.Time `json:"pin_until"`
	RetentionUntil time.Time `json:"retention_until"`
}

const TypeBatchRecoveryPinned = "batch.recovery_pinned"

func (BatchRecoveryPinned) EventType() string { return TypeBatchRecoveryPinned }

// BatchRecoveryCollected drops a closed batch's boundary recovery
// envelope once its retention ended (the batch.recovery_gc sweep). The
// log keeps the event that recorded it; the projection no longer holds it.
type BatchRecoveryCollected struct {
	RetentionUntil time.Time `json:"retention_until"`
}

const TypeBatchRecoveryCollected = "batch.recovery_collected"

func (BatchRecoveryCollected) EventType() string { return TypeBatchRecoveryCollected }
