package events

import (
	"fmt"
	"time"
)

// declarations lists every event kind with its aggregate and schema. Adding
// an event kind means adding a type below and a line here.
func declarations() []declaration {
	return []declaration{
		decl[JobSubmitted](KindJob),
		decl[JobCompleted](KindJob),
		decl[JobFailed](KindJob),
		decl[JobCancelled](KindJob),
		decl[JobCarried](KindJob),

		decl[BatchOpened](KindBatch),
		decl[BatchJobsAdded](KindBatch),
		decl[BatchMaterialized](KindBatch),
		decl[BatchDeliveryAccepted](KindBatch),
		decl[BatchReplayPolicyChanged](KindBatch),
		decl[BatchEligibleAfterSet](KindBatch),
		decl[BatchClosed](KindBatch),
		decl[BatchSuperseded](KindBatch),
		decl[BatchHandoffRecorded](KindBatch),
		decl[BatchRecoveryPinned](KindBatch),
		decl[BatchPromoted](KindBatch),
		decl[BatchParkNotified](KindBatch),
		decl[BatchRecoveryCollected](KindBatch),

		decl[AttemptPrepared](KindAttempt),
		decl[AttemptArmPendingNoted](KindAttempt),
		decl[AttemptArmed](KindAttempt),
		decl[AttemptAcceptPending](KindAttempt),
		decl[AttemptAccepted](KindAttempt),
		decl[AttemptRejectedBeforeAccept](KindAttempt),
		decl[AttemptTurnObserved](KindAttempt),
		decl[AttemptAbandoned](KindAttempt),
		decl[AttemptSuperseded](KindAttempt),
		decl[AttemptClosed](KindAttempt),
		decl[AttemptRelayMarkerIssued](KindAttempt),
		decl[AttemptRelayConsumed](KindAttempt),

		decl[ArtifactIngested](KindArtifact),
		decl[ArtifactReferenced](KindArtifact),
		decl[ArtifactReleased](KindArtifact),
		decl[ArtifactPinned](KindArtifact),
		decl[ArtifactCollected](KindArtifact),
		decl[ArtifactRecoveryLeaseIssued](KindArtifact),
		decl[ArtifactRecoveryLeaseRevoked](KindArtifact),

		decl[BindingBound](KindBinding),
		decl[BindingArmed](KindBinding),
		decl[BindingQuiesced](KindBinding),
		decl[BindingDegraded](KindBinding),
		decl[BindingUnbound](KindBinding),
		decl[BindingRelayMarkerIssued](KindBinding),
		decl[BindingRelayConsumed](KindBinding),

		decl[InstallationStateRepaired](KindInstallation),
		decl[InstallationBridgeSelected](KindInstallation),
		decl[InstallationRelayScannerBound](KindInstallation),
		decl[InstallationRelayScannerAdvanced](KindInstallation),
		decl[InstallationRelayScannerDegraded](KindInstallation),
		decl[InstallationSnapshotRevisionsReserved](KindInstallation),

		decl[SessionCreated](KindSession),
		decl[SessionDetached](KindSession),
		decl[SessionAttached](KindSession),
		decl[SessionEpochAdvanced](KindSession),
		decl[SessionPermissionObserved](KindSession),
		decl[SessionPermissionDrifted](KindSession),
		decl[SessionParked](KindSession),
		decl[SessionUnparked](KindSession),
		decl[SessionStale](KindSession),
		decl[SessionRetired](KindSession),

		decl[AppServerStarted](KindAppServer),
		decl[AppServerExited](KindAppServer),

		decl[CtxSessionOpened](KindCtxSession),
		decl[CtxSessionMessage](KindCtxSession),
		decl[CtxSessionEvent](KindCtxSession),
		decl[CtxSessionStateChanged](KindCtxSession),

		decl[CursorAdvanced](KindCursor),

		decl[CtxTreeInitialized](KindCtxTree),
		decl[CtxTreeObjectPut](KindCtxTree),
		decl[CtxTreeObjectRemoved](KindCtxTree),
		decl[CtxTreeAliasPut](KindCtxTree),
		decl[CtxTreeAliasRemoved](KindCtxTree),

		decl[TaskSubmitted](KindTask),
		decl[TaskStarted](KindTask),
		decl[TaskStopping](KindTask),
		decl[TaskExited](KindTask),
		decl[TaskLost](KindTask),

		decl[GatewayRouteAdded](KindGatewayRoute),
		decl[GatewayRouteRemoved](KindGatewayRoute),
		decl[GatewayEnvelopeRecorded](KindGatewayStream),
		decl[GatewayGapReported](KindGatewayStream),
		decl[GatewayModeChanged](KindGatewayStream),

		decl[MCPToolCalled](KindMCP),
		decl[InstallationMCPValidationRequested](KindInstallation),
		decl[InstallationMCPWritebackValidated](KindInstallation),
	}
}

// DeliveryPolicy is the normalized delivery policy of a job or batch.
type DeliveryPolicy struct {
	ReadOnly            bool `json:"read_only"`
	RequiresApproval    bool `json:"requires_approval"`
	RequiresNetwork     bool `json:"requires_network"`
	RequiresWriteAccess bool `json:"requires_write_access"`
}

// FailClosedPolicy is what a job gets for every field its submitter left out.
var FailClosedPolicy = DeliveryPolicy{ReadOnly: false, RequiresApproval: true, RequiresNetwork: true, RequiresWriteAccess: true}

