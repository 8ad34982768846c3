package api

import (
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
)

// The Codex Desktop operations (spec/desktop.md). The sandbox-safe
// readers are not among them: they read the published files and never
// reach the daemon.
var (
	DesktopInstallation       = Op[InstallationArgs, query.InstallationView]{Name: "desktop.installation"}
	DesktopInstallationRepair = Op[InstallationRepairArgs, InstallationRepairReply]{Name: "desktop.installation.repair"}
	DesktopBindingRepair      = Op[BindingRepairArgs, BindingRepairReply]{Name: "desktop.binding.repair"}
	DesktopBindingUnbind      = Op[BindingUnbindArgs, BindingUnbindReply]{Name: "desktop.binding.unbind"}
	DesktopBindingList        = Op[BindingListArgs, query.BindingPage]{Name: "desktop.binding.list"}
	DesktopPreflight          = Op[PreflightArgs, PreflightReply]{Name: "desktop.preflight"}
	BatchSkipHead             = Op[ThreadArgs, SkipHeadReply]{Name: "batch.skip_head"}
	// DesktopQueueValidate starts a live validation of the queue
	// writeback transport (cbth desktop validate-queue).
	DesktopQueueValidate = Op[QueueValidateArgs, QueueValidateReply]{Name: "desktop.queue_validation.start"}
)

// QueueValidateArgs start a live validation of the queue transport: a
// marker queued for the bound thread SourceThreadID, watched for in its
// rollout for WindowMS.
type QueueValidateArgs struct {
	SourceThreadID string `json:"source_thread_id"`
	WindowMS       int64  `json:"window_ms"`
}

// QueueValidateReply is the validation started: the marker Codex took
// (its queued item), the rollout watched, and until when.
type QueueValidateReply struct {
	Outcome        engine.Outcome `json:"outcome"`
	SourceThreadID string         `json:"source_thread_id"`
	Marker         string         `json:"marker"`
	QueuedItemID   string         `json:"queued_item_id"`
	CodexHome      string         `json:"codex_home"`
	RolloutPath    string         `json:"rollout_path"`
	Deadline       time.Time      `json:"deadline"`
}

// SkipHeadReply is batch.skip_head's reply: "skipped" (the cursor of
// CursorScope passed the thread's head BatchID) or "no_head".
type SkipHeadReply struct {
	Outcome        engine.Outcome `json:"outcome"`
	SourceThreadID string         `json:"source_thread_id"`
	BatchID        string         `json:"batch_id"`
}

// InstallationArgs carry the fingerprints the asking cbth observes, by
// read transport, so the answer says whether its own matches the
// validated one (the daemon's when absent).
type InstallationArgs struct {
	Fingerprints map[string]string `json:"observed_validation_fingerprints,omitempty"`
}

// InstallationRepairArgs are desktop.installation.repair's request. A
// capability left empty is written unknown. Fingerprint is the repairing
// cbth's own for ReadTransport: the one a live validation just proved.
type InstallationRepairArgs struct {
	ReadTransport           string `json:"read_transport"`
	ReadTransportCapability string `json:"read_transport_capability,omitempty"`
	ArtifactReadCapability  string `json:"artifact_read_capability,omitempty"`
	WritebackCapability     string `json:"writeback_capability,omitempty"`
	Fingerprint             string `json:"validation_fingerprint"`
}

// InstallationRepairReply is the installation state after the repair,
// what the repair did ("repaired" or "unchanged") and the threads whose
// bindings it degraded.
type InstallationRepairReply struct {
	Outcome engine.Outcome `json:"outcome"`
	query.InstallationView
	DegradedBindings []string `json:"degraded_bindings"`
}

// BindingRepairArgs are desktop.binding.repair's request.
type BindingRepairArgs struct {
	SourceThreadID     string `json:"source_thread_id"`
	CallerAutomationID string `json:"caller_automation_id"`
	BridgeThreadID     string `json:"bridge_thread_id,omitempty"`
}

