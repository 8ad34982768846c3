package aggregate

import (
	"slices"
	"sort"
	"time"

	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
)

// Counter names used by the states below.
const (
	CountJobActive        = "job.active"               // running jobs
	CountBatchUndelivered = "batch.closed_undelivered" // batches closed undelivered, ever
)

// Job is a tracked long-running task.
type Job struct {
	Header[fsm.JobState]
	TargetKind     string                 `json:"target_kind"`
	SourceThreadID string                 `json:"source_thread_id"`
	TaskKind       string                 `json:"task_kind"`
	TaskSummary    string                 `json:"task_summary"`
	Metadata       events.RawJSON         `json:"metadata,omitempty"`
	DedupeKey      string                 `json:"dedupe_key,omitempty"`
	DeliveryPolicy events.DeliveryPolicy  `json:"delivery_policy"`
	ArtifactID     string                 `json:"artifact_id,omitempty"`
	ResultSummary  string                 `json:"result_summary,omitempty"`
	ResultBytes    int64                  `json:"result_bytes,omitempty"`
	BatchID        string                 `json:"batch_id,omitempty"`
	FailReason     string                 `json:"fail_reason,omitempty"`
	CancelReason   string                 `json:"cancel_reason,omitempty"`
	CreatedSeq     uint64                 `json:"created_seq"`
	ReadyAt        time.Time              `json:"ready_at,omitzero"`
	CompletedAt    time.Time              `json:"completed_at,omitzero"`
	TimeoutAt      time.Time              `json:"timeout_at,omitzero"`
	DeliveryTarget *events.DeliveryTarget `json:"delivery_target,omitempty"`
}

func (j *Job) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.JobSubmitted:
		j.TargetKind, j.SourceThreadID = p.TargetKind, p.SourceThreadID
		j.TaskKind, j.TaskSummary = p.TaskKind, p.TaskSummary
		j.Metadata, j.DedupeKey, j.DeliveryPolicy = p.Metadata, p.DedupeKey, p.DeliveryPolicy
		j.CreatedSeq, j.TimeoutAt, j.DeliveryTarget = e.Seq, p.TimeoutAt, p.DeliveryTarget
	case *events.JobCompleted:
		j.ResultSummary, j.ArtifactID, j.ResultBytes, j.BatchID = p.ResultSummary, p.ArtifactID, p.ResultBytes, p.BatchID
		j.ReadyAt, j.CompletedAt = e.RecordedAt, e.RecordedAt
	case *events.JobFailed:
		j.FailReason, j.CompletedAt = p.Reason, e.RecordedAt
	case *events.JobCancelled:
		j.CancelReason = p.Reason
	case *events.JobCarried:
		j.BatchID = p.BatchID
	}
}

// Indexes implements Indexer.
func (j *Job) Indexes() []IndexEntry {
	out := []IndexEntry{{index.JobThread, j.SourceThreadID}}
	if j.DedupeKey != "" {
		out = append(out, IndexEntry{index.Dedupe, j.DedupeKey})
	}
	return out
}

// Deadlines implements Deadliner: a running job with a timeout fails at
// it unless reported first.
func (j *Job) Deadlines() []Deadline {
	if j.State == fsm.JobRunning && !j.TimeoutAt.IsZero() {
		return []Deadline{{index.DueJobTimeout, j.TimeoutAt}}
	}
	return nil
}

// Counts implements Counter.
func (j *Job) Counts() []string {
	if j.State == fsm.JobRunning {
		return []string{CountJobActive}
	}
	return nil
}

