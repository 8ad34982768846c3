package events

import "time"

// KindInstallation is the stream of the Desktop installation state (one, installation/desktop).
const KindInstallation Kind = "installation"

// installationEvents declares the installation events (see declarations).
func installationEvents() []declaration {
	return []declaration{
		decl[InstallationRelayScannerBound](KindInstallation),
		decl[InstallationRelayScannerAdvanced](KindInstallation),
		decl[InstallationSnapshotRevisionsReserved](KindInstallation),
		decl[InstallationRelayScannerDegraded](KindInstallation),
		decl[InstallationStateRepaired](KindInstallation),
		decl[InstallationBridgeSelected](KindInstallation),
		decl[InstallationMCPValidationRequested](KindInstallation),
		decl[InstallationMCPWritebackValidated](KindInstallation),
		decl[InstallationQueueValidationStarted](KindInstallation),
		decl[InstallationQueueWritebackValidated](KindInstallation),
		decl[InstallationQueueValidationFailed](KindInstallation),
	}
}

// The states of a capability (Capabilities' *_capability fields).
const (
	CapUnknown     = "unknown"
	CapValidated   = "validated"
	CapUnavailable = "unavailable"
)

// Capabilities mirrors the installation-wide capability conclusions.
type Capabilities struct {
	ReadTransport           string `json:"read_transport"`
	ReadTransportGeneration uint64 `json:"read_transport_generation"`
	ReadTransportCapability string `json:"read_transport_capability"`
	ArtifactReadCapability  string `json:"artifact_read_capability"`
	WritebackCapability     string `json:"writeback_capability"`
	ValidationFingerprint   string `json:"validation_fingerprint"`
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

const TypeInstallationRelayScannerBound = "installation.relay_scanner_bound"

func (InstallationRelayScannerBound) EventType() string { return TypeInstallationRelayScannerBound }

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

const TypeInstallationRelayScannerAdvanced = "installation.relay_scanner_advanced"

func (InstallationRelayScannerAdvanced) EventType() string {
	return TypeInstallationRelayScannerAdvanced
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

const TypeInstallationSnapshotRevisionsReserved = "installation.snapshot_revisions_reserved"

func (InstallationSnapshotRevisionsReserved) EventType() string {
	return TypeInstallationSnapshotRevisionsReserved
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

const TypeInstallationRelayScannerDegraded = "installation.relay_scanner_degraded"

func (InstallationRelayScannerDegraded) EventType() string {
	return TypeInstallationRelayScannerDegraded
}

// InstallationStateRepaired is the only writer of installation-wide
// capability conclusions.
type InstallationStateRepaired struct {
	State       Capabilities `json:"state"`
	ValidatedAt time.Time    `json:"validated_at,omitzero"`
	UpdatedBy   string       `json:"updated_by_bootstrap_or_repair"`
}

const TypeInstallationStateRepaired = "installation.repaired"

func (InstallationStateRepaired) EventType() string { return TypeInstallationStateRepaired }

// InstallationBridgeSelected records the bridge thread the Desktop
// snapshots are published for (bridge-preflight through the daemon). It
// changes no capability, generation, fingerprint or validated_at.
type InstallationBridgeSelected struct {
	BridgeThreadID string `json:"bridge_thread_id"`
	Previous       string `json:"previous_bridge_thread_id,omitempty"`
}

const TypeInstallationBridgeSelected = "installation.bridge_selected"

func (InstallationBridgeSelected) EventType() string { return TypeInstallationBridgeSelected }

// InstallationMCPValidationRequested opens a live validation of the MCP
// writeback transport (`cbth desktop validate-mcp`): the token a Desktop
// thread's call of desktop_validate_mcp must bring back before ExpiresAt.
type InstallationMCPValidationRequested struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

const TypeInstallationMCPValidationRequested = "installation.mcp_validation_requested"

func (InstallationMCPValidationRequested) EventType() string {
	return TypeInstallationMCPValidationRequested
}

// InstallationMCPWritebackValidated records the proof that Codex Desktop
// runs cbth's MCP server in its threads and lets them call its tools: a
// call of desktop_validate_mcp, with the requested token, from the thread
// Codex named. It validates the mcp writeback transport for the cbth
// whose fingerprint it names, and changes no other capability.
type InstallationMCPWritebackValidated struct {
	ThreadID    string `json:"thread_id"`
	SandboxMode string `json:"sandbox_mode,omitempty"`
	Fingerprint string `json:"validation_fingerprint"`
	Token       string `json:"token"`
}

const TypeInstallationMCPWritebackValidated = "installation.mcp_writeback_validated"

func (InstallationMCPWritebackValidated) EventType() string {
	return TypeInstallationMCPWritebackValidated
}

// InstallationQueueValidationStarted opens a live validation of the
// queue writeback transport (`cbth desktop validate-queue`): cbth put
// Marker in Codex's own queue for the bound thread ThreadID (Codex named
// the item QueuedItemID) in CodexHome, and watches the thread's rollout
// from StartOffset until Deadline for a turn of the queue that carries it.
type InstallationQueueValidationStarted struct {
	ThreadID     string    `json:"thread_id"`
	Marker       string    `json:"marker"`
	QueuedItemID string    `json:"queued_item_id"`
	CodexHome    string    `json:"codex_home"`
	RolloutPath  string    `json:"rollout_path"`
	StartOffset  int64     `json:"start_offset"`
	Deadline     time.Time `json:"deadline"`
}

const TypeInstallationQueueValidationStarted = "installation.queue_validation_started"

func (InstallationQueueValidationStarted) EventType() string {
	return TypeInstallationQueueValidationStarted
}

// InstallationQueueWritebackValidated records the proof that Codex drains
// the queue cbth adds to: the open validation's marker was seen in the
// thread's rollout as the user message of a turn the queue triggered,
// before its deadline. It validates the queue writeback transport for the
// cbth whose fingerprint it names and for that Codex home, and changes no
// other capability.
type InstallationQueueWritebackValidated struct {
	ThreadID     string `json:"thread_id"`
	Marker       string `json:"marker"`
	QueuedItemID string `json:"queued_item_id"`
	CodexHome    string `json:"codex_home"`
	RolloutPath  string `json:"rollout_path"`
	Fingerprint  string `json:"validation_fingerprint"`
}

const TypeInstallationQueueWritebackValidated = "installation.queue_writeback_validated"

func (InstallationQueueWritebackValidated) EventType() string {
	return TypeInstallationQueueWritebackValidated
}

// Reasons a live validation of the queue transport fails
// (InstallationQueueValidationFailed).
const (
	QueueNotDrained = "not_drained"   // the deadline passed without the marker drained
	QueueRefused    = "queue_refused" // codex queue ended with an error: nothing was queued
	QueueNotRun     = "queue_not_run" // codex could not be started
	QueueUnknown    = "queue_unknown" // codex queue did not end in time: the marker may be queued
)

// InstallationQueueValidationFailed records that a live validation of
// the queue transport failed (Reason, a stable code): the transport is
// not validated until another validation succeeds, whatever an earlier
// one proved. Marker is empty when nothing was queued.
type InstallationQueueValidationFailed struct {
	ThreadID     string `json:"thread_id"`
	Marker       string `json:"marker,omitempty"`
	QueuedItemID string `json:"queued_item_id,omitempty"`
	CodexHome    string `json:"codex_home"`
	Reason       string `json:"reason"`
	Detail       string `json:"detail,omitempty"`
}

const TypeInstallationQueueValidationFailed = "installation.queue_validation_failed"

func (InstallationQueueValidationFailed) EventType() string {
	return TypeInstallationQueueValidationFailed
}
