// Package desktop holds the Codex Desktop target's commands
// (spec/desktop.md): the installation state, thread bindings, the bridge
// the snapshots are published for, the gate of a Desktop head, the
// bridge's arm and pause proofs, the boundary handoff, the MCP writeback
// validation and the transcript relay. It stands on the core
// (engine/command), which keeps what every close needs of a binding
// (CursorScope, DegradeBinding); never the other way.
package desktop

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The Codex Desktop adapter's commands, part 1: the installation state,
// thread bindings, the bridge the snapshots are published for, and the
// gate that decides which Desktop heads are ready. spec/desktop.md states
// every rule with its test.

// Desktop names.
const (
	TransportDirect = "direct_file_read"
	TransportHelper = "helper_cli_read"

	// UpdatedByRepair is what updated_by_bootstrap_or_repair records for
	// installation-state repair, the only writer of capabilities.
	UpdatedByRepair = "repair"
)

// ReadTransports and CapabilityStates list the enums.
var (
	ReadTransports   = []string{TransportDirect, TransportHelper}
	CapabilityStates = []string{events.CapUnknown, events.CapValidated, events.CapUnavailable}
)

func installationStream() events.StreamID {
	return events.StreamID{Kind: events.KindInstallation, ID: command.InstallationID}
}

// requireInstallation returns the installation state, ESTATE before the
// first repair.
func requireInstallation(v engine.Reader) (*aggregate.Installation, error) {
	inst, err := command.Installation(v)
	if err == nil && inst == nil {
		err = errs.New(errs.ESTATE, "no Desktop installation state yet: run `cbth desktop installation-state repair --read-transport direct_file_read` first")
	}
	return inst, err
}

// MirrorMatches reports whether a binding's mirror is the installation's
// current transport, generation and fingerprint: the installation-wide
// state the binding was made under is still the one in force.
func MirrorMatches(b *aggregate.Binding, inst *aggregate.Installation) bool {
	m, c := b.Mirror, inst.Capabilities
	return m.ReadTransport == c.ReadTransport && m.ReadTransportGeneration == c.ReadTransportGeneration &&
		m.ValidationFingerprint == c.ValidationFingerprint
}

// ServesBridge reports whether a binding is served by the bridge thread
// the installation publishes for: it is not pinned to another one.
func ServesBridge(b *aggregate.Binding, bridge string) bool {
	return bridge != "" && (b.BridgeThreadID == "" || b.BridgeThreadID == bridge)
}

// ---- installation state ----

// RepairInstallation is `cbth desktop installation-state repair`, the only
// writer of the installation-wide transport and capability conclusions.
// A capability left out ("") is written unknown. Parameters that change
// nothing append nothing (outcome "unchanged": no generation bump,
// validated_at kept); a real change bumps read_transport_generation and,
// in the same append, degrades every bound binding whose mirror no longer
// matches and abandons its live attempt.
type RepairInstallation struct {
	engine.Answers[InstallationRepair]

	ReadTransport string
	ReadCap       string
	ArtifactCap   string
	WritebackCap  string
	// Fingerprint is the validation fingerprint the repairing cbth
	// observes for ReadTransport (projections/inbox.Fingerprint).
	Fingerprint string
}

// InstallationRepair is RepairInstallation's value.
type InstallationRepair struct {
	State    aggregate.Installation
	Degraded []string // threads whose binding went degraded
}