// Batch is a delivery batch: the unit delivered to a caller thread.
type Batch struct {
	Header[fsm.BatchState]
	SourceThreadID              string                   `json:"source_thread_id"`
	TargetKind                  string                   `json:"target_kind"`
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

// Attempt is one try at delivering a batch.
type Attempt struct {
	Header[fsm.AttemptState]
	SourceThreadID         string    `json:"source_thread_id"`
	BatchID                string    `json:"batch_id"`
	Generation             uint64    `json:"generation"`
	SnapshotPath           string    `json:"snapshot_path,omitempty"`
	SnapshotRevision       uint64    `json:"snapshot_revision"`
	DeliveryDeadline       time.Time `json:"delivery_deadline,omitzero"`
	BindingID              string    `json:"binding_id,omitempty"`
	BridgeRequestID        string    `json:"bridge_request_id,omitempty"`
	BridgeArmLeaseID       string    `json:"bridge_arm_lease_id,omitempty"`
	BridgeArmLeaseDeadline time.Time `json:"bridge_arm_lease_deadline,omitzero"`
	ArmPendingSince        time.Time `json:"arm_pending_since,omitzero"`
	ArmPendingDeadline     time.Time `json:"arm_pending_deadline,omitzero"`
	PauseNotBefore         time.Time `json:"pause_not_before,omitzero"`
	PauseDeadline          time.Time `json:"pause_deadline,omitzero"`
	AutomationID           string    `json:"automation_id,omitempty"`
	AutomationBindingState string    `json:"automation_binding_state"`
	RPCRequestID           string    `json:"delivery_rpc_request_id,omitempty"`
	RPCKind                string    `json:"delivery_rpc_kind,omitempty"`
	RPCStartedAt           time.Time `json:"delivery_rpc_started_at,omitzero"`
	RPCState               string    `json:"delivery_rpc_state,omitempty"`
	RPCCorrelationMarker   string    `json:"delivery_rpc_correlation_marker,omitempty"`
	RejectedRequestIDs     []string  `json:"rejected_rpc_request_ids,omitempty"`
	TurnID                 string    `json:"delivery_turn_id,omitempty"`
	ManagedSessionID       string    `json:"managed_session_id,omitempty"`
	SessionEpoch           uint64    `json:"session_epoch,omitempty"`
	AcceptedAt             time.Time `json:"delivery_accepted_at,omitzero"`
	ObservationState       string    `json:"delivery_observation_state,omitempty"`
	ObservationDeadline    time.Time `json:"delivery_observation_deadline,omitzero"`
	LastObservedTurnEvent  string    `json:"last_observed_turn_event,omitempty"`
	LastObservedTurnAt     time.Time `json:"last_observed_turn_event_at,omitzero"`
	CooldownUntil          time.Time `json:"cooldown_until,omitzero"`
	EndReason              string    `json:"end_reason,omitempty"`
	SupersededBy           string    `json:"superseded_by,omitempty"`
	// RelayMarkers are the transcript-relay markers issued for the
	// attempt, with their consumption (the replay fence).
	RelayMarkers []RelayMarker `json:"relay_markers,omitempty"`
}

// RelayMarker is one issued transcript-relay marker of an attempt.
type RelayMarker struct {
	Marker          string    `json:"marker"`
	Kind            string    `json:"kind"`
	BridgeThreadID  string    `json:"bridge_thread_id"`
	BridgeRequestID string    `json:"bridge_request_id"`
	IssuedAt        time.Time `json:"issued_at"`
	ExpiresAt       time.Time `json:"expires_at"`
	ConsumedSHA256  string    `json:"consumed_envelope_sha256,omitempty"`
	ConsumedAt      time.Time `json:"consumed_at,omitzero"`
	// Generation and AttemptID are a pause marker's (on a binding).
	Generation uint64 `json:"generation,omitempty"`
	AttemptID  string `json:"attempt_id,omitempty"`
}

// Valid reports whether the marker may still be consumed at now.
func (m RelayMarker) Valid(now time.Time) bool {
	return m.ConsumedSHA256 == "" && now.Before(m.ExpiresAt)
}

// findMarker returns the marker m in ms, nil if none.
func findMarker(ms []RelayMarker, m string) *RelayMarker {
	for i := range ms {
		if ms[i].Marker == m {
			return &ms[i]
		}
	}
	return nil
}

// Marker returns the attempt's issued marker m, nil if none.
func (a *Attempt) Marker(m string) *RelayMarker { return findMarker(a.RelayMarkers, m) }

// Marker returns the binding's issued pause marker m, nil if none.
func (b *Binding) Marker(m string) *RelayMarker { return findMarker(b.RelayMarkers, m) }

// Live reports whether the attempt is non-terminal.
func (a *Attempt) Live() bool {
	switch a.State {
	case fsm.AttemptPrepared, fsm.AttemptAcceptPending, fsm.AttemptArmPending, fsm.AttemptCooldown:
		return true
	}
	return false
}

func (a *Attempt) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.AttemptPrepared:
		a.SourceThreadID, a.BatchID, a.Generation = p.SourceThreadID, p.BatchID, p.Generation
		a.SnapshotPath, a.SnapshotRevision, a.DeliveryDeadline = p.SnapshotPath, p.SnapshotRevision, p.DeliveryDeadline
		a.BindingID, a.AutomationBindingState = p.BindingID, "unknown"
	case *events.AttemptArmPendingNoted:
		a.BridgeRequestID, a.BridgeArmLeaseID, a.BridgeArmLeaseDeadline = p.BridgeRequestID, p.LeaseID, p.LeaseDeadline
		a.ArmPendingSince, a.ArmPendingDeadline = e.RecordedAt, p.ArmPendingDeadline
	case *events.AttemptArmed:
		a.CooldownUntil, a.PauseNotBefore, a.PauseDeadline = p.CooldownUntil, p.PauseNotBefore, p.PauseDeadline
		a.AcceptedAt = e.RecordedAt // the arm is the Desktop channel's acceptance
		if p.AutomationID != "" {
			a.AutomationID, a.AutomationBindingState = p.AutomationID, "observed"
		}
	case *events.AttemptAcceptPending:
		a.RPCRequestID, a.RPCKind, a.RPCCorrelationMarker = p.RPCRequestID, p.RPCKind, p.CorrelationMarker
		a.RPCStartedAt, a.RPCState = e.RecordedAt, "pending_acceptance"
		a.ManagedSessionID, a.SessionEpoch = p.ManagedSessionID, p.SessionEpoch
	case *events.AttemptAccepted:
		a.RPCState, a.TurnID, a.AcceptedAt = "accepted", p.TurnID, e.RecordedAt
		a.ObservationDeadline, a.CooldownUntil = p.ObservationDeadline, p.CooldownUntil
		if !p.ObservationDeadline.IsZero() {
			a.ObservationState = "tracking" // only targets that report turns are observed
		}
		a.LastObservedTurnEvent, a.LastObservedTurnAt = "", time.Time{}
	case *events.AttemptRejectedBeforeAccept:
		a.RPCState = "rejected_before_accept"
		a.RejectedRequestIDs = append(a.RejectedRequestIDs, a.RPCRequestID)
		a.RPCRequestID, a.RPCCorrelationMarker = "", ""
	case *events.AttemptTurnObserved:
		a.LastObservedTurnEvent, a.LastObservedTurnAt = p.Event, e.RecordedAt
	case *events.AttemptAbandoned:
		a.EndReason = p.Reason
		if p.ObservationState != "" {
			a.ObservationState = p.ObservationState
		}
		if p.RPCState != "" {
			a.RPCState = p.RPCState
		}
	case *events.AttemptSuperseded:
		a.EndReason, a.SupersededBy = p.Reason, p.ByAttemptID
	case *events.AttemptClosed:
		a.EndReason = p.Reason
	case *events.AttemptRelayMarkerIssued:
		a.RelayMarkers = append(a.RelayMarkers, RelayMarker{Marker: p.Marker, Kind: p.Kind, BridgeThreadID: p.BridgeThreadID,
			BridgeRequestID: p.BridgeRequestID, IssuedAt: e.RecordedAt, ExpiresAt: p.ExpiresAt})
	case *events.AttemptRelayConsumed:
		if m := a.Marker(p.Marker); m != nil {
			m.ConsumedSHA256, m.ConsumedAt = p.EnvelopeSHA256, e.RecordedAt
		}
	}
}

