package aggregate

import (
	"time"

	"github.com/cbth-dev/cbth/engine/fsm"
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
