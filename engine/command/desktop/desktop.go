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
		b, err := engine.Binding(v, r.ID)
		if err != nil {
			return engine.Decision{}, err
		}
		if b == nil || b.State != fsm.BindingBound || b.MirrorMatches(&next) {
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
		o, err := engine.Binding(v, r.ID)
		if err != nil {
			return engine.Decision{}, err
		}
		if o != nil && o.SourceThreadID != c.ThreadID {
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

// DesktopGate decides whether a Desktop head batch may be prepared and
// offered to the bridge now, beyond the core's own rules (Eligible):
// the thread bound, to the bridge the installation publishes for, its
// mirror current, the installation's read and writeback capabilities
// validated under the fingerprint the running cbth observes
// (observedFingerprint), the previous armed generation quiesced, no
// pause deadline overdue. It reads only.
func DesktopGate(v engine.Reader, now time.Time, b *aggregate.Batch, observedFingerprint string) (aggregate.DesktopReadiness, error) {
	inst, err := command.Installation(v)
	if err != nil {
		return aggregate.DesktopReadiness{}, err
	}
	bd, err := command.BindingOf(v, b.SourceThreadID)
	if err != nil {
		return aggregate.DesktopReadiness{}, err
	}
	return aggregate.DesktopGate(now, b, bd, inst, observedFingerprint), nil
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
