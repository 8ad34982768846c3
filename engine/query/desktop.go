package query

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/plural"
)

// InstallationView is the Desktop installation state as the commands
// print it: the seed's fields, the bridge thread the snapshots are
// published for, and what the asking cbth observes. Configured is false
// before the first repair (everything else is then the default: no
// transport, generation 0, capabilities unknown).
type InstallationView struct {
	Configured              bool       `json:"configured"`
	ReadTransport           string     `json:"read_transport"`
	ReadTransportGeneration uint64     `json:"read_transport_generation"`
	ReadTransportCapability string     `json:"read_transport_capability"`
	ArtifactReadCapability  string     `json:"artifact_read_capability"`
	WritebackCapability     string     `json:"writeback_capability"`
	ValidationFingerprint   string     `json:"validation_fingerprint"`
	ValidatedAt             *time.Time `json:"validated_at"`
	UpdatedBy               string     `json:"updated_by_bootstrap_or_repair"`
	BridgeThreadID          string     `json:"bridge_thread_id"`
	// ObservedFingerprint is the fingerprint the asking cbth has for the
	// installation's transport; when it differs from the stored one,
	// nothing counts as validated (AutomaticContinuation false).
	ObservedFingerprint   string `json:"observed_validation_fingerprint"`
	FingerprintMatch      bool   `json:"fingerprint_match"`
	AutomaticContinuation bool   `json:"automatic_continuation"`
	SnapshotManifestPath  string `json:"snapshot_manifest_path"`
	// RelayScanners are the transcript-relay scanners by bridge thread
	// (at most MaxRelayScanners, the rest counted in RelayScannersOmitted).
	RelayScanners        []RelayScannerView `json:"relay_scanners"`
	RelayScannersOmitted int                `json:"relay_scanners_omitted"`
	// WritebackTransports says, per writeback transport, whether it is
	// validated: mcp by a live validation (cbth desktop validate-mcp),
	// relay and direct by the operator's writeback_capability, queue by
	// a live validation (cbth desktop validate-queue; unavailable after
	// one failed). WritebackTransport is the one in use: mcp where
	// validated, else relay where a scanner is bound, else direct, else
	// queue.
	WritebackTransports map[string]string `json:"writeback_transports"`
	WritebackTransport  string            `json:"writeback_transport"`
	// MCPValidation is the last proof of the mcp transport (the Desktop
	// thread that called, when), and MCPValidationOpenUntil when a live
	// validation waits for its call.
	MCPValidation          *MCPValidationView `json:"mcp_validation"`
	MCPValidationOpenUntil *time.Time         `json:"mcp_validation_open_until"`
	// QueueValidation is the last proof of the queue transport (the
	// thread whose rollout showed the marker drained), QueueValidationOpen
	// the live validation waiting for its drain, and QueueValidationFailure
	// why the last one failed (it voided the proof before it).
	QueueValidation        *QueueValidationView    `json:"queue_validation"`
	QueueValidationOpen    *QueueValidationOpen    `json:"queue_validation_open"`
	QueueValidationFailure *QueueValidationFailure `json:"queue_validation_failure"`
	// CodexHome is the Codex home the daemon hands heads to (the queue
	// transport's proof holds for it only).
	CodexHome string `json:"codex_home"`
}

// QueueValidationView is the proof of the queue writeback transport.
type QueueValidationView struct {
	ThreadID     string    `json:"thread_id"`
	Marker       string    `json:"marker"`
	QueuedItemID string    `json:"queued_item_id"`
	CodexHome    string    `json:"codex_home"`
	RolloutPath  string    `json:"rollout_path"`
	Fingerprint  string    `json:"validation_fingerprint"`
	ValidatedAt  time.Time `json:"validated_at"`
	// Current says whether it holds for the installation and the daemon
	// as they are: given for the validated fingerprint and the daemon's
	// Codex home.
	Current bool `json:"current"`
}