// Deadlines implements Deadliner.
func (a *Attempt) Deadlines() []Deadline {
	switch a.State {
	case fsm.AttemptArmPending:
		return []Deadline{{index.DueArmPending, a.ArmPendingDeadline}}
	case fsm.AttemptCooldown:
		var out []Deadline
		if a.Tracking() {
			out = append(out, Deadline{index.DueObservation, a.ObservationDeadline})
		}
		if !a.PauseDeadline.IsZero() {
			out = append(out, Deadline{index.DueAttemptPause, a.PauseDeadline})
		}
		return out
	}
	return nil
}

// Tracking reports whether the attempt's accepted turn is being
// observed: the daemon stays up until the turn ends or its deadline.
func (a *Attempt) Tracking() bool {
	return a.State == fsm.AttemptCooldown && a.ObservationState == "tracking" && !a.ObservationDeadline.IsZero()
}

// Indexes implements Indexer.
func (a *Attempt) Indexes() []IndexEntry {
	out := []IndexEntry{{index.BatchAttempts, a.BatchID}}
	if a.Live() {
		out = append(out, IndexEntry{index.ThreadLive, a.SourceThreadID})
	}
	if a.Tracking() {
		out = append(out, IndexEntry{index.Tracking, index.TrackingKey(a.ObservationDeadline)})
	}
	for _, m := range a.RelayMarkers {
		out = append(out, IndexEntry{index.RelayMarker, m.Marker})
	}
	if !a.AcceptedAt.IsZero() {
		out = append(out, IndexEntry{index.ThreadSends, index.SendKey(a.SourceThreadID, a.AcceptedAt)})
	}
	return out
}

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