// Stricter returns the most restrictive combination of two policies.
func (p DeliveryPolicy) Stricter(q DeliveryPolicy) DeliveryPolicy {
	return DeliveryPolicy{
		ReadOnly:            p.ReadOnly && q.ReadOnly,
		RequiresApproval:    p.RequiresApproval || q.RequiresApproval,
		RequiresNetwork:     p.RequiresNetwork || q.RequiresNetwork,
		RequiresWriteAccess: p.RequiresWriteAccess || q.RequiresWriteAccess,
	}
}

// ---- job ----

// JobSubmitted opens a job in state running.
type JobSubmitted struct {
	TargetKind     string         `json:"target_kind"`
	SourceThreadID string         `json:"source_thread_id"`
	TaskKind       string         `json:"task_kind"`
	TaskSummary    string         `json:"task_summary"`
	Metadata       RawJSON        `json:"metadata,omitempty"`
	DedupeKey      string         `json:"dedupe_key,omitempty"`
	DeliveryPolicy DeliveryPolicy `json:"delivery_policy"`
	// TimeoutAt is when the job fails unless reported first (job_timeout
	// after submission); zero for none.
	TimeoutAt time.Time `json:"timeout_at,omitzero"`
	// DeliveryTarget is the resolved host-plugin target of a
	// codex_app_server job (nil for every other target kind).
	DeliveryTarget *DeliveryTarget `json:"delivery_target,omitempty"`
}

// DeliveryTarget is the resolved codex_app_server target of a host-plugin
// delivery (spec/plugin-target.md): which daemon-owned app-server lease
// carries it, the managed session and epoch its accepted turn is
// reported on, and the codex executable the app-server runs. It is
// persisted with the job and its batch so a restarted daemon (or a
// restarted plugin) can find the same target again.
type DeliveryTarget struct {
	// Ownership is "delivery_owned" (the daemon derived the lease from
	// the plugin identity, the thread and the idempotency key) or
	// "explicit_lease" (the plugin ensured the lease itself).
	Ownership        string `json:"ownership"`
	PluginID         string `json:"plugin_id"`
	AppServerLeaseID string `json:"app_server_lease_id"`
	ManagedSessionID string `json:"managed_session_id"`
	BoundThreadID    string `json:"bound_thread_id"`
	SessionEpoch     uint64 `json:"session_epoch"`
	CodexBinary      string `json:"codex_binary"`
}

// JobCompleted moves a running job to ready; its result is an artifact.
type JobCompleted struct {
	ResultSummary string `json:"result_summary"`
	ArtifactID    string `json:"artifact_id,omitempty"`
	ResultBytes   int64  `json:"result_bytes"`
	BatchID       string `json:"batch_id,omitempty"` // the batch the ready job joined
}

// JobFailed records that the job's runner reported failure.
type JobFailed struct {
	Reason string `json:"reason"`
}

// JobCarried moves a ready job's result from a superseded batch into the
// batch that superseded it.
type JobCarried struct {
	FromBatchID string `json:"from_batch_id"`
	BatchID     string `json:"batch_id"`
}

// JobCancelled records an explicit cancel by the submitter or user.
type JobCancelled struct {
	Reason string `json:"reason,omitempty"`
}

// ---- delivery batch ----