// QueueValidationOpen is a live validation of the queue transport waiting
// for its marker to be drained.
type QueueValidationOpen struct {
	ThreadID     string    `json:"thread_id"`
	Marker       string    `json:"marker"`
	QueuedItemID string    `json:"queued_item_id"`
	RolloutPath  string    `json:"rollout_path"`
	Deadline     time.Time `json:"deadline"`
}

// QueueValidationFailure is why the last live validation of the queue
// transport failed (Reason: events.Queue*).
type QueueValidationFailure struct {
	ThreadID string    `json:"thread_id"`
	Marker   string    `json:"marker"`
	Reason   string    `json:"reason"`
	Detail   string    `json:"detail"`
	FailedAt time.Time `json:"failed_at"`
}

// MCPValidationView is the proof of the mcp writeback transport.
type MCPValidationView struct {
	ThreadID    string    `json:"thread_id"`
	SandboxMode string    `json:"sandbox_mode"`
	Fingerprint string    `json:"validation_fingerprint"`
	ValidatedAt time.Time `json:"validated_at"`
	// Current says whether it holds for the installation as it is: it
	// was given for the validated fingerprint.
	Current bool `json:"current"`
}

// MaxRelayScanners bounds the scanners an installation view lists: one
// is bound per bridge thread, and bridge threads are replaced only when
// they wear out.
const MaxRelayScanners = 64

// The states of a relay scanner as its view shows them: a reading of the
// installation, not a machine's state.
const (
	ScannerReading  = "reading"
	ScannerDegraded = "degraded" // with a stable reason code until it is rebound
)

// RelayScannerView is one bridge thread's relay scanner: its rollout,
// the position recorded in the log, and its state (ScannerReading or
// ScannerDegraded).
type RelayScannerView struct {
	BridgeThreadID  string     `json:"bridge_thread_id"`
	RolloutPath     string     `json:"rollout_path"`
	BindingRevision uint64     `json:"binding_revision"`
	Offset          int64      `json:"offset"`
	Line            int64      `json:"line"`
	State           string     `json:"state"`
	DegradedReason  string     `json:"degraded_reason"`
	DegradedDetail  string     `json:"degraded_detail"`
	DegradedAt      *time.Time `json:"degraded_at"`
}