// Binding binds a Desktop source thread to its caller heartbeat automation.
// BridgeThreadID, when set, pins it to one bridge thread; empty, it is
// served by whichever bridge the installation publishes for.
type Binding struct {
	Header[fsm.BindingState]
	SourceThreadID            string              `json:"source_thread_id"`
	CallerAutomationID        string              `json:"caller_automation_id"`
	BridgeThreadID            string              `json:"bridge_thread_id,omitempty"`
	Mirror                    events.Capabilities `json:"mirror"`
	ArmedGeneration           uint64              `json:"armed_generation,omitempty"`
	ArmedGenerationQuiesced   time.Time           `json:"armed_generation_quiesced_at,omitzero"`
	PauseNotBefore            time.Time           `json:"pause_not_before,omitzero"`
	PauseDeadline             time.Time           `json:"pause_deadline,omitzero"`
	DegradedReason            string              `json:"degraded_reason,omitempty"`
	LastVerifiedAt            time.Time           `json:"last_verified_at,omitzero"`
	AutomationDeletedOnUnbind bool                `json:"automation_deleted_on_unbind,omitempty"`
	// RelayMarkers are the pause-proof relay markers issued for the
	// binding and not yet expired when the last one was issued.
	RelayMarkers []RelayMarker `json:"relay_markers,omitempty"`
}

func (b *Binding) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.BindingBound:
		b.SourceThreadID, b.CallerAutomationID, b.BridgeThreadID = p.SourceThreadID, p.CallerAutomationID, p.BridgeThreadID
		b.Mirror, b.DegradedReason, b.LastVerifiedAt = p.Mirror, "", e.RecordedAt
		b.AutomationDeletedOnUnbind = false
		// The repairing operator takes the pause over: a deadline that
		// passed would degrade the repaired binding at once. The armed
		// generation still needs its pause proven before a fresh arm.
		b.PauseDeadline = time.Time{}
		if p.ReplacedAutomation {
			// The armed generation belonged to the old automation, whose
			// late wakes can only hit superseded generations: the new one
			// starts unarmed.
			b.ArmedGeneration, b.ArmedGenerationQuiesced = 0, time.Time{}
			b.PauseNotBefore, b.PauseDeadline = time.Time{}, time.Time{}
		}
	case *events.BindingArmed:
		b.ArmedGeneration, b.ArmedGenerationQuiesced = p.Generation, time.Time{}
		b.PauseNotBefore, b.PauseDeadline = p.PauseNotBefore, p.PauseDeadline
	case *events.BindingQuiesced:
		if p.Generation == b.ArmedGeneration {
			b.ArmedGenerationQuiesced = e.RecordedAt
			b.PauseNotBefore, b.PauseDeadline = time.Time{}, time.Time{}
		}
	case *events.BindingDegraded:
		b.DegradedReason = p.Reason
	case *events.BindingUnbound:
		b.AutomationDeletedOnUnbind = p.DeleteAutomation
	case *events.BindingRelayMarkerIssued:
		// Expired markers can never be consumed: drop them, so a
		// long-lived binding keeps at most a relay_marker_ttl's worth.
		b.RelayMarkers = slices.DeleteFunc(b.RelayMarkers, func(m RelayMarker) bool { return !e.RecordedAt.Before(m.ExpiresAt) })
		b.RelayMarkers = append(b.RelayMarkers, RelayMarker{Marker: p.Marker, Kind: p.Kind, BridgeThreadID: p.BridgeThreadID,
			BridgeRequestID: p.BridgeRequestID, IssuedAt: e.RecordedAt, ExpiresAt: p.ExpiresAt, Generation: p.Generation, AttemptID: p.AttemptID})
	case *events.BindingRelayConsumed:
		if m := b.Marker(p.Marker); m != nil {
			m.ConsumedSHA256, m.ConsumedAt = p.EnvelopeSHA256, e.RecordedAt
		}
	}
}