// Decide implements engine.Decider.
func (c RepairInstallation) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if !slices.Contains(ReadTransports, c.ReadTransport) {
		return engine.Decision{}, errs.New(errs.EINVAL, "read transport %q is not one of %s", c.ReadTransport, strings.Join(ReadTransports, ", "))
	}
	caps := []*string{&c.ReadCap, &c.ArtifactCap, &c.WritebackCap}
	for i, name := range []string{"read transport capability", "artifact read capability", "writeback capability"} {
		if *caps[i] == "" {
			*caps[i] = events.CapUnknown
		}
		if !slices.Contains(CapabilityStates, *caps[i]) {
			return engine.Decision{}, errs.New(errs.EINVAL, "%s %q is not one of %s", name, *caps[i], strings.Join(CapabilityStates, ", "))
		}
	}
	if err := command.CheckID("validation fingerprint", c.Fingerprint); err != nil {
		return engine.Decision{}, err
	}
	cur, err := command.Installation(v)
	if err != nil {
		return engine.Decision{}, err
	}
	want := events.Capabilities{ReadTransport: c.ReadTransport, ReadTransportCapability: c.ReadCap,
		ArtifactReadCapability: c.ArtifactCap, WritebackCapability: c.WritebackCap, ValidationFingerprint: c.Fingerprint}
	if cur != nil {
		want.ReadTransportGeneration = cur.ReadTransportGeneration
		if cur.Capabilities == want {
			return c.Answer(engine.Decision{Outcome: command.OutcomeUnchanged}, InstallationRepair{State: *cur}), nil
		}
	}
	want.ReadTransportGeneration++
	ev := &events.InstallationStateRepaired{State: want, UpdatedBy: UpdatedByRepair}
	if want.ReadTransportCapability == events.CapValidated || want.ArtifactReadCapability == events.CapValidated || want.WritebackCapability == events.CapValidated {
		ev.ValidatedAt = now
	}
	emits := []engine.Emit{{Stream: installationStream(), Payload: ev}}
	next := aggregate.Installation{Capabilities: want, ValidatedAt: ev.ValidatedAt, UpdatedBy: UpdatedByRepair}
	var degraded []string
	for _, r := range v.Scan(index.BindingByThread, "") {
		s, err := v.State(events.KindBinding, r.ID)
		if err != nil {
			return engine.Decision{}, err
		}
		b, ok := s.(*aggregate.Binding)
		if !ok || b.State != fsm.BindingBound || MirrorMatches(b, &next) {
			continue
		}
		reason := "installation state repaired: read_transport_generation " + itoa(want.ReadTransportGeneration) + " no longer matches the binding's mirror"
		emits = append(emits, engine.Emit{Stream: command.BindingStream(b.ID), Payload: &events.BindingDegraded{Reason: reason}})
		ab, _, err := command.AbandonLive(v, b.SourceThreadID, "binding degraded: "+reason)
		if err != nil {
			return engine.Decision{}, err
		}
		emits = append(emits, ab...)
		degraded = append(degraded, b.SourceThreadID)
	}
	if cur != nil {
		next.BridgeThreadID = cur.BridgeThreadID
	}
	return c.Answer(engine.Decision{Outcome: command.OutcomeRepaired, Emits: emits}, InstallationRepair{State: next, Degraded: degraded}), nil
}

// SelectBridge records the bridge thread the snapshots are published for
// (bridge-preflight through the daemon). Outcomes "selected", "unchanged".
type SelectBridge struct{ BridgeThreadID string }

// Decide implements engine.Decider.
func (c SelectBridge) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := command.CheckID("bridge thread id", c.BridgeThreadID); err != nil {
		return engine.Decision{}, err
	}
	inst, err := requireInstallation(v)
	if err != nil {
		return engine.Decision{}, err
	}
	if inst.BridgeThreadID == c.BridgeThreadID {
		return engine.Decision{Outcome: command.OutcomeUnchanged}, nil
	}
	return engine.Decision{Outcome: command.OutcomeSelected, Emits: []engine.Emit{{Stream: installationStream(),
		Payload: &events.InstallationBridgeSelected{BridgeThreadID: c.BridgeThreadID, Previous: inst.BridgeThreadID}}}}, nil
}

// ReserveSnapshotRevisions records that the snapshot publisher may use
// revisions up to Through (spec/desktop.md, "Revisions"). Outcomes
// "reserved", or "unchanged" when the log already reserves that far.
type ReserveSnapshotRevisions struct {
	Through uint64
}

// Decide implements engine.Decider.
func (c ReserveSnapshotRevisions) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	inst, err := requireInstallation(v)
	if err != nil {
		return engine.Decision{}, err
	}
	if c.Through <= inst.SnapshotRevisionsReserved {
		return engine.Decision{Outcome: command.OutcomeUnchanged}, nil
	}
	return engine.Decision{Outcome: command.OutcomeReserved, Emits: []engine.Emit{{Stream: installationStream(),
		Payload: &events.InstallationSnapshotRevisionsReserved{Through: c.Through}}}}, nil
}

// ---- bindings ----

// RepairBinding is `cbth desktop binding repair`: it binds a thread to its
// caller automation (or repairs a degraded or unbound binding), mirroring
// the installation state, which it never writes. An automation serves one
// thread; a binding with no automation serves the queue transport only.
// When the repair replaces the automation, or the old one's armed
// generation is not proven quiesced, the thread's live attempt is
// superseded so automatic delivery goes on with a fresh attempt and
// generation. A repair that would change nothing appends nothing.
type RepairBinding struct {
	engine.Answers[BindingRepair]

	ThreadID       string
	AutomationID   string
	BridgeThreadID string // optional pin
}

// BindingRepair is RepairBinding's value.
type BindingRepair struct {
	BindingID            string
	ReplacedAutomation   bool
	PreviousAutomationID string
	OldQuiesced          bool
	ForcedFreshAttempt   bool
	SupersededAttemptID  string
}