// BatchOpened opens a delivery batch at the tail of a thread's FIFO.
type BatchOpened struct {
	SourceThreadID         string         `json:"source_thread_id"`
	TargetKind             string         `json:"target_kind"`
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

// BatchPromoted makes a queued batch its thread's head once the batch in
// front of it closed.
type BatchPromoted struct {
	NextDeliveryNotBefore time.Time `json:"next_delivery_not_before,omitzero"`
}

// BatchParkNotified records one run of the operator's park hook.
type BatchParkNotified struct {
	Attempt     int       `json:"attempt"`
	OK          bool      `json:"ok"`
	ExitCode    int       `json:"exit_code"`
	Error       string    `json:"error,omitempty"`
	NextRetryAt time.Time `json:"next_retry_at,omitzero"`
}

// BatchJobsAdded merges further adjacent ready jobs into a queued batch.
type BatchJobsAdded struct {
	JobIDs               []string       `json:"job_ids"`
	ArtifactIDs          []string       `json:"artifact_ids,omitempty"`
	Summary              string         `json:"summary"`
	LastReadyAt          time.Time      `json:"last_ready_at"`
	Policy               DeliveryPolicy `json:"delivery_policy"`
	InlinePayloadBytes   int64          `json:"inline_payload_bytes"`
	RequiresArtifactRead bool           `json:"requires_artifact_read"`
}

// BatchMaterialized binds a new attempt and snapshot to the batch.
type BatchMaterialized struct {
	AttemptID        string `json:"attempt_id"`
	Generation       uint64 `json:"generation"`
	SnapshotRevision uint64 `json:"snapshot_revision"`
	DeliveryMode     string `json:"delivery_mode,omitempty"`
}

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

// BatchReplayPolicyChanged parks a batch for manual resolution (or, in
// principle, back to automatic).
type BatchReplayPolicyChanged struct {
	ReplayPolicy string `json:"replay_policy"`
	Reason       string `json:"reason"`
	AttemptID    string `json:"attempt_id,omitempty"`
}

// BatchEligibleAfterSet takes a candidate out of the immediate-eligible set
// until the given time after a failure before acceptance.
type BatchEligibleAfterSet struct {
	EligibleAfter time.Time `json:"eligible_after"`
	Reason        string    `json:"reason"`
}

// BatchSuperseded closes a head batch whose result a newer batch of the
// thread replaced (close_reason superseded): its jobs and artifacts are
// carried into SupersededBy, the next batch of its thread, in the same
// append.
type BatchSuperseded struct {
	Reason       string   `json:"reason"`
	SupersededBy string   `json:"superseded_by"`
	JobIDs       []string `json:"job_ids"`
}

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

// BatchRecoveryPinned sets an operator pin on a batch's recovery envelope.
type BatchRecoveryPinned struct {
	PinUntil       time.Time `json:"pin_until"`
	RetentionUntil time.Time `json:"retention_until"`
}

// BatchRecoveryCollected drops a closed batch's boundary recovery
// envelope once its retention ended (the batch.recovery_gc sweep). The
// log keeps the event that recorded it; the projection no longer holds it.
type BatchRecoveryCollected struct {
	RetentionUntil time.Time `json:"retention_until"`
}

// ---- delivery attempt ----

// AttemptPrepared creates a new attempt in state prepared.
type AttemptPrepared struct {
	SourceThreadID   string    `json:"source_thread_id"`
	BatchID          string    `json:"batch_id"`
	Generation       uint64    `json:"generation"`
	SnapshotRevision uint64    `json:"snapshot_revision"`
	SnapshotPath     string    `json:"snapshot_path,omitempty"`
	DeliveryDeadline time.Time `json:"delivery_deadline,omitzero"`
	BindingID        string    `json:"binding_id,omitempty"`
}

// AttemptArmPendingNoted is the Desktop bridge's durable barrier before it
// arms the caller heartbeat.
type AttemptArmPendingNoted struct {
	BridgeRequestID    string    `json:"bridge_request_id"`
	LeaseID            string    `json:"bridge_arm_lease_id"`
	LeaseDeadline      time.Time `json:"bridge_arm_lease_deadline"`
	ArmPendingDeadline time.Time `json:"arm_pending_deadline"`
}

// AttemptArmed records a Desktop arm accepted by the channel.
type AttemptArmed struct {
	CooldownUntil  time.Time `json:"cooldown_until"`
	PauseNotBefore time.Time `json:"pause_not_before"`
	PauseDeadline  time.Time `json:"pause_deadline"`
	AutomationID   string    `json:"automation_id,omitempty"`
}

// AttemptAcceptPending is the CLI adapter's durable barrier before a
// side-effectful turn/start or turn/steer.
type AttemptAcceptPending struct {
	RPCRequestID      string `json:"delivery_rpc_request_id"`
	RPCKind           string `json:"delivery_rpc_kind"`
	CorrelationMarker string `json:"delivery_rpc_correlation_marker"`
	ManagedSessionID  string `json:"managed_session_id,omitempty"`
	SessionEpoch      uint64 `json:"session_epoch,omitempty"`
}

// AttemptAccepted records that the app-server accepted the turn.
type AttemptAccepted struct {
	TurnID              string    `json:"delivery_turn_id"`
	ObservationDeadline time.Time `json:"delivery_observation_deadline"`
	CooldownUntil       time.Time `json:"cooldown_until"`
}

// AttemptRejectedBeforeAccept records a proven benign reject; the attempt
// returns to prepared without consuming the attempt budget.
type AttemptRejectedBeforeAccept struct {
	Reason string `json:"reason"`
}

// AttemptTurnObserved records an event seen on the accepted turn.
type AttemptTurnObserved struct {
	TurnID string `json:"delivery_turn_id"`
	Event  string `json:"event"`
}

// AttemptAbandoned records a failed attempt.
type AttemptAbandoned struct {
	Reason           string `json:"reason"`
	ObservationState string `json:"delivery_observation_state,omitempty"`
	RPCState         string `json:"delivery_rpc_state,omitempty"`
}

// AttemptSuperseded invalidates an attempt in favour of a newer generation.
type AttemptSuperseded struct {
	ByAttemptID string `json:"by_attempt_id,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

// AttemptClosed ends an attempt whose batch closed.
type AttemptClosed struct {
	Reason string `json:"reason"`
}

// AttemptRelayMarkerIssued records a transcript-relay marker issued for
// the attempt (spec/desktop.md, "The transcript relay"): the envelope kind
// it stands for and the bridge request it is bound to.
type AttemptRelayMarkerIssued struct {
	Marker          string    `json:"marker"`
	Kind            string    `json:"kind"`
	BridgeThreadID  string    `json:"bridge_thread_id"`
	BridgeRequestID string    `json:"bridge_request_id"`
	ExpiresAt       time.Time `json:"expires_at"`
}

// AttemptRelayConsumed records that a relay envelope carrying the marker
// was consumed: the CAS it stood for is in the same append. The envelope
// hash is the replay fence: the same envelope seen again changes nothing.
type AttemptRelayConsumed struct {
	Marker         string `json:"marker"`
	Kind           string `json:"kind"`
	EnvelopeSHA256 string `json:"envelope_sha256"`
	RolloutPath    string `json:"rollout_path,omitempty"`
	Line           int64  `json:"line,omitempty"`
}

// ---- artifact ----

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

// ArtifactReferenced records that an open batch now references the artifact.
type ArtifactReferenced struct {
	BatchID string `json:"batch_id"`
}

// ArtifactReleased records that a referencing batch reached a terminal state.
type ArtifactReleased struct {
	BatchID           string    `json:"batch_id"`
	LastBatchClosedAt time.Time `json:"last_batch_closed_at"`
	GCEligibleAt      time.Time `json:"gc_eligible_at"`
}

// ArtifactPinned sets an operator pin that keeps the artifact from GC.
type ArtifactPinned struct {
	PinUntil     time.Time `json:"operator_pin_until"`
	GCEligibleAt time.Time `json:"gc_eligible_at"`
}

// ArtifactCollected records the GC of an artifact's files.
type ArtifactCollected struct {
	Reason string `json:"reason"`
}

// ArtifactRecoveryLeaseIssued issues (or rotates: the previous lease
// ends) the artifact's short-lived operator recovery read lease.
type ArtifactRecoveryLeaseIssued struct {
	LeaseID  string    `json:"artifact_recovery_lease_id"`
	Deadline time.Time `json:"artifact_recovery_lease_deadline"`
	BatchID  string    `json:"batch_id"`
}

// ArtifactRecoveryLeaseRevoked ends the artifact's recovery lease.
type ArtifactRecoveryLeaseRevoked struct {
	LeaseID string `json:"artifact_recovery_lease_id"`
}

// ---- Desktop binding and installation state ----

// Capabilities mirrors the installation-wide capability conclusions.
type Capabilities struct {
	ReadTransport           string `json:"read_transport"`
	ReadTransportGeneration uint64 `json:"read_transport_generation"`
	ReadTransportCapability string `json:"read_transport_capability"`
	ArtifactReadCapability  string `json:"artifact_read_capability"`
	WritebackCapability     string `json:"writeback_capability"`
	ValidationFingerprint   string `json:"validation_fingerprint"`
}

// BindingBound binds a Desktop source thread to a caller automation (first
// bootstrap or operator repair). BridgeThreadID, when set, pins the
// binding to that bridge thread; empty, it follows the installation's.
// When the repair replaced the automation, ReplacedAutomation names the
// old one's fate: OldQuiesced says whether it was proven quiesced.
type BindingBound struct {
	SourceThreadID       string       `json:"source_thread_id"`
	CallerAutomationID   string       `json:"caller_automation_id"`
	BridgeThreadID       string       `json:"bridge_thread_id,omitempty"`
	Mirror               Capabilities `json:"mirror"`
	ReplacedAutomation   bool         `json:"replaced_automation,omitempty"`
	PreviousAutomationID string       `json:"previous_automation_id,omitempty"`
	OldQuiesced          bool         `json:"old_automation_quiesced,omitempty"`
}

// InstallationRelayScannerBound binds the transcript-relay scanner of a
// bridge thread to one rollout file (or rebinds it to a new one when the
// bridge thread is replaced). Revision counts the bindings of that bridge.
type InstallationRelayScannerBound struct {
	BridgeThreadID string `json:"bridge_thread_id"`
	RolloutPath    string `json:"rollout_path"`
	Device         uint64 `json:"device"`
	Inode          uint64 `json:"inode"`
	Revision       uint64 `json:"binding_revision"`
	// StartOffset and StartLine are where reading starts: 0 for a new
	// file; where the scanner was, for the same file rebound after it
	// skipped records (the operator has seen the skip).
	StartOffset int64 `json:"start_offset,omitempty"`
	StartLine   int64 `json:"start_line,omitempty"`
}

// InstallationRelayScannerAdvanced records how far the relay scanner of
// a bridge thread has read its bound rollout (binding revision Revision):
// a restarted daemon resumes there instead of reading the file again.
type InstallationRelayScannerAdvanced struct {
	BridgeThreadID string `json:"bridge_thread_id"`
	Revision       uint64 `json:"binding_revision"`
	Offset         int64  `json:"offset"`
	Line           int64  `json:"line"`
	// Skipped are the records read through since the last position
	// without being parsed (longer than the relay reads whole).
	Skipped []RelaySkippedRecord `json:"skipped,omitempty"`
}

// RelaySkippedRecord is a rollout record the relay scanner read through
// without parsing it: an envelope in it was not seen.
type RelaySkippedRecord struct {
	Line  int64 `json:"line"`
	Bytes int64 `json:"bytes"`
}

// Reasons a relay scanner binding degrades (InstallationRelayScannerDegraded).
const (
	RelayScannerNotRegular = "rollout_not_regular" // the path no longer names a regular file
	RelayScannerReplaced   = "rollout_replaced"    // the path names another file (device or inode)
	RelayScannerTruncated  = "rollout_truncated"   // the file is shorter than what was read
	RelayScannerUnreadable = "rollout_unreadable"  // the file cannot be opened or read
	RelayScannerNotPrivate = "rollout_not_private" // another user could write the file (its owner or mode changed)
	// RelayScannerRecordTooLong is the state of a scanner that skipped
	// records too long to read whole: it reads on, but shows degraded
	// until it is rebound.
	RelayScannerRecordTooLong = "rollout_record_too_long"
)

// InstallationSnapshotRevisionsReserved reserves the Desktop snapshot
// revisions up to Through for the publisher: the inbox is a projection
// that can be deleted, and its revisions are never used twice, so the
// log keeps how far they may have gone.
type InstallationSnapshotRevisionsReserved struct {
	Through uint64 `json:"through"`
}

// InstallationRelayScannerDegraded records that the relay scanner of a
// bridge thread stopped reading its bound rollout (binding revision
// Revision) until it is rebound: Reason is a stable code.
type InstallationRelayScannerDegraded struct {
	BridgeThreadID string `json:"bridge_thread_id"`
	Revision       uint64 `json:"binding_revision"`
	Reason         string `json:"reason"`
	Detail         string `json:"detail,omitempty"`
}

// BindingArmed advances armed_generation after a durable note-arm.
type BindingArmed struct {
	Generation     uint64    `json:"armed_generation"`
	PauseNotBefore time.Time `json:"pause_not_before"`
	PauseDeadline  time.Time `json:"pause_deadline"`
}

// BindingQuiesced records that the armed generation's heartbeat was paused.
type BindingQuiesced struct {
	Generation uint64 `json:"armed_generation"`
}

// BindingDegraded takes a thread out of automatic continuation.
type BindingDegraded struct {
	Reason string `json:"reason"`
}

// BindingUnbound removes the binding.
type BindingUnbound struct {
	DeleteAutomation bool `json:"delete_automation"`
}

// BindingRelayMarkerIssued records a transcript-relay marker of the
// "paused" kind (spec/desktop.md, "The transcript relay"): the bridge's
// pause proof for one generation of the binding's caller heartbeat, under
// one bridge request. AttemptID is the arm_pending attempt the proof
// abandons, empty for a pause of the armed generation.
type BindingRelayMarkerIssued struct {
	Marker          string    `json:"marker"`
	Kind            string    `json:"kind"`
	Generation      uint64    `json:"generation"`
	AttemptID       string    `json:"attempt_id"`
	BridgeThreadID  string    `json:"bridge_thread_id"`
	BridgeRequestID string    `json:"bridge_request_id"`
	ExpiresAt       time.Time `json:"expires_at"`
}

// BindingRelayConsumed records that a pause envelope carrying the marker
// was consumed; the note-paused it stands for is in the same append.
type BindingRelayConsumed struct {
	Marker         string `json:"marker"`
	Kind           string `json:"kind"`
	EnvelopeSHA256 string `json:"envelope_sha256"`
	RolloutPath    string `json:"rollout_path,omitempty"`
	Line           int64  `json:"line,omitempty"`
}

// InstallationStateRepaired is the only writer of installation-wide
// capability conclusions.
type InstallationStateRepaired struct {
	State       Capabilities `json:"state"`
	ValidatedAt time.Time    `json:"validated_at,omitzero"`
	UpdatedBy   string       `json:"updated_by_bootstrap_or_repair"`
}

// InstallationBridgeSelected records the bridge thread the Desktop
// snapshots are published for (bridge-preflight through the daemon). It
// changes no capability, generation, fingerprint or validated_at.
type InstallationBridgeSelected struct {
	BridgeThreadID string `json:"bridge_thread_id"`
	Previous       string `json:"previous_bridge_thread_id,omitempty"`
}

// ---- CLI managed session ----

// Allow is one permission dimension of a managed session: allowed,
// denied, or unknown (the zero value). It is JSON true, false or null.
// Unknown counts as allowed wherever a permission gates delivery: a
// session is strict-safe only where every dimension is proven false.
type Allow uint8

// The values of Allow.
const (
	AllowUnknown Allow = iota
	AllowFalse
	AllowTrue
)

// AllowOf is the Allow of a known boolean.
func AllowOf(b bool) Allow {
	if b {
		return AllowTrue
	}
	return AllowFalse
}

// Known reports whether a is true or false.
func (a Allow) Known() bool { return a == AllowTrue || a == AllowFalse }

// And is Kleene's three-valued and: false if either is false, true if
// both are true, unknown otherwise. The effective permission of a session
// is its startup cap and its current snapshot, so a tighter side wins.
func (a Allow) And(b Allow) Allow {
	switch {
	case a == AllowFalse || b == AllowFalse:
		return AllowFalse
	case a == AllowTrue && b == AllowTrue:
		return AllowTrue
	}
	return AllowUnknown
}

func (a Allow) String() string {
	switch a {
	case AllowTrue:
		return "true"
	case AllowFalse:
		return "false"
	}
	return "unknown"
}

// MarshalJSON renders true, false or null.
func (a Allow) MarshalJSON() ([]byte, error) {
	switch a {
	case AllowTrue:
		return []byte("true"), nil
	case AllowFalse:
		return []byte("false"), nil
	}
	return []byte("null"), nil
}

// UnmarshalJSON reads true, false or null.
func (a *Allow) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true":
		*a = AllowTrue
	case "false":
		*a = AllowFalse
	case "null":
		*a = AllowUnknown
	default:
		return fmt.Errorf("permission %s is not true, false or null", b)
	}
	return nil
}

// Permissions is one reading of a managed session's risk profile: whether
// a turn may ask for approval, reach the network, write files.
type Permissions struct {
	AllowsApproval    Allow `json:"allows_approval"`
	AllowsNetwork     Allow `json:"allows_network"`
	AllowsWriteAccess Allow `json:"allows_write_access"`
}

// And is the per-dimension three-valued and.
func (p Permissions) And(q Permissions) Permissions {
	return Permissions{p.AllowsApproval.And(q.AllowsApproval), p.AllowsNetwork.And(q.AllowsNetwork), p.AllowsWriteAccess.And(q.AllowsWriteAccess)}
}

// DimensionNames are the seed's names of the three dimensions, in the
// order of Values.
var DimensionNames = [3]string{"approval", "network", "write_access"}

// Values lists the three dimensions in DimensionNames order.
func (p Permissions) Values() [3]Allow {
	return [3]Allow{p.AllowsApproval, p.AllowsNetwork, p.AllowsWriteAccess}
}

// Set returns p with the dimension named name set to v.
func (p Permissions) Set(name string, v Allow) Permissions {
	switch name {
	case "approval":
		p.AllowsApproval = v
	case "network":
		p.AllowsNetwork = v
	case "write_access":
		p.AllowsWriteAccess = v
	}
	return p
}

// SessionProfile is the bootstrap profile `cbth cli run` was given, per
// dimension "auto" (from the thread's own settings), "true" or "false".
type SessionProfile struct {
	Approval    string `json:"approval"`
	Network     string `json:"network"`
	WriteAccess string `json:"write_access"`
}

// SessionCreated opens a managed CLI session in state live at epoch 1,
// bound to one Codex thread and to the app-server instance whose event
// stream epoch 1 is. Startup holds the explicit dimensions of Profile
// (the others unknown until the first trusted snapshot pins them).
type SessionCreated struct {
	BoundThreadID     string         `json:"bound_thread_id"`
	Mode              string         `json:"mode"` // bind_thread or new_thread
	Profile           SessionProfile `json:"session_profile"`
	Startup           Permissions    `json:"startup"`
	AppServerInstance string         `json:"app_server_instance"`
	// Replaces names the retired session this one replaces, if any.
	Replaces string `json:"replaces,omitempty"`
}

// SessionDetached records the foreground client leaving.
type SessionDetached struct {
	Reason string `json:"reason"`
}

// SessionAttached records a foreground client reattaching.
type SessionAttached struct{}

// SessionEpochAdvanced records lost event-stream continuity: the session's
// epoch now numbers the stream of another app-server instance.
type SessionEpochAdvanced struct {
	Epoch             uint64 `json:"session_epoch"`
	Reason            string `json:"reason"`
	AppServerInstance string `json:"app_server_instance"`
}

// SessionPermissionObserved records a permission snapshot read from the
// thread (thread/resume) on the session's current epoch. Pinned lists the
// dimensions this snapshot set the startup cap of: the first trusted
// reading of each "auto" dimension.
type SessionPermissionObserved struct {
	Current  Permissions `json:"current"`
	Snapshot RawJSON     `json:"last_permission_snapshot_json"`
	Revision uint64      `json:"permission_snapshot_revision"`
	Epoch    uint64      `json:"session_epoch"`
	Pinned   []string    `json:"pinned,omitempty"`
}

// SessionPermissionDrifted is the audit record of a snapshot whose
// permissions differ from the startup cap: "tightened" (current is
// stricter), "widened" (current is looser; the cap still holds) or
// "mixed", per the changed dimensions.
type SessionPermissionDrifted struct {
	Startup    Permissions `json:"startup"`
	Current    Permissions `json:"current"`
	Effective  Permissions `json:"effective"`
	Direction  string      `json:"direction"`
	Dimensions []string    `json:"dimensions"`
	Revision   uint64      `json:"permission_snapshot_revision"`
}

// SessionParked parks a session while a manual batch is unresolved.
type SessionParked struct {
	BatchID string `json:"batch_id"`
}

// SessionUnparked returns a parked session to detached once resolved.
type SessionUnparked struct{}

// SessionStale records that the session can no longer be proven live.
type SessionStale struct {
	Reason string `json:"reason"`
}

// SessionRetired ends a managed session for good.
type SessionRetired struct {
	Reason string `json:"reason"`
}

// ---- the shared Codex app-server ----

// AppServerStarted records one instance of the daemon-owned shared
// app-server, once it answered initialize, with what the capability probe
// proved of it. The stream id is the instance's nonce.
type AppServerStarted struct {
	PID          int       `json:"pid"`
	StartedAt    time.Time `json:"started_at"`
	Nonce        string    `json:"nonce"`
	Socket       string    `json:"socket"`
	CodexBinary  string    `json:"codex_binary"`
	CodexHome    string    `json:"codex_home"`
	UserAgent    string    `json:"user_agent"`
	ProbePassed  bool      `json:"probe_passed"`
	ProbeCode    string    `json:"probe_code,omitempty"`
	ProbeMissing []string  `json:"probe_missing,omitempty"`
	Probe        RawJSON   `json:"probe,omitempty"`
}

// AppServerExited records the end of an instance: it exited ("exited",
// with its exit status), the daemon stopped it ("stopped"), or a daemon
// starting found it recorded running by a daemon that is gone
// ("daemon_restarted").
type AppServerExited struct {
	Reason string `json:"reason"`
	Status string `json:"exit_status,omitempty"`
}

// ---- ctx session (session directories) ----

// CtxSessionOpened creates a session directory.
// The stream id is the session directory's absolute path.
type CtxSessionOpened struct {
	Object string  `json:"object"` // e.g. "agent/coder" or "model/openai/gpt-4o"
	Scope  string  `json:"scope"`
	Name   string  `json:"name"`
	UID    int     `json:"uid"`
	Cwd    string  `json:"cwd"`
	Meta   RawJSON `json:"meta,omitempty"`
	// Root is the CortexFS tree the session belongs to.
	Root string `json:"root,omitempty"`
}

// CtxSessionMessage appends one conversation message.
type CtxSessionMessage struct {
	Role    string  `json:"role"`
	Content RawJSON `json:"content"`
	Run     string  `json:"run,omitempty"`
	// ID is the client's message id (a user turn); CallID and Name a
	// tool result's call; ToolCalls the calls an assistant message asked
	// for.
	ID        string  `json:"id,omitempty"`
	CallID    string  `json:"call_id,omitempty"`
	Name      string  `json:"name,omitempty"`
	ToolCalls RawJSON `json:"tool_calls,omitempty"`
}

// CtxSessionEvent appends a tool call, error or other non-message event.
type CtxSessionEvent struct {
	Event RawJSON `json:"event"`
}

// CtxSessionStateChanged moves the session between active, idle, done and
// error.
type CtxSessionStateChanged struct {
	State string `json:"state"`
}

// ---- fair-ready cursor ----

// CursorAdvanced moves a target scope's fair-ready cursor past a thread.
type CursorAdvanced struct {
	ReadyAt  time.Time `json:"ready_at"`
	ThreadID string    `json:"source_thread_id"`
	Reason   string    `json:"reason"`
}

// ---- CortexFS object tree ----

// CtxTreeInitialized creates a tree (or changes the runner its objects'
// shebangs name).
type CtxTreeInitialized struct {
	Runner string `json:"runner"`
}

// CtxTreeObjectPut registers or replaces an object. Object is the
// adapter's object record, kept opaque here.
type CtxTreeObjectPut struct {
	Rel    string  `json:"rel"`
	Object RawJSON `json:"object"`
}

// CtxTreeObjectRemoved removes an object.
type CtxTreeObjectRemoved struct {
	Rel string `json:"rel"`
}

// CtxTreeAliasPut points an alias symlink at an object.
type CtxTreeAliasPut struct {
	Path  string  `json:"path"`
	Alias RawJSON `json:"alias"`
}

// CtxTreeAliasRemoved removes an alias.
type CtxTreeAliasRemoved struct {
	Path string `json:"path"`
}

// EventType implementations.

func (JobSubmitted) EventType() string                { return "job.submitted" }
func (JobCompleted) EventType() string                { return "job.completed" }
func (JobFailed) EventType() string                   { return "job.failed" }
func (JobCancelled) EventType() string                { return "job.cancelled" }
func (JobCarried) EventType() string                  { return "job.carried" }
func (BatchSuperseded) EventType() string             { return "batch.superseded" }
func (BatchOpened) EventType() string                 { return "batch.opened" }
func (BatchJobsAdded) EventType() string              { return "batch.jobs_added" }
func (BatchMaterialized) EventType() string           { return "batch.materialized" }
func (BatchDeliveryAccepted) EventType() string       { return "batch.delivery_accepted" }
func (BatchReplayPolicyChanged) EventType() string    { return "batch.replay_policy_changed" }
func (BatchEligibleAfterSet) EventType() string       { return "batch.eligible_after_set" }
func (BatchClosed) EventType() string                 { return "batch.closed" }
func (BatchHandoffRecorded) EventType() string        { return "batch.handoff_recorded" }
func (BatchRecoveryPinned) EventType() string         { return "batch.recovery_pinned" }
func (BatchRecoveryCollected) EventType() string      { return "batch.recovery_collected" }
func (AttemptRelayMarkerIssued) EventType() string    { return "attempt.relay_marker_issued" }
func (AttemptRelayConsumed) EventType() string        { return "attempt.relay_consumed" }
func (ArtifactRecoveryLeaseIssued) EventType() string { return "artifact.recovery_lease_issued" }
func (ArtifactRecoveryLeaseRevoked) EventType() string {
	return "artifact.recovery_lease_revoked"
}
func (InstallationRelayScannerBound) EventType() string {
	return "installation.relay_scanner_bound"
}
func (InstallationRelayScannerAdvanced) EventType() string {
	return "installation.relay_scanner_advanced"
}
func (InstallationRelayScannerDegraded) EventType() string {
	return "installation.relay_scanner_degraded"
}
func (AttemptPrepared) EventType() string             { return "attempt.prepared" }
func (AttemptArmPendingNoted) EventType() string      { return "attempt.arm_pending_noted" }
func (AttemptArmed) EventType() string                { return "attempt.armed" }
func (AttemptAcceptPending) EventType() string        { return "attempt.accept_pending" }
func (AttemptAccepted) EventType() string             { return "attempt.accepted" }
func (AttemptRejectedBeforeAccept) EventType() string { return "attempt.rejected_before_accept" }
func (AttemptTurnObserved) EventType() string         { return "attempt.turn_observed" }
func (AttemptAbandoned) EventType() string            { return "attempt.abandoned" }
func (AttemptSuperseded) EventType() string           { return "attempt.superseded" }
func (AttemptClosed) EventType() string               { return "attempt.closed" }
func (ArtifactIngested) EventType() string            { return "artifact.ingested" }
func (ArtifactReferenced) EventType() string          { return "artifact.referenced" }
func (ArtifactReleased) EventType() string            { return "artifact.released" }
func (ArtifactPinned) EventType() string              { return "artifact.pinned" }
func (ArtifactCollected) EventType() string           { return "artifact.collected" }
func (BindingBound) EventType() string                { return "binding.bound" }
func (BindingArmed) EventType() string                { return "binding.armed" }
func (BindingQuiesced) EventType() string             { return "binding.quiesced" }
func (BindingDegraded) EventType() string             { return "binding.degraded" }
func (BindingUnbound) EventType() string              { return "binding.unbound" }
func (BindingRelayMarkerIssued) EventType() string    { return "binding.relay_marker_issued" }
func (BindingRelayConsumed) EventType() string        { return "binding.relay_consumed" }
func (InstallationStateRepaired) EventType() string   { return "installation.repaired" }
func (InstallationBridgeSelected) EventType() string  { return "installation.bridge_selected" }
func (InstallationSnapshotRevisionsReserved) EventType() string {
	return "installation.snapshot_revisions_reserved"
}
func (SessionCreated) EventType() string            { return "session.created" }
func (SessionDetached) EventType() string           { return "session.detached" }
func (SessionAttached) EventType() string           { return "session.attached" }
func (SessionEpochAdvanced) EventType() string      { return "session.epoch_advanced" }
func (SessionPermissionObserved) EventType() string { return "session.permission_observed" }
func (SessionPermissionDrifted) EventType() string  { return "session.permission_drifted" }
func (SessionParked) EventType() string             { return "session.parked" }
func (SessionUnparked) EventType() string           { return "session.unparked" }
func (SessionStale) EventType() string              { return "session.stale" }
func (SessionRetired) EventType() string            { return "session.retired" }
func (AppServerStarted) EventType() string          { return "appserver.started" }
func (AppServerExited) EventType() string           { return "appserver.exited" }
func (CtxSessionOpened) EventType() string          { return "ctxsession.opened" }
func (CtxSessionMessage) EventType() string         { return "ctxsession.message" }
func (CtxSessionEvent) EventType() string           { return "ctxsession.event" }
func (CtxSessionStateChanged) EventType() string    { return "ctxsession.state_changed" }
func (BatchPromoted) EventType() string             { return "batch.promoted" }
func (BatchParkNotified) EventType() string         { return "batch.park_notified" }
func (CursorAdvanced) EventType() string            { return "cursor.advanced" }
func (CtxTreeInitialized) EventType() string        { return "ctxtree.initialized" }
func (CtxTreeObjectPut) EventType() string          { return "ctxtree.object_put" }
func (CtxTreeObjectRemoved) EventType() string      { return "ctxtree.object_removed" }
func (CtxTreeAliasPut) EventType() string           { return "ctxtree.alias_put" }
func (CtxTreeAliasRemoved) EventType() string       { return "ctxtree.alias_removed" }

// ---- task (cbth task run) ----

// TaskSubmitted opens a task in state queued. Its job is submitted in the
// same append. The command's environment is never recorded: it may hold
// secrets, and a task is never started again from the log.
type TaskSubmitted struct {
	JobID string   `json:"job_id"`
	Argv  []string `json:"argv"`
	// Path is argv[0] as the client resolved it against its PATH.
	Path      string `json:"path"`
	Cwd       string `json:"cwd"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
}

// TaskStarted records the command running as the leader of its own
// process group (PID is also the group id). PIDStart is the kernel's
// start time of that process, read by the daemon: with PID it names the
// group for a later daemon, which signals it only while they still
// match (empty when it could not be read, or before cbth recorded it).
type TaskStarted struct {
	PID       int    `json:"pid"`
	PIDStart  string `json:"pid_start,omitempty"`
	DaemonPID int    `json:"daemon_pid"`
	SpoolPath string `json:"spool_path"`
}

// TaskStopping records that the daemon asked the task's process group to
// stop (TERM, then KILL after the grace period) and why.
type TaskStopping struct {
	Reason string `json:"stop_reason"`
	Signal string `json:"signal"`
}

// TaskOutput is what became of a task's output: how much it wrote, how
// much of it the spool kept (the spool is capped), the tail kept inline,
// and the artifact holding the spool.
type TaskOutput struct {
	OutputBytes    int64  `json:"output_bytes"`
	SpoolBytes     int64  `json:"spool_bytes"`
	SpoolTruncated bool   `json:"spool_truncated"`
	Tail           string `json:"output_tail"`
	TailTruncated  bool   `json:"output_tail_truncated"`
	ArtifactID     string `json:"artifact_id,omitempty"`
}

// TaskExited ends a task whose process this daemon saw end (or never
// start). Outcome is one of the TaskOutcome values of engine/command.
type TaskExited struct {
	Outcome    string `json:"outcome"`
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	Killed     bool   `json:"killed,omitempty"`
	Error      string `json:"error,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	TaskOutput
}

// TaskLost ends a task whose daemon stopped without seeing it end: it is
// failed closed, never run again, with whatever output its spool kept.
type TaskLost struct {
	Reason string `json:"reason"`
	// GroupKilled is set when processes of the task were still running
	// and the new daemon killed them.
	GroupKilled bool `json:"group_killed,omitempty"`
	TaskOutput
}

func (TaskSubmitted) EventType() string { return "task.submitted" }
func (TaskStarted) EventType() string   { return "task.started" }
func (TaskStopping) EventType() string  { return "task.stopping" }
func (TaskExited) EventType() string    { return "task.exited" }
func (TaskLost) EventType() string      { return "task.lost" }
