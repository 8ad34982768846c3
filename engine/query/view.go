// Package query is the engine's read side for people and clients: the view
// types every JSON shape is made of, and the queries that build them from
// a snapshot. A storage state (engine/aggregate) is never sent as JSON;
// it goes through a view whose field names are the seed's, one name per
// concept, documented in spec/cli.md.
package query

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
)

// opt renders an optional time: null when unset.
func opt(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// JobView is a job as every command prints it.
type JobView struct {
	JobID          string                `json:"job_id"`
	TargetKind     events.Target         `json:"target_kind"`
	SourceThreadID string                `json:"source_thread_id"`
	State          fsm.JobState          `json:"status"`
	TaskKind       string                `json:"task_kind"`
	TaskSummary    string                `json:"task_summary"`
	ResultSummary  string                `json:"result_summary"`
	DedupeKey      string                `json:"dedupe_key"`
	ArtifactID     string                `json:"artifact_id"`
	CreatedAt      time.Time             `json:"created_at"`
	ReadyAt        *time.Time            `json:"ready_at"`
	UpdatedAt      time.Time             `json:"updated_at"`
	CompletedAt    *time.Time            `json:"completed_at"`
	TimeoutAt      *time.Time            `json:"timeout_at"`
	DeliveryPolicy events.DeliveryPolicy `json:"delivery_policy"`
	Metadata       json.RawMessage       `json:"metadata"`
	// MetadataRef names where the metadata is kept: the job.submitted
	// event that carried it ("" when it had none).
	MetadataRef  string        `json:"metadata_ref"`
	FailReason   string        `json:"fail_reason"`
	CancelReason string        `json:"cancel_reason"`
	Artifact     *ArtifactView `json:"artifact"`
	// Batch is where the job's result went: the batch it joined when it
	// became ready, with that batch's state and close reason.
	Batch *BatchRef `json:"batch"`
	// TaskID names the task that runs the job's command, for a job
	// submitted by cbth task run.
	TaskID string `json:"task_id,omitempty"`
	// DeliveryTarget is a codex_app_server job's resolved target.
	DeliveryTarget *events.DeliveryTarget `json:"delivery_target,omitempty"`
	Version        uint64                 `json:"version"`
	// AsOfSeq is set on a job as of a past moment (job query --as-of).
	AsOfSeq uint64 `json:"as_of_seq,omitempty"`
}

// BatchRef is a batch as seen from one of its jobs.
type BatchRef struct {
	BatchID      string         `json:"batch_id"`
	State        fsm.BatchState `json:"state"`
	ReplayPolicy string         `json:"replay_policy"`
	CloseReason  string         `json:"close_reason"`
	ClosedAt     *time.Time     `json:"closed_at"`
}

// NewJobView renders a job; a and b (its artifact and batch) may be nil.
func NewJobView(j *aggregate.Job, a *aggregate.Artifact, b *aggregate.Batch) JobView {
	v := JobView{
		JobID: j.ID, TargetKind: j.TargetKind, SourceThreadID: j.SourceThreadID, State: j.State,
		TaskKind: j.TaskKind, TaskSummary: j.TaskSummary, ResultSummary: j.ResultSummary, DedupeKey: j.DedupeKey,
		ArtifactID: j.ArtifactID, CreatedAt: j.CreatedAt, ReadyAt: opt(j.ReadyAt), UpdatedAt: j.UpdatedAt,
		CompletedAt: opt(j.CompletedAt), TimeoutAt: opt(j.TimeoutAt), DeliveryPolicy: j.DeliveryPolicy,
		FailReason: j.FailReason, CancelReason: j.CancelReason, Version: j.Version, DeliveryTarget: j.DeliveryTarget,
	}
	if len(j.Metadata) > 0 {
		v.Metadata = json.RawMessage(j.Metadata)
		v.MetadataRef = LogRef(j.FirstSeq)
	}
	if a != nil {
		av := NewArtifactView(a)
		v.Artifact = &av
	}
	if b != nil {
		v.Batch = &BatchRef{BatchID: b.ID, State: b.State, ReplayPolicy: b.ReplayPolicy, CloseReason: b.CloseReason, ClosedAt: opt(b.ClosedAt)}
	}
	return v
}

// ArtifactView is an artifact held in the managed store.
type ArtifactView struct {
	ArtifactID        string            `json:"artifact_id"`
	SourceJobID       string            `json:"source_job_id"`
	State             fsm.ArtifactState `json:"state"`
	SizeBytes         int64             `json:"size_bytes"`
	SHA256            string            `json:"sha256"`
	ContentType       string            `json:"content_type"`
	ManagedPath       string            `json:"managed_path"`
	ManifestPath      string            `json:"manifest_path"`
	CreatedAt         time.Time         `json:"created_at"`
	MinRetentionUntil time.Time         `json:"min_retention_until"`
	LastBatchClosedAt *time.Time        `json:"last_batch_closed_at"`
	OperatorPinUntil  *time.Time        `json:"operator_pin_until"`
	GCEligibleAt      time.Time         `json:"gc_eligible_at"`
	// RetentionUntil is how long the files are kept at least: null while
	// an open batch holds the artifact, then gc_eligible_at.
	RetentionUntil *time.Time `json:"retention_until"`
}

// NewArtifactView renders an artifact.
func NewArtifactView(a *aggregate.Artifact) ArtifactView {
	return ArtifactView{
		ArtifactID: a.ID, SourceJobID: a.SourceJobID, State: a.State, SizeBytes: a.SizeBytes, SHA256: a.SHA256,
		ContentType: a.ContentType, ManagedPath: a.ManagedPath, ManifestPath: a.ManifestPath, CreatedAt: a.CreatedAt,
		MinRetentionUntil: a.MinRetentionUntil, LastBatchClosedAt: opt(a.LastBatchClosedAt),
		OperatorPinUntil: opt(a.OperatorPinUntil), GCEligibleAt: a.GCEligibleAt, RetentionUntil: retention(a),
	}
}

// retention is an artifact's retention_until.
func retention(a *aggregate.Artifact) *time.Time {
	if len(a.OpenBatchIDs) > 0 {
		return nil
	}
	return opt(a.GCEligibleAt)
}

// LogRef names the log event at seq that holds a record kept by reference
// (a job's metadata, a batch's boundary recovery envelope): "log:<seq>",
// readable with `cbth events export --from <seq>`; "" for seq 0.
func LogRef(seq uint64) string {
	if seq == 0 {
		return ""
	}
	return "log:" + strconv.FormatUint(seq, 10)
}

// BatchView is a delivery batch with every field.
type BatchView struct {
	BatchID                string         `json:"batch_id"`
	SourceThreadID         string         `json:"source_thread_id"`
	TargetKind             events.Target  `json:"target_kind"`
	State                  fsm.BatchState `json:"state"`
	Head                   bool           `json:"head"`
	JobIDs                 []string       `json:"job_ids"`
	ArtifactIDs            []string       `json:"artifact_ids"`
	Summary                string         `json:"summary"`
	FirstReadyAt           time.Time      `json:"first_ready_at"`
	LastReadyAt            time.Time      `json:"last_ready_at"`
	MergeUntil             *time.Time     `json:"merge_until"`
	MaterializedAt         *time.Time     `json:"materialized_at"`
	LastDeliveryAttemptAt  *time.Time     `json:"last_delivery_attempt_at"`
	NextDeliveryNotBefore  *time.Time     `json:"next_delivery_not_before"`
	CooldownUntil          *time.Time     `json:"cooldown_until"`
	EligibleAfter          *time.Time     `json:"eligible_after"`
	RedeliveryWindowEndsAt time.Time      `json:"redelivery_window_ends_at"`
	MaxDeliveryAttempts    int            `json:"max_delivery_attempts"`
	DeliveryAttemptCount   int            `json:"delivery_attempt_count"`
	HeadAttemptID          string         `json:"head_attempt_id"`
	Generation             uint64         `json:"generation"`
	SnapshotRevision       uint64         `json:"snapshot_revision"`
	DeliveryMode           string         `json:"delivery_mode"`
	// The batch's delivery policy, as the seed spells its fields: the
	// strictest of its jobs' policies (a job keeps delivery_policy, the
	// object its submitter gave).
	ReadOnly                    bool       `json:"delivery_read_only"`
	RequiresApproval            bool       `json:"delivery_requires_approval"`
	RequiresNetwork             bool       `json:"delivery_requires_network"`
	RequiresWriteAccess         bool       `json:"delivery_requires_write_access"`
	InlinePayloadBytes          int64      `json:"inline_payload_bytes"`
	ArtifactCount               int        `json:"artifact_count"`
	RequiresArtifactRead        bool       `json:"requires_artifact_read"`
	ReplayPolicy                string     `json:"replay_policy"`
	ReplayPolicyReason          string     `json:"replay_policy_reason"`
	ParkNotifyAttempts          int        `json:"park_notify_attempts"`
	ParkNotified                bool       `json:"park_notified"`
	ParkNextRetry               *time.Time `json:"park_next_retry"`
	ContinuationBoundaryState   string     `json:"continuation_boundary_state"`
	ContinuationBoundaryAt      *time.Time `json:"continuation_boundary_crossed_at"`
	BoundaryAttemptID           string     `json:"boundary_attempt_id"`
	BoundaryGeneration          uint64     `json:"boundary_generation"`
	BoundarySnapshotRevision    uint64     `json:"boundary_snapshot_revision"`
	BoundaryRecoveryRef         string     `json:"boundary_recovery_envelope_ref"`
	BoundaryRecoveryBytes       int64      `json:"boundary_recovery_envelope_bytes"`
	BoundaryRecoveryRetention   *time.Time `json:"boundary_recovery_retention_until"`
	BoundaryRecoveryOperatorPin *time.Time `json:"boundary_recovery_operator_pin_until"`
	ClosedAt                    *time.Time `json:"closed_at"`
	CloseReason                 string     `json:"close_reason"`
	CloseDetail                 string     `json:"close_detail"`
	SupersededBy                string     `json:"superseded_by"`
	CreatedAt                   time.Time  `json:"created_at"`
	UpdatedAt                   time.Time  `json:"updated_at"`
	// DeliveryTarget is a codex_app_server batch's resolved target.
	DeliveryTarget *events.DeliveryTarget `json:"delivery_target,omitempty"`
	Version        uint64                 `json:"version"`
}

// NewBatchView renders a batch.
func NewBatchView(b *aggregate.Batch) BatchView {
	arts := b.ArtifactIDs
	if arts == nil {
		arts = []string{}
	}
	return BatchView{
		BatchID: b.ID, SourceThreadID: b.SourceThreadID, TargetKind: b.TargetKind, State: b.State, Head: b.IsHead,
		JobIDs: b.JobIDs, ArtifactIDs: arts, Summary: b.Summary, FirstReadyAt: b.FirstReadyAt, LastReadyAt: b.LastReadyAt,
		MergeUntil: opt(b.MergeUntil), MaterializedAt: opt(b.MaterializedAt), LastDeliveryAttemptAt: opt(b.LastDeliveryAttemptAt),
		NextDeliveryNotBefore: opt(b.NextDeliveryNotBefore), CooldownUntil: opt(b.CooldownUntil), EligibleAfter: opt(b.EligibleAfter),
		RedeliveryWindowEndsAt: b.RedeliveryWindowEndsAt, MaxDeliveryAttempts: b.MaxDeliveryAttempts,
		DeliveryAttemptCount: b.DeliveryAttemptCount, HeadAttemptID: b.HeadAttemptID, Generation: b.Generation,
		SnapshotRevision: b.SnapshotRevision, DeliveryMode: b.DeliveryMode, ReadOnly: b.Policy.ReadOnly,
		RequiresApproval: b.Policy.RequiresApproval, RequiresNetwork: b.Policy.RequiresNetwork, RequiresWriteAccess: b.Policy.RequiresWriteAccess,
		InlinePayloadBytes: b.InlinePayloadBytes, ArtifactCount: b.ArtifactCount, RequiresArtifactRead: b.RequiresArtifactRead,
		ReplayPolicy: b.ReplayPolicy, ReplayPolicyReason: b.ReplayPolicyReason, ParkNotifyAttempts: b.ParkNotifyAttempts,
		ParkNotified: b.ParkNotified, ParkNextRetry: opt(b.ParkNextRetry), ContinuationBoundaryState: b.ContinuationBoundaryState,
		ContinuationBoundaryAt: opt(b.ContinuationBoundaryAt), BoundaryAttemptID: b.BoundaryAttemptID,
		BoundaryGeneration: b.BoundaryGeneration, BoundarySnapshotRevision: b.BoundarySnapshotRevision, BoundaryRecoveryRef: LogRef(b.BoundaryRecoverySeq),
		BoundaryRecoveryBytes: b.BoundaryRecoveryBytes, BoundaryRecoveryRetention: opt(b.BoundaryRecoveryRetention),
		BoundaryRecoveryOperatorPin: opt(b.BoundaryRecoveryOperatorPin), ClosedAt: opt(b.ClosedAt),
		CloseReason: b.CloseReason, CloseDetail: b.CloseDetail, SupersededBy: b.SupersededBy, CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt, Version: b.Version,
		DeliveryTarget: b.DeliveryTarget,
	}
}

// AttemptView is one delivery attempt with every field; the CLI
// fail-closed fields (delivery_turn_id, managed_session_id, session_epoch,
// the observation state and deadline, the last observed turn event) are
// among them.
type AttemptView struct {
	AttemptID              string           `json:"attempt_id"`
	SourceThreadID         string           `json:"source_thread_id"`
	BatchID                string           `json:"batch_id"`
	Generation             uint64           `json:"generation"`
	State                  fsm.AttemptState `json:"state"`
	SnapshotPath           string           `json:"snapshot_path"`
	SnapshotRevision       uint64           `json:"snapshot_revision"`
	DeliveryDeadline       *time.Time       `json:"delivery_deadline"`
	BindingID              string           `json:"binding_id"`
	BridgeRequestID        string           `json:"bridge_request_id"`
	BridgeArmLeaseID       string           `json:"bridge_arm_lease_id"`
	BridgeArmLeaseDeadline *time.Time       `json:"bridge_arm_lease_deadline"`
	ArmPendingSince        *time.Time       `json:"arm_pending_since"`
	ArmPendingDeadline     *time.Time       `json:"arm_pending_deadline"`
	PauseNotBefore         *time.Time       `json:"pause_not_before"`
	PauseDeadline          *time.Time       `json:"pause_deadline"`
	AutomationID           string           `json:"automation_id"`
	AutomationBindingState string           `json:"automation_binding_state"`
	RPCRequestID           string           `json:"delivery_rpc_request_id"`
	RPCKind                string           `json:"delivery_rpc_kind"`
	RPCStartedAt           *time.Time       `json:"delivery_rpc_started_at"`
	RPCState               string           `json:"delivery_rpc_state"`
	RPCCorrelationMarker   string           `json:"delivery_rpc_correlation_marker"`
	// RejectedRequestIDs are the newest maxRejectedShown of the
	// attempt's rejected requests, oldest first; RejectedCount counts
	// every one (the log has them all).
	RejectedRequestIDs    []string   `json:"rejected_rpc_request_ids"`
	RejectedCount         int        `json:"rejected_rpc_request_count"`
	TurnID                string     `json:"delivery_turn_id"`
	ManagedSessionID      string     `json:"managed_session_id"`
	SessionEpoch          uint64     `json:"session_epoch"`
	AcceptedAt            *time.Time `json:"delivery_accepted_at"`
	ObservationState      string     `json:"delivery_observation_state"`
	ObservationDeadline   *time.Time `json:"delivery_observation_deadline"`
	LastObservedTurnEvent *string    `json:"last_observed_turn_event"`
	LastObservedTurnAt    *time.Time `json:"last_observed_turn_event_at"`
	CooldownUntil         *time.Time `json:"cooldown_until"`
	EndReason             string     `json:"end_reason"`
	SupersededBy          string     `json:"superseded_by"`
	CreatedAt             time.Time  `json:"created_at"`
	UpdatedAt             time.Time  `json:"updated_at"`
	Version               uint64     `json:"version"`
}

// maxRejectedShown bounds the rejected request ids an attempt view
// lists: with a short back-off and a long window an attempt may collect
// thousands.
const maxRejectedShown = 100

// NewAttemptView renders an attempt.
func NewAttemptView(a *aggregate.Attempt) AttemptView {
	rej := a.RejectedRequestIDs
	if rej == nil {
		rej = []string{}
	}
	count := len(rej)
	rej = rej[max(0, count-maxRejectedShown):]
	v := AttemptView{
		AttemptID: a.ID, SourceThreadID: a.SourceThreadID, BatchID: a.BatchID, Generation: a.Generation, State: a.State,
		SnapshotPath: a.SnapshotPath, SnapshotRevision: a.SnapshotRevision, DeliveryDeadline: opt(a.DeliveryDeadline),
		BindingID: a.BindingID, BridgeRequestID: a.BridgeRequestID, BridgeArmLeaseID: a.BridgeArmLeaseID,
		BridgeArmLeaseDeadline: opt(a.BridgeArmLeaseDeadline), ArmPendingSince: opt(a.ArmPendingSince),
		ArmPendingDeadline: opt(a.ArmPendingDeadline), PauseNotBefore: opt(a.PauseNotBefore), PauseDeadline: opt(a.PauseDeadline),
		AutomationID: a.AutomationID, AutomationBindingState: a.AutomationBindingState, RPCRequestID: a.RPCRequestID,
		RPCKind: a.RPCKind, RPCStartedAt: opt(a.RPCStartedAt), RPCState: a.RPCState, RPCCorrelationMarker: a.RPCCorrelationMarker,
		RejectedRequestIDs: rej, RejectedCount: count, TurnID: a.TurnID, ManagedSessionID: a.ManagedSessionID, SessionEpoch: a.SessionEpoch,
		AcceptedAt: opt(a.AcceptedAt), ObservationState: a.ObservationState, ObservationDeadline: opt(a.ObservationDeadline),
		LastObservedTurnAt: opt(a.LastObservedTurnAt), CooldownUntil: opt(a.CooldownUntil), EndReason: a.EndReason,
		SupersededBy: a.SupersededBy, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt, Version: a.Version,
	}
	if a.LastObservedTurnEvent != "" {
		ev := a.LastObservedTurnEvent
		v.LastObservedTurnEvent = &ev // null until the accepted turn reports
	}
	return v
}

// ViewOf renders any state for people and clients: jobs, batches,
// attempts and artifacts through their views, the others as they are.
func ViewOf(s aggregate.State) any {
	switch s := s.(type) {
	case *aggregate.Job:
		return NewJobView(s, nil, nil)
	case *aggregate.Batch:
		return NewBatchView(s)
	case *aggregate.Attempt:
		return NewAttemptView(s)
	case *aggregate.Artifact:
		return NewArtifactView(s)
	case *aggregate.Session:
		return NewSessionView(s)
	case *aggregate.AppServer:
		return NewAppServerView(s)
	}
	return s
}