// Decide implements engine.Decider.
func (c RepairBinding) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := command.CheckID("source thread id", c.ThreadID); err != nil {
		return engine.Decision{}, err
	}
	if c.AutomationID != "" {
		if err := command.CheckID("caller automation id", c.AutomationID); err != nil {
			return engine.Decision{}, err
		}
	}
	if c.BridgeThreadID != "" {
		if err := command.CheckID("bridge thread id", c.BridgeThreadID); err != nil {
			return engine.Decision{}, err
		}
	}
	inst, err := requireInstallation(v)
	if err != nil {
		return engine.Decision{}, err
	}
	for _, r := range automationHolders(v, c.AutomationID) {
		s, err := v.State(events.KindBinding, r.ID)
		if err != nil {
			return engine.Decision{}, err
		}
		if o, ok := s.(*aggregate.Binding); ok && o.SourceThreadID != c.ThreadID {
			return engine.Decision{}, errs.New(errs.EEXIST, "caller automation %s is bound to thread %s (unbind it there first)", c.AutomationID, o.SourceThreadID)
		}
	}
	b, err := command.BindingOf(v, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	res := BindingRepair{OldQuiesced: true}
	id := v.NewID()
	if b != nil {
		id = b.ID
		if b.State == fsm.BindingBound && b.CallerAutomationID == c.AutomationID && b.BridgeThreadID == c.BridgeThreadID && b.Mirror == inst.Capabilities {
			res.BindingID = b.ID
			return c.Answer(engine.Decision{Outcome: command.OutcomeUnchanged}, res), nil
		}
		res.ReplacedAutomation = b.CallerAutomationID != c.AutomationID
		if res.ReplacedAutomation {
			res.PreviousAutomationID = b.CallerAutomationID
		}
		res.OldQuiesced = !b.Unquiesced()
	}
	res.BindingID = id
	emits := []engine.Emit{{Stream: command.BindingStream(id), Payload: &events.BindingBound{SourceThreadID: c.ThreadID,
		CallerAutomationID: c.AutomationID, BridgeThreadID: c.BridgeThreadID, Mirror: inst.Capabilities,
		ReplacedAutomation: res.ReplacedAutomation, PreviousAutomationID: res.PreviousAutomationID, OldQuiesced: res.OldQuiesced}}}
	if res.ReplacedAutomation || !res.OldQuiesced {
		res.ForcedFreshAttempt = true
		a, err := command.LiveAttempt(v, c.ThreadID)
		if err != nil {
			return engine.Decision{}, err
		}
		if a != nil {
			res.SupersededAttemptID = a.ID
			emits = append(emits, engine.Emit{Stream: command.AttemptStream(a.ID), Payload: &events.AttemptSuperseded{
				Reason: "binding repaired: the caller automation was replaced or its armed generation is not proven quiesced"}})
		}
	}
	return c.Answer(engine.Decision{Outcome: command.OutcomeBound, Emits: emits}, res), nil
}

// automationHolders are the bindings holding caller automation id: none
// for "" (a binding for the queue transport names no automation).
func automationHolders(v engine.Reader, id string) []index.Ref {
	if id == "" {
		return nil
	}
	return v.Lookup(index.BindingByAutomation, id)
}

// UnbindBinding is `cbth desktop binding unbind`. The thread may go on
// submitting jobs; it is never armed again until bound. Its live attempt
// is abandoned, so a late wake of it is stale. DeleteAutomation records
// whether the operator deletes the caller automation (cbth cannot).
type UnbindBinding struct {
	engine.Answers[string]

	ThreadID         string
	DeleteAutomation bool
}

// Decide implements engine.Decider.
func (c UnbindBinding) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := command.CheckID("source thread id", c.ThreadID); err != nil {
		return engine.Decision{}, err
	}
	b, err := command.BindingOf(v, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	if b == nil {
		return engine.Decision{}, errs.New(errs.ENOENT, "thread %s has no Desktop binding", c.ThreadID)
	}
	if b.State == fsm.BindingUnbound {
		return c.Answer(engine.Decision{Outcome: command.OutcomeAlreadyUnbound}, b.ID), nil
	}
	emits := []engine.Emit{{Stream: command.BindingStream(b.ID), Payload: &events.BindingUnbound{DeleteAutomation: c.DeleteAutomation}}}
	ab, _, err := command.AbandonLive(v, c.ThreadID, "binding unbound")
	if err != nil {
		return engine.Decision{}, err
	}
	return c.Answer(engine.Decision{Outcome: command.OutcomeUnbound, Emits: append(emits, ab...)}, b.ID), nil
}

// ---- the Desktop gate ----