// BindingRepairReply is the binding after the repair ("bound" or
// "unchanged"), and when the repair replaced the caller automation,
// whether the old one was proven quiesced and whether automatic delivery
// was forced onto a fresh attempt and generation.
type BindingRepairReply struct {
	Outcome engine.Outcome `json:"outcome"`
	query.BindingView
	ReplacedAutomation    bool   `json:"replaced_automation"`
	PreviousAutomationID  string `json:"previous_automation_id"`
	OldAutomationQuiesced bool   `json:"old_automation_quiesced"`
	ForcedFreshAttempt    bool   `json:"forced_fresh_attempt"`
	SupersededAttemptID   string `json:"superseded_attempt_id"`
}

// BindingUnbindArgs are desktop.binding.unbind's request.
type BindingUnbindArgs struct {
	SourceThreadID   string `json:"source_thread_id"`
	DeleteAutomation bool   `json:"delete_automation"`
}

// BindingUnbindReply is the binding after the unbind ("unbound" or
// "already_unbound").
type BindingUnbindReply struct {
	Outcome engine.Outcome `json:"outcome"`
	query.BindingView
}

// BindingListArgs select a page of desktop.binding.list.
type BindingListArgs struct {
	State string `json:"state,omitempty"`
	After string `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// PreflightArgs are desktop.preflight's request.
type PreflightArgs struct {
	BridgeThreadID string            `json:"bridge_thread_id"`
	Fingerprints   map[string]string `json:"observed_validation_fingerprints,omitempty"`
}

// PreflightReply is bridge-preflight's answer, from the daemon (source
// "daemon": it swept, prepared and published) or, when the daemon cannot
// be reached, from the published files (source "snapshot": the manifest
// is fresh). The bridge reads the revision the manifest names.
type PreflightReply struct {
	Outcome                 string    `json:"outcome"`
	Source                  string    `json:"source"`
	SnapshotManifestPath    string    `json:"snapshot_manifest_path"`
	SnapshotRevision        uint64    `json:"snapshot_revision"`
	BridgeThreadID          string    `json:"bridge_thread_id"`
	PublishedAt             time.Time `json:"published_at"`
	FreshUntil              time.Time `json:"fresh_until"`
	ReadTransport           string    `json:"read_transport"`
	ReadTransportGeneration uint64    `json:"read_transport_generation"`
	// AutomaticContinuation says whether the installation is validated
	// and this cbth's fingerprint matches: a bridge arms nothing when not.
	AutomaticContinuation bool   `json:"automatic_continuation"`
	FallbackReason        string `json:"fallback_reason,omitempty"`
}

// The Desktop writeback operations (spec/desktop.md, part 2). Each
// refusal is an error with a stable code and appends nothing.
var (
	DesktopNoteArmPending      = Op[ArmArgs, ArmPendingReply]{Name: "desktop.note_arm_pending"}
	DesktopNoteArm             = Op[ArmArgs, ArmReply]{Name: "desktop.note_arm"}
	DesktopNotePaused          = Op[PausedArgs, PausedReply]{Name: "desktop.note_paused"}
	DesktopNoteBoundaryCrossed = Op[BoundaryArgs, BoundaryReply]{Name: "desktop.note_boundary_crossed"}
)

// ArmArgs are note-arm-pending's and note-arm's request (the lease only
// for note-arm).
type ArmArgs struct {
	SourceThreadID   string `json:"source_thread_id"`
	AttemptID        string `json:"attempt_id"`
	Generation       uint64 `json:"generation"`
	BridgeRequestID  string `json:"bridge_request_id"`
	BridgeArmLeaseID string `json:"bridge_arm_lease_id,omitempty"`
}

// ArmPendingReply is note-arm-pending's answer ("arm_pending" or
// "already_pending"): the bridge arm lease to hand to note-arm.
type ArmPendingReply struct {
	Outcome                engine.Outcome `json:"outcome"`
	SourceThreadID         string         `json:"source_thread_id"`
	AttemptID              string         `json:"attempt_id"`
	Generation             uint64         `json:"generation"`
	BridgeRequestID        string         `json:"bridge_request_id"`
	BridgeArmLeaseID       string         `json:"bridge_arm_lease_id"`
	BridgeArmLeaseDeadline time.Time      `json:"bridge_arm_lease_deadline"`
	ArmPendingSince        time.Time      `json:"arm_pending_since"`
	ArmPendingDeadline     time.Time      `json:"arm_pending_deadline"`
}

// ArmReply is note-arm's answer ("armed" or "already_armed").
type ArmReply struct {
	Outcome              engine.Outcome `json:"outcome"`
	SourceThreadID       string         `json:"source_thread_id"`
	AttemptID            string         `json:"attempt_id"`
	Generation           uint64         `json:"generation"`
	ArmedGeneration      uint64         `json:"armed_generation"`
	CooldownUntil        time.Time      `json:"cooldown_until"`
	PauseNotBefore       time.Time      `json:"pause_not_before"`
	PauseDeadline        time.Time      `json:"pause_deadline"`
	DeliveryAttemptCount int            `json:"delivery_attempt_count"`
}

// PausedArgs are note-paused's request.
type PausedArgs struct {
	SourceThreadID  string `json:"source_thread_id"`
	Generation      uint64 `json:"generation"`
	BridgeRequestID string `json:"bridge_request_id"`
}

// PausedReply is note-paused's answer: "quiesced", "already_quiesced" or
// "arm_abandoned".
type PausedReply struct {
	Outcome        engine.Outcome `json:"outcome"`
	SourceThreadID string         `json:"source_thread_id"`
	Generation     uint64         `json:"generation"`
}

// BoundaryArgs are note-boundary-crossed's request, with the fingerprints
// the calling cbth observes.
type BoundaryArgs struct {
	SourceThreadID           string            `json:"source_thread_id"`
	BatchID                  string            `json:"batch_id"`
	AttemptID                string            `json:"attempt_id"`
	Generation               uint64            `json:"generation"`
	ExpectedSnapshotRevision uint64            `json:"expected_snapshot_revision"`
	Fingerprints             map[string]string `json:"observed_validation_fingerprints,omitempty"`
}

// Continuation is the inline continuation a fresh crossing hands over:
// the batch's summary (one line per job), its jobs and artifacts.
type Continuation struct {
	Summary     string   `json:"summary"`
	JobIDs      []string `json:"job_ids"`
	ArtifactIDs []string `json:"artifact_ids"`
}

// BoundaryReply is a fresh note-boundary-crossed success ("crossed"): the
// echoed tokens, which the caller compares with its prompt's, and the
// inline continuation.
type BoundaryReply struct {
	Outcome                   engine.Outcome `json:"outcome"`
	SourceThreadID            string         `json:"source_thread_id"`
	BatchID                   string         `json:"batch_id"`
	AttemptID                 string         `json:"attempt_id"`
	Generation                uint64         `json:"generation"`
	SnapshotRevision          uint64         `json:"snapshot_revision"`
	ContinuationBoundaryState string         `json:"continuation_boundary_state"`
	ReplayPolicy              string         `json:"replay_policy"`
	CloseReason               string         `json:"close_reason"`
	Continuation              Continuation   `json:"continuation"`
}

// The transcript relay's operations.
var (
	DesktopRelayMarkerIssue = Op[MarkerIssueArgs, MarkerIssueReply]{Name: "desktop.relay.marker_issue"}
	DesktopRelayScannerBind = Op[ScannerBindArgs, ScannerBindReply]{Name: "desktop.relay.scanner_bind"}
	DesktopRelayConsume     = Op[ConsumeArgs, ConsumeReply]{Name: "desktop.relay.consume_transcript"}
)

// MarkerIssueArgs are relay marker issue's request.
type MarkerIssueArgs struct {
	BridgeThreadID  string `json:"bridge_thread_id"`
	Kind            string `json:"kind"`
	SourceThreadID  string `json:"source_thread_id"`
	AttemptID       string `json:"attempt_id"`
	Generation      uint64 `json:"generation"`
	BridgeRequestID string `json:"bridge_request_id"`
}

// MarkerIssueReply is the issued marker ("issued" or "already_issued")
// and its relay line (for scripts; the human output shows it labelled).
type MarkerIssueReply struct {
	Outcome   engine.Outcome `json:"outcome"`
	Marker    string         `json:"marker"`
	Kind      string         `json:"kind"`
	ExpiresAt time.Time      `json:"expires_at"`
	Line      string         `json:"line"`
}

// ScannerBindArgs are relay scanner bind's request.
type ScannerBindArgs struct {
	BridgeThreadID string `json:"bridge_thread_id"`
	RolloutPath    string `json:"rollout_path"`
}

// ScannerBindReply is the scanner binding ("bound" or "unchanged").
type ScannerBindReply struct {
	Outcome         engine.Outcome `json:"outcome"`
	BridgeThreadID  string         `json:"bridge_thread_id"`
	RolloutPath     string         `json:"rollout_path"`
	Device          uint64         `json:"device"`
	Inode           uint64         `json:"inode"`
	BindingRevision uint64         `json:"binding_revision"`
}

// ConsumeArgs are relay consume-transcript's request: BridgeThreadID is
// the bridge whose rollout RolloutPath is, by the operator's word.
type ConsumeArgs struct {
	BridgeThreadID string `json:"bridge_thread_id"`
	RolloutPath    string `json:"rollout_path"`
	Marker         string `json:"marker"`
}

// ConsumeResult is what became of one envelope carrying the marker.
type ConsumeResult struct {
	Line           int64          `json:"line"`
	Kind           string         `json:"kind"`
	Outcome        engine.Outcome `json:"outcome"`
	Applied        engine.Outcome `json:"applied,omitempty"`
	Reason         string         `json:"reason,omitempty"`
	EnvelopeSHA256 string         `json:"envelope_sha256"`
}

// ConsumeReply is consume-transcript's answer: "consumed" when one
// envelope applied its CAS, else the first envelope's outcome, or
// "not_found" when no tool output carries the marker.
type ConsumeReply struct {
	// Skipped are the records too long to read whole (relay.MaxRecord),
	// read through without looking for the marker in them.
	Skipped        []events.RelaySkippedRecord `json:"skipped"`
	Outcome        engine.Outcome              `json:"outcome"`
	BridgeThreadID string                      `json:"bridge_thread_id"`
	RolloutPath    string                      `json:"rollout_path"`
	Marker         string                      `json:"marker"`
	LinesRead      int64                       `json:"lines_read"`
	Results        []ConsumeResult             `json:"results"`
}

// Operator recovery of large artifacts.
var (
	DesktopReadArtifact = Op[ReadArtifactArgs, ReadArtifactReply]{Name: "desktop.read_artifact"}
	DesktopRevokeLease  = Op[ArtifactLeaseArgs, Outcome]{Name: "desktop.artifact_lease.revoke"}
	DesktopIssueLeases  = Op[IssueLeasesArgs, IssueLeasesReply]{Name: "desktop.artifact_lease.issue"}
)

// IssueLeasesArgs are issue-artifact-leases' request: Rotate replaces
// leases still valid.
type IssueLeasesArgs struct {
	BatchID string `json:"batch_id"`
	Rotate  bool   `json:"rotate,omitempty"`
}

// IssueLeasesReply is the batch's artifact recovery leases: "issued"
// (some were issued), "unchanged" (every one still valid was kept), or
// "none" (no artifact of the batch is over the inline limit).
type IssueLeasesReply struct {
	Outcome engine.Outcome            `json:"outcome"`
	BatchID string                    `json:"batch_id"`
	Leases  []query.RecoveryLeaseView `json:"artifact_recovery_leases"`
}

// ReadArtifactArgs are read-artifact's request.
type ReadArtifactArgs struct {
	ArtifactID string `json:"artifact_id"`
	LeaseID    string `json:"artifact_read_lease_id"`
	Offset     int64  `json:"offset"`
	MaxBytes   int64  `json:"max_bytes"`
}

// MaxArtifactChunk bounds one read-artifact chunk.
const MaxArtifactChunk = 1 << 20

// ReadArtifactReply is one chunk: base64 data, where the next chunk
// starts, and whether this one reached the end.
type ReadArtifactReply struct {
	ArtifactID string `json:"artifact_id"`
	Offset     int64  `json:"offset"`
	Bytes      int    `json:"bytes"`
	Data       []byte `json:"data_base64"`
	NextOffset int64  `json:"next_offset"`
	EOF        bool   `json:"eof"`
	SizeBytes  int64  `json:"size_bytes"`
	SHA256     string `json:"sha256"`
}

// ArtifactLeaseArgs name an artifact.
type ArtifactLeaseArgs struct {
	ArtifactID string `json:"artifact_id"`
}