// NewInstallationView renders the installation state (nil before the
// first repair) for a cbth observing fingerprint observed, whose daemon
// hands heads to Codex's queue in codexHome.
func NewInstallationView(inst *aggregate.Installation, observed, manifest, codexHome string) InstallationView {
	v := InstallationView{ReadTransportCapability: events.CapUnknown, ArtifactReadCapability: events.CapUnknown,
		WritebackCapability: events.CapUnknown, ObservedFingerprint: observed, SnapshotManifestPath: manifest,
		RelayScanners: []RelayScannerView{}, CodexHome: codexHome,
		WritebackTransports: map[string]string{desktop.WritebackMCP: events.CapUnknown, desktop.WritebackRelay: events.CapUnknown,
			desktop.WritebackDirect: events.CapUnknown, desktop.WritebackQueue: events.CapUnknown}}
	if inst == nil {
		return v
	}
	queueCurrent := inst.QueueWritebackValidated() && inst.QueueWriteback.CodexHome == codexHome
	switch {
	case queueCurrent:
		v.WritebackTransports[desktop.WritebackQueue] = events.CapValidated
	case inst.QueueFailure != nil:
		v.WritebackTransports[desktop.WritebackQueue] = events.CapUnavailable
	}
	if w := inst.QueueWriteback; w != nil {
		v.QueueValidation = &QueueValidationView{ThreadID: w.ThreadID, Marker: w.Marker, QueuedItemID: w.QueuedItemID, CodexHome: w.CodexHome,
			RolloutPath: w.RolloutPath, Fingerprint: w.Fingerprint, ValidatedAt: w.ValidatedAt, Current: queueCurrent}
	}
	if q := inst.QueueValidation; q != nil {
		v.QueueValidationOpen = &QueueValidationOpen{ThreadID: q.ThreadID, Marker: q.Marker, QueuedItemID: q.QueuedItemID,
			RolloutPath: q.RolloutPath, Deadline: q.Deadline}
	}
	if f := inst.QueueFailure; f != nil {
		v.QueueValidationFailure = &QueueValidationFailure{ThreadID: f.ThreadID, Marker: f.Marker, Reason: f.Reason, Detail: f.Detail, FailedAt: f.FailedAt}
	}
	v.WritebackTransports[desktop.WritebackRelay] = inst.WritebackCapability
	v.WritebackTransports[desktop.WritebackDirect] = inst.WritebackCapability
	if inst.MCPWritebackValidated() {
		v.WritebackTransports[desktop.WritebackMCP] = events.CapValidated
	}
	if w := inst.MCPWriteback; w != nil {
		v.MCPValidation = &MCPValidationView{ThreadID: w.ThreadID, SandboxMode: w.SandboxMode, Fingerprint: w.Fingerprint,
			ValidatedAt: w.ValidatedAt, Current: inst.MCPWritebackValidated()}
	}
	if r := inst.MCPValidation; r != nil {
		v.MCPValidationOpenUntil = opt(r.ExpiresAt)
	}
	v.WritebackTransport = inst.WritebackTransport()
	c := inst.Capabilities
	v.Configured = true
	v.ReadTransport, v.ReadTransportGeneration = c.ReadTransport, c.ReadTransportGeneration
	v.ReadTransportCapability, v.ArtifactReadCapability, v.WritebackCapability = c.ReadTransportCapability, c.ArtifactReadCapability, c.WritebackCapability
	v.ValidationFingerprint, v.ValidatedAt, v.UpdatedBy = c.ValidationFingerprint, opt(inst.ValidatedAt), inst.UpdatedBy
	v.BridgeThreadID = inst.BridgeThreadID
	v.FingerprintMatch = observed == c.ValidationFingerprint
	v.AutomaticContinuation = v.FingerprintMatch && (c.ReadTransportCapability == events.CapValidated && inst.WritebackValidated() ||
		desktop.QueueCurrent(inst, observed, codexHome) == "")
	for _, bridge := range slices.Sorted(maps.Keys(inst.RelayScanners)) {
		if len(v.RelayScanners) == MaxRelayScanners {
			v.RelayScannersOmitted++
			continue
		}
		r := inst.RelayScanners[bridge]
		sv := RelayScannerView{BridgeThreadID: bridge, RolloutPath: r.RolloutPath, BindingRevision: r.Revision, Offset: r.Offset,
			Line: r.Line, State: ScannerReading, DegradedReason: r.DegradedReason, DegradedDetail: r.DegradedDetail, DegradedAt: opt(r.DegradedAt)}
		switch {
		case r.DegradedReason != "":
			sv.State = ScannerDegraded
		case r.SkippedRecords > 0:
			// Reading on, but what it skipped may have held a line.
			sv.State, sv.DegradedReason, sv.DegradedAt = ScannerDegraded, events.RelayScannerRecordTooLong, opt(r.SkippedAt)
			sv.DegradedDetail = fmt.Sprintf("skipped %s too long to read whole, the last at line %d (%s): "+
				"a relay line there was not read; the scanner reads on", plural.Count(r.SkippedRecords, "rollout record", "rollout records"), r.LastSkipped.Line, plural.Count(r.LastSkipped.Bytes, "byte", "bytes"))
		}
		v.RelayScanners = append(v.RelayScanners, sv)
	}
	return v
}