// DesktopReadiness is the Desktop gate's answer for one head batch.
type DesktopReadiness struct {
	OK bool
	// Park says the batch can never take the automatic caller path (it
	// needs an artifact read, or its delivery policy is not read-only
	// and low-risk): it goes to manual resolution.
	Park   bool
	Reason string
	// Wake is when the answer may change without a new event, if known.
	Wake         time.Time
	Binding      *aggregate.Binding
	Installation *aggregate.Installation
}

// LowRisk reports whether a delivery policy is read-only and low-risk:
// no approval, network or write access needed. Desktop v1 continues only
// such batches automatically.
func LowRisk(p events.DeliveryPolicy) bool {
	return p.ReadOnly && !p.RequiresApproval && !p.RequiresNetwork && !p.RequiresWriteAccess
}

// DesktopGate decides whether a Desktop head batch may be prepared and
// offered to the bridge now, beyond the core's own rules (Eligible):
// the thread bound, to the bridge the installation publishes for, its
// mirror current, the installation's read and writeback capabilities
// validated under the fingerprint the running cbth observes
// (observedFingerprint), the previous armed generation quiesced, no
// pause deadline overdue. It reads only.
func DesktopGate(v engine.Reader, now time.Time, b *aggregate.Batch, observedFingerprint string) (DesktopReadiness, error) {
	inst, err := command.Installation(v)
	if err != nil {
		return DesktopReadiness{}, err
	}
	bd, err := command.BindingOf(v, b.SourceThreadID)
	if err != nil {
		return DesktopReadiness{}, err
	}
	return DesktopGateOf(now, b, bd, inst, observedFingerprint), nil
}

// DesktopGateOf is DesktopGate on states already read: the thread's
// binding and the installation (either nil when absent).
func DesktopGateOf(now time.Time, b *aggregate.Batch, bd *aggregate.Binding, inst *aggregate.Installation, observedFingerprint string) DesktopReadiness {
	r := DesktopReadiness{Binding: bd, Installation: inst}
	if reason, park := parkReason(b); reason != "" {
		r.Reason, r.Park = reason, park
		return r
	}
	no := func(reason string) DesktopReadiness { r.Reason = reason; return r }
	switch {
	case inst == nil:
		return no("no Desktop installation state (cbth desktop installation-state repair)")
	case bd == nil || bd.State == fsm.BindingUnbound:
		return no("thread not bound to a caller automation (cbth desktop binding repair)")
	case bd.State == fsm.BindingDegraded:
		return no("binding degraded: " + bd.DegradedReason)
	case inst.WritebackTransport() == WritebackQueue:
		return no("the writeback transport in use is queue: cbth hands the head to Codex's queue itself, never to a heartbeat")
	case bd.CallerAutomationID == "":
		return no("the binding names no caller automation, so no heartbeat can carry it (cbth desktop binding repair --caller-automation-id)")
	case inst.BridgeThreadID == "":
		return no("no bridge thread has run bridge-preflight through the daemon yet")
	case !ServesBridge(bd, inst.BridgeThreadID):
		return no("binding pinned to bridge thread " + bd.BridgeThreadID + "; snapshots are published for " + inst.BridgeThreadID)
	case !MirrorMatches(bd, inst):
		return no("binding mirror does not match the installation state (cbth desktop binding repair)")
	case inst.ReadTransportCapability != events.CapValidated:
		return no("read_transport_capability is " + inst.ReadTransportCapability)
	case !inst.WritebackValidated():
		return no("no writeback transport is validated (writeback_capability is " + inst.WritebackCapability + "; mcp: cbth desktop validate-mcp; queue: cbth desktop validate-queue)")
	case observedFingerprint != inst.ValidationFingerprint:
		return no("the running cbth's validation fingerprint differs from the validated one (cbth desktop installation-state repair)")
	case bd.Unquiesced():
		return no("armed generation " + itoa(bd.ArmedGeneration) + " not yet proven quiesced")
	case !bd.PauseDeadline.IsZero() && !now.Before(bd.PauseDeadline):
		return no("pause_deadline passed")
	}
	r.OK = true
	if !bd.PauseDeadline.IsZero() {
		r.Wake = bd.PauseDeadline
	}
	return r
}

// parkReason says why a batch can never take the automatic Desktop path,
// whatever the transport (park true), or "" when it can.
func parkReason(b *aggregate.Batch) (reason string, park bool) {
	switch {
	case b.RequiresArtifactRead:
		return "requires_artifact_read: the batch needs an artifact read, which Desktop v1 leaves to the operator (cbth batch inspect)", true
	case !LowRisk(b.Policy):
		return "delivery policy is not read-only and low-risk: Desktop v1 leaves the batch to the operator", true
	}
	return "", false
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
