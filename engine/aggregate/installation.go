package aggregate

import (
	"time"

	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
)

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
	// QueueValidation is the open live validation of the queue writeback
	// transport; QueueWriteback the proof the last one that succeeded
	// gave, QueueFailure why the last one failed (a failure voids the
	// proof before it).
	QueueValidation *events.InstallationQueueValidationStarted `json:"queue_validation,omitempty"`
	QueueWriteback  *QueueWriteback                            `json:"queue_writeback,omitempty"`
	QueueFailure    *QueueFailure                              `json:"queue_failure,omitempty"`
}

// QueueWriteback is the proof that Codex drains the queue cbth adds to,
// for the cbth of one fingerprint and one Codex home (spec/desktop.md,
// "The queue transport").
type QueueWriteback struct {
	events.InstallationQueueWritebackValidated
	ValidatedAt time.Time `json:"validated_at"`
}

// QueueFailure is why the last live validation of the queue transport
// failed.
type QueueFailure struct {
	events.InstallationQueueValidationFailed
	FailedAt time.Time `json:"failed_at"`
}

// QueueWritebackValidated says whether the queue writeback transport is
// validated for the installation as it is now: proven for the validated
// fingerprint (the Codex home it was proven for is the daemon's to
// compare). A repair that changes the fingerprint voids the proof.
func (i *Installation) QueueWritebackValidated() bool {
	return i.QueueWriteback != nil && i.QueueWriteback.Fingerprint == i.ValidationFingerprint && i.ValidationFingerprint != ""
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

// WritebackTransport is the writeback transport in use (spec/desktop.md,
// "Writeback transports"): mcp where it is validated, else relay where
// writeback is validated and a relay scanner is bound, else direct where
// writeback is validated, else queue where its live validation holds;
// "" while none is. The three heartbeat transports come first: the queue
// is experimental, and serves an installation with no heartbeat bridge.
func (i *Installation) WritebackTransport() string {
	switch {
	case i.MCPWritebackValidated():
		return "mcp"
	case i.WritebackCapability == events.CapValidated && len(i.RelayScanners) > 0:
		return "relay"
	case i.WritebackCapability == events.CapValidated:
		return "direct"
	case i.QueueWritebackValidated():
		return WritebackQueue
	}
	return ""
}

// WritebackQueue names the queue writeback transport: cbth hands a head
// to Codex's own queue; no heartbeat carries it.
const WritebackQueue = "queue"

// WritebackValidated says whether a heartbeat writeback transport is
// validated: the operator's writeback_capability (relay, direct) or the
// mcp proof. The queue transport involves no heartbeat.
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
	case *events.InstallationQueueValidationStarted:
		i.QueueValidation = p
	case *events.InstallationQueueWritebackValidated:
		i.QueueValidation, i.QueueFailure = nil, nil
		i.QueueWriteback = &QueueWriteback{InstallationQueueWritebackValidated: *p, ValidatedAt: e.RecordedAt}
	case *events.InstallationQueueValidationFailed:
		i.QueueValidation, i.QueueWriteback = nil, nil
		i.QueueFailure = &QueueFailure{InstallationQueueValidationFailed: *p, FailedAt: e.RecordedAt}
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

// Deadlines implements Deadliner: an open validation of the queue
// transport fails at its deadline.
func (i *Installation) Deadlines() []Deadline {
	if v := i.QueueValidation; v != nil {
		return []Deadline{{index.DueQueueValidation, v.Deadline}}
	}
	return nil
}