// Unquiesced reports whether the binding's caller heartbeat was armed for
// a generation that is not yet proven paused, deleted or quiesced.
func (b *Binding) Unquiesced() bool {
	return b.ArmedGeneration > 0 && b.ArmedGenerationQuiesced.IsZero()
}

// Deadlines implements Deadliner.
func (b *Binding) Deadlines() []Deadline {
	if b.State == fsm.BindingBound && !b.PauseDeadline.IsZero() {
		return []Deadline{{index.DueBindingPause, b.PauseDeadline}}
	}
	return nil
}

// Indexes implements Indexer: every binding by its thread; a bound or
// degraded one by its caller automation (an automation serves one thread);
// one whose armed generation is not yet quiesced by its pause_not_before,
// for the pause-due snapshot.
func (b *Binding) Indexes() []IndexEntry {
	out := []IndexEntry{{index.BindingByThread, b.SourceThreadID}}
	if b.State == fsm.BindingBound || b.State == fsm.BindingDegraded {
		out = append(out, IndexEntry{index.BindingByAutomation, b.CallerAutomationID})
		if b.Unquiesced() {
			out = append(out, IndexEntry{index.BindingUnquiesced, index.Time(b.PauseNotBefore)})
		}
	}
	for _, m := range b.RelayMarkers {
		out = append(out, IndexEntry{index.BindingRelayMarker, m.Marker})
	}
	return out
}

// Installation is the singleton Desktop installation state: the
// capability conclusions (written only by repair) and the bridge thread
// the snapshots are published for (written by bridge-preflight).
type Installation struct {
	Header[fsm.InstallationState]
	events.Capabilities
	ValidatedAt    time.Time `json:"validated_at,omitzero"`
	UpdatedBy      string    `json:"updated_by_bootstrap_or_repair"`
	BridgeThreadID string    `json:"bridge_thread_id,omitempty"`
	// RelayScanners are the transcript-relay scanner bindings, by bridge
	// thread.
	RelayScanners map[string]RelayScanner `json:"relay_scanners,omitempty"`
	// SnapshotRevisionsReserved is the highest snapshot revision the
	// publisher may have used: the next daemon starts after it.
	SnapshotRevisionsReserved uint64 `json:"snapshot_revisions_reserved,omitempty"`
	// MCPValidation is the open request of a live validation of the mcp
	// writeback transport; MCPWriteback the last proof one gave.
	MCPValidation *events.InstallationMCPValidationRequested `json:"mcp_validation,omitempty"`
	MCPWriteback  *MCPWriteback                              `json:"mcp_writeback,omitempty"`
}

// MCPWriteback is the proof that Desktop threads reach cbth's MCP tools,
// for the cbth of one fingerprint (spec/desktop.md, "Writeback
// transports").
type MCPWriteback struct {
	events.InstallationMCPWritebackValidated
	ValidatedAt time.Time `json:"validated_at"`
}

// MCPWritebackValidated says whether the mcp writeback transport is
// validated for the installation as it is now: proven for the validated
// fingerprint. A repair that changes the fingerprint voids the proof.
func (i *Installation) MCPWritebackValidated() bool {
	return i.MCPWriteback != nil && i.MCPWriteback.Fingerprint == i.ValidationFingerprint && i.ValidationFingerprint != ""
}

// WritebackTransport is the writeback transport a heartbeat should use
// (spec/desktop.md, "Writeback transports"): mcp where it is validated,
// else relay where writeback is validated and a relay scanner is bound,
// else direct where writeback is validated; "" while none is.
func (i *Installation) WritebackTransport() string {
	switch {
	case i.MCPWritebackValidated():
		return "mcp"
	case i.WritebackCapability == events.CapValidated && len(i.RelayScanners) > 0:
		return "relay"
	case i.WritebackCapability == events.CapValidated:
		return "direct"
	}
	return ""
}