// BindingView is a Desktop thread binding with every seed field. The
// capabilities are the binding's mirror of the installation state it was
// made under; MirrorMatches says whether that is still the one in force.
type BindingView struct {
	BindingID                 string           `json:"binding_id"`
	SourceThreadID            string           `json:"source_thread_id"`
	BindingState              fsm.BindingState `json:"binding_state"`
	CallerAutomationID        string           `json:"caller_automation_id"`
	ArmedGeneration           *uint64          `json:"armed_generation"`
	ArmedGenerationQuiescedAt *time.Time       `json:"armed_generation_quiesced_at"`
	PauseNotBefore            *time.Time       `json:"pause_not_before"`
	PauseDeadline             *time.Time       `json:"pause_deadline"`
	BridgeThreadID            string           `json:"bridge_thread_id"`
	ReadTransport             string           `json:"read_transport"`
	ReadTransportGeneration   uint64           `json:"read_transport_generation"`
	ReadTransportCapability   string           `json:"read_transport_capability"`
	ArtifactReadCapability    string           `json:"artifact_read_capability"`
	WritebackCapability       string           `json:"writeback_capability"`
	ValidationFingerprint     string           `json:"validation_fingerprint"`
	MirrorMatches             bool             `json:"mirror_matches"`
	DegradedReason            string           `json:"degraded_reason"`
	AutomationDeletedOnUnbind bool             `json:"automation_deleted_on_unbind"`
	CreatedAt                 time.Time        `json:"created_at"`
	UpdatedAt                 time.Time        `json:"updated_at"`
	LastVerifiedAt            *time.Time       `json:"last_verified_at"`
	Version                   uint64           `json:"version"`
}

// NewBindingView renders a binding against the installation in force
// (nil before any).
func NewBindingView(b *aggregate.Binding, inst *aggregate.Installation) BindingView {
	m := b.Mirror
	v := BindingView{BindingID: b.ID, SourceThreadID: b.SourceThreadID, BindingState: b.State,
		CallerAutomationID: b.CallerAutomationID, ArmedGenerationQuiescedAt: opt(b.ArmedGenerationQuiesced),
		PauseNotBefore: opt(b.PauseNotBefore), PauseDeadline: opt(b.PauseDeadline), BridgeThreadID: b.BridgeThreadID,
		ReadTransport: m.ReadTransport, ReadTransportGeneration: m.ReadTransportGeneration,
		ReadTransportCapability: m.ReadTransportCapability, ArtifactReadCapability: m.ArtifactReadCapability,
		WritebackCapability: m.WritebackCapability, ValidationFingerprint: m.ValidationFingerprint,
		MirrorMatches: inst != nil && b.MirrorMatches(inst), DegradedReason: b.DegradedReason,
		AutomationDeletedOnUnbind: b.AutomationDeletedOnUnbind, CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt,
		LastVerifiedAt: opt(b.LastVerifiedAt), Version: b.Version}
	if b.ArmedGeneration > 0 {
		g := b.ArmedGeneration
		v.ArmedGeneration = &g
	}
	return v
}

// BindingFilter selects a page of bindings.
type BindingFilter struct {
	State fsm.BindingState // "" for all
	After string           // binding id cursor
	Limit int
}

// BindingPage is one page of bindings in binding id order.
type BindingPage struct {
	Bindings []BindingView `json:"bindings"`
	Next     string        `json:"next,omitempty"`
}

// Bindings lists Desktop bindings in id (creation) order, one page (see
// PageBytes) at a time.
func Bindings(s engine.Snapshot, f BindingFilter) (BindingPage, error) {
	inst, err := command.Installation(s)
	if err != nil {
		return BindingPage{}, err
	}
	p := newPager[BindingView](f.Limit)
	var page BindingPage
	err = s.ForEachAfter(events.KindBinding, f.After, func(st aggregate.State) error {
		b := st.(*aggregate.Binding)
		if f.State != "" && b.State != f.State {
			return nil
		}
		if !p.add(NewBindingView(b, inst)) {
			page.Next = p.items[len(p.items)-1].BindingID
			return errStop
		}
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	page.Bindings = p.items
	return page, err
}
