package api

import (
	"time"

	"github.com/cbth-dev/cbth/engine/query"
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
)

// SkipHeadReply is batch.skip_head's reply: "skipped" (the cursor of
// CursorScope passed the thread's head BatchID) or "no_head".
type SkipHeadReply struct {
	Outcome        string `json:"outcome"`
	SourceThreadID string `json:"source_thread_id"`
	BatchID        string `json:"batch_id"`
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
	Outcome string `json:"outcome"`
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
	Outcome string `json:"outcome"`
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
	Outcome string `json:"outcome"`
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