// WritebackValidated says whether any writeback transport is validated:
// the operator's writeback_capability (relay, direct) or the mcp proof.
func (i *Installation) WritebackValidated() bool {
	return i.WritebackCapability == events.CapValidated || i.MCPWritebackValidated()
}

// RelayScanner is one bridge thread's relay scanner: the rollout it is
// bound to, how far it has recorded reading it (a restarted daemon
// resumes there), and why it stopped, if it did.
type RelayScanner struct {
	events.InstallationRelayScannerBound
	Offset int64 `json:"offset"`
	Line   int64 `json:"line"`
	// DegradedReason is a stable code (events.RelayScanner*) while the
	// scanner is stopped until a rebind; empty while it reads.
	DegradedReason string    `json:"degraded_reason,omitempty"`
	DegradedDetail string    `json:"degraded_detail,omitempty"`
	DegradedAt     time.Time `json:"degraded_at,omitzero"`
	// SkippedRecords counts the records the scanner read through without
	// parsing under this binding, the last of them LastSkipped, recorded
	// at SkippedAt: it reads on, but shows degraded until a rebind.
	SkippedRecords int64                     `json:"skipped_records,omitempty"`
	LastSkipped    events.RelaySkippedRecord `json:"last_skipped,omitzero"`
	SkippedAt      time.Time                 `json:"skipped_at,omitzero"`
}

func (i *Installation) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.InstallationStateRepaired:
		i.Capabilities, i.ValidatedAt, i.UpdatedBy = p.State, p.ValidatedAt, p.UpdatedBy
	case *events.InstallationBridgeSelected:
		i.BridgeThreadID = p.BridgeThreadID
	case *events.InstallationSnapshotRevisionsReserved:
		i.SnapshotRevisionsReserved = p.Through
	case *events.InstallationMCPValidationRequested:
		i.MCPValidation = p
	case *events.InstallationMCPWritebackValidated:
		i.MCPValidation = nil
		i.MCPWriteback = &MCPWriteback{InstallationMCPWritebackValidated: *p, ValidatedAt: e.RecordedAt}
	case *events.InstallationRelayScannerBound:
		i.scanner(p.BridgeThreadID, 0, func(s *RelayScanner) {
			*s = RelayScanner{InstallationRelayScannerBound: *p, Offset: p.StartOffset, Line: p.StartLine}
		})
	case *events.InstallationRelayScannerAdvanced:
		i.scanner(p.BridgeThreadID, p.Revision, func(s *RelayScanner) {
			s.Offset, s.Line = p.Offset, p.Line
			if n := len(p.Skipped); n > 0 {
				s.SkippedRecords += int64(n)
				s.LastSkipped, s.SkippedAt = p.Skipped[n-1], e.RecordedAt
			}
		})
	case *events.InstallationRelayScannerDegraded:
		i.scanner(p.BridgeThreadID, p.Revision, func(s *RelayScanner) {
			s.DegradedReason, s.DegradedDetail, s.DegradedAt = p.Reason, p.Detail, e.RecordedAt
		})
	}
}

// scanner applies fn to a copy of the bridge's scanner (a new one when
// revision is 0; otherwise only if it is of that binding revision) and
// replaces the map, which snapshots share.
func (i *Installation) scanner(bridge string, revision uint64, fn func(*RelayScanner)) {
	cur, ok := i.RelayScanners[bridge]
	if revision != 0 && (!ok || cur.Revision != revision) {
		return
	}
	m := make(map[string]RelayScanner, len(i.RelayScanners)+1)
	for k, v := range i.RelayScanners {
		m[k] = v
	}
	fn(&cur)
	m[bridge] = cur
	i.RelayScanners = m
}

// Session is a CLI managed session: one Codex thread delivered into
// through the shared app-server (spec/codex-cli.md, "Managed sessions").
type Session struct {
	Header[fsm.SessionState]
	BoundThreadID string                `json:"bound_thread_id"`
	Mode          string                `json:"mode"`
	Profile       events.SessionProfile `json:"session_profile"`
	Epoch         uint64                `json:"session_epoch"`
	// AppServerInstance is the nonce of the app-server instance whose event
	// stream the current epoch numbers.
	AppServerInstance string `json:"app_server_instance"`
	EpochReason       string `json:"epoch_reason,omitempty"`
	// Startup is the cap: explicit dimensions from the profile, "auto"
	// ones from their first trusted reading (unknown until then).
	Startup events.Permissions `json:"startup"`
	// Current is the last reading, valid for CurrentEpoch only: an epoch
	// change makes it unknown again until the thread is read anew.
	Current          events.Permissions `json:"current"`
	CurrentEpoch     uint64             `json:"current_epoch,omitempty"`
	StartupSnapshot  events.RawJSON     `json:"startup_permission_snapshot_json,omitempty"`
	LastSnapshot     events.RawJSON     `json:"last_permission_snapshot_json,omitempty"`
	SnapshotRevision uint64             `json:"permission_snapshot_revision"`
	DriftDirection   string             `json:"drift_direction,omitempty"`
	DriftDimensions  []string           `json:"drift_dimensions,omitempty"`
	Replaces         string             `json:"replaces,omitempty"`
	ParkedBatchID    string             `json:"parked_batch_id,omitempty"`
	DetachReason     string             `json:"detach_reason,omitempty"`
	StaleReason      string             `json:"stale_reason,omitempty"`
	RetiredReason    string             `json:"retired_reason,omitempty"`
}

func (s *Session) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.SessionCreated:
		s.BoundThreadID, s.Mode, s.Profile, s.Epoch = p.BoundThreadID, p.Mode, p.Profile, 1
		s.AppServerInstance, s.Startup, s.Replaces = p.AppServerInstance, p.Startup, p.Replaces
	case *events.SessionDetached:
		s.DetachReason = p.Reason
	case *events.SessionAttached:
		s.DetachReason, s.StaleReason = "", ""
	case *events.SessionEpochAdvanced:
		s.Epoch, s.EpochReason, s.AppServerInstance = p.Epoch, p.Reason, p.AppServerInstance
		// The current reading proved the permissions of the old stream
		// only; the startup cap stays.
		s.Current = events.Permissions{}
	case *events.SessionPermissionObserved:
		if len(p.Pinned) > 0 && s.StartupSnapshot == nil {
			s.StartupSnapshot = p.Snapshot
		}
		cur := p.Current.Values()
		for _, d := range p.Pinned {
			for i, name := range events.DimensionNames {
				if name == d {
					s.Startup = s.Startup.Set(name, cur[i])
				}
			}
		}
		s.Current, s.CurrentEpoch, s.LastSnapshot, s.SnapshotRevision = p.Current, p.Epoch, p.Snapshot, p.Revision
		if !Drifted(s.Startup, p.Current) {
			s.DriftDirection, s.DriftDimensions = "", nil
		}
	case *events.SessionPermissionDrifted:
		s.DriftDirection, s.DriftDimensions = p.Direction, p.Dimensions
	case *events.SessionParked:
		s.ParkedBatchID = p.BatchID
	case *events.SessionUnparked:
		s.ParkedBatchID = ""
	case *events.SessionStale:
		s.StaleReason = p.Reason
	case *events.SessionRetired:
		s.RetiredReason = p.Reason
	}
}

// Drifted reports whether a reading differs from the startup cap in a
// dimension where both are known.
func Drifted(startup, current events.Permissions) bool {
	st, cur := startup.Values(), current.Values()
	for i := range st {
		if st[i].Known() && cur[i].Known() && st[i] != cur[i] {
			return true
		}
	}
	return false
}

// Effective is the per-dimension tighter of the startup cap and the
// current reading, three-valued: what an automatic turn may be given.
func (s *Session) Effective() events.Permissions { return s.Startup.And(s.Current) }

// CurrentProven reports whether the current reading was taken on the
// current epoch.
func (s *Session) CurrentProven() bool { return s.CurrentEpoch == s.Epoch && s.SnapshotRevision > 0 }

// Indexes implements Indexer: the thread's one non-retired session.
func (s *Session) Indexes() []IndexEntry {
	if s.State == fsm.SessionRetired {
		return nil
	}
	return []IndexEntry{{index.SessionByThread, s.BoundThreadID}}
}

// AppServer is one instance of the shared Codex app-server.
type AppServer struct {
	Header[fsm.AppServerState]
	events.AppServerStarted
	ExitReason string `json:"exit_reason,omitempty"`
	ExitStatus string `json:"exit_status,omitempty"`
}

func (a *AppServer) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.AppServerStarted:
		a.AppServerStarted = *p
	case *events.AppServerExited:
		a.ExitReason, a.ExitStatus = p.Reason, p.Status
	}
}

// Indexes implements Indexer: the running instance, at most one.
func (a *AppServer) Indexes() []IndexEntry {
	if a.State == fsm.AppServerRunning {
		return []IndexEntry{{index.AppServerRunning, ""}}
	}
	return nil
}

// CtxSession is a CortexFS session directory.
type CtxSession struct {
	Header[fsm.CtxSessionState]
	Object     string         `json:"object"`
	Scope      string         `json:"scope"`
	Name       string         `json:"name"`
	UID        int            `json:"uid"`
	Cwd        string         `json:"cwd"`
	Meta       events.RawJSON `json:"meta,omitempty"`
	Messages   int            `json:"messages"`
	Events     int            `json:"events"`
	LatestText string         `json:"latest_text,omitempty"`
	Root       string         `json:"root,omitempty"`
	// MessagesBytes and EventsBytes are the sizes messages.jsonl and
	// events.jsonl have when current: a start checks a directory by
	// stat instead of reading its history (adapters/daemon/cortexmod/session.go).
	MessagesBytes int64 `json:"messages_bytes"`
	EventsBytes   int64 `json:"events_bytes"`
}

func (c *CtxSession) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.CtxSessionOpened:
		c.Object, c.Scope, c.Name, c.UID, c.Cwd, c.Meta, c.Root = p.Object, p.Scope, p.Name, p.UID, p.Cwd, p.Meta, p.Root
	case *events.CtxSessionMessage:
		c.Messages++
		if l, err := p.Line(); err == nil {
			c.MessagesBytes += int64(len(l))
		}
		if p.Role == "assistant" && len(p.ToolCalls) == 0 {
			c.LatestText = textOf(p.Content)
		}
	case *events.CtxSessionEvent:
		c.Events++
		c.EventsBytes += int64(len(p.Line()))
	}
}

// Indexes implements Indexer.
func (c *CtxSession) Indexes() []IndexEntry {
	return []IndexEntry{{index.CtxSession, index.CtxSessionKey(c.Root, c.Object, c.Scope, c.UID, c.Name)}}
}

// Cursor is a target scope's durable fair-ready cursor: the position
// (first ready time, thread) of the last thread served.
type Cursor struct {
	Header[fsm.CursorState]
	ReadyAt  time.Time `json:"ready_at"`
	ThreadID string    `json:"source_thread_id"`
	Reason   string    `json:"reason"`
}

func (c *Cursor) mutate(e *events.Envelope, p events.Payload) {
	if p, ok := p.(*events.CursorAdvanced); ok {
		c.ReadyAt, c.ThreadID, c.Reason = p.ReadyAt, p.ThreadID, p.Reason
	}
}

// Entry is one keyed registration of a tree.
type Entry struct {
	Key   string         `json:"key"`
	Value events.RawJSON `json:"value"`
}

// CtxTree is a CortexFS object tree's registrations, sorted by key.
type CtxTree struct {
	Header[fsm.CtxTreeState]
	Runner  string  `json:"runner"`
	Objects []Entry `json:"objects"`
	Aliases []Entry `json:"aliases"`
}

func (t *CtxTree) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.CtxTreeInitialized:
		t.Runner = p.Runner
	case *events.CtxTreeObjectPut:
		t.Objects = putEntry(t.Objects, Entry{p.Rel, p.Object})
	case *events.CtxTreeObjectRemoved:
		t.Objects = dropEntry(t.Objects, p.Rel)
	case *events.CtxTreeAliasPut:
		t.Aliases = putEntry(t.Aliases, Entry{p.Path, p.Alias})
	case *events.CtxTreeAliasRemoved:
		t.Aliases = dropEntry(t.Aliases, p.Path)
	}
}

func putEntry(list []Entry, e Entry) []Entry {
	out := dropEntry(list, e.Key)
	i := sort.Search(len(out), func(i int) bool { return out[i].Key >= e.Key })
	out = append(out, Entry{})
	copy(out[i+1:], out[i:])
	out[i] = e
	return out
}

func dropEntry(list []Entry, key string) []Entry {
	out := make([]Entry, 0, len(list))
	for _, x := range list {
		if x.Key != key {
			out = append(out, x)
		}
	}
	return out
}
