package aggregate

import (
	"strconv"
	"time"

	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
)

// The Desktop predicates over states: pure functions of a batch, a
// binding and the installation, read by the Desktop deciders
// (engine/command/desktop) and by the snapshot builder
// (projections/snapshot) alike, so the read model applies the same rules
// without importing the deciders.

// MirrorMatches reports whether the binding's mirror is the
// installation's current transport, generation and fingerprint: the
// installation-wide state the binding was made under is still the one in
// force.
func (b *Binding) MirrorMatches(inst *Installation) bool {
	m, c := b.Mirror, inst.Capabilities
	return m.ReadTransport == c.ReadTransport && m.ReadTransportGeneration == c.ReadTransportGeneration &&
		m.ValidationFingerprint == c.ValidationFingerprint
}

// ServesBridge reports whether the binding is served by the bridge thread
// the installation publishes for: it is not pinned to another one.
func (b *Binding) ServesBridge(bridge string) bool {
	return bridge != "" && (b.BridgeThreadID == "" || b.BridgeThreadID == bridge)
}

// AutomaticContinuation reports whether results may continue into
// Desktop threads without an operator: reads validated, a writeback
// transport validated, and both under the fingerprint the running cbth
// observes.
func (i *Installation) AutomaticContinuation(observedFingerprint string) bool {
	return i.ReadTransportCapability == events.CapValidated && i.WritebackValidated() && observedFingerprint == i.ValidationFingerprint
}

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
	Binding      *Binding
	Installation *Installation
}

// DesktopGate decides, on states already read, whether a Desktop head
// batch b may be prepared and offered to the bridge at now: the thread's
// binding bd and the installation inst (either nil when absent), and the
// validation fingerprint the running cbth observes. The deciders read
// the states and call it (desktop.DesktopGate); the snapshot builder
// calls it on the states it holds.
func DesktopGate(now time.Time, b *Batch, bd *Binding, inst *Installation, observedFingerprint string) DesktopReadiness {
	r := DesktopReadiness{Binding: bd, Installation: inst}
	if reason, park := DesktopParkReason(b); reason != "" {
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
	case !bd.ServesBridge(inst.BridgeThreadID):
		return no("binding pinned to bridge thread " + bd.BridgeThreadID + "; snapshots are published for " + inst.BridgeThreadID)
	case !bd.MirrorMatches(inst):
		return no("binding mirror does not match the installation state (cbth desktop binding repair)")
	case inst.ReadTransportCapability != events.CapValidated:
		return no("read_transport_capability is " + inst.ReadTransportCapability)
	case !inst.WritebackValidated():
		return no("no writeback transport is validated (writeback_capability is " + inst.WritebackCapability + "; mcp: cbth desktop validate-mcp; queue: cbth desktop validate-queue)")
	case observedFingerprint != inst.ValidationFingerprint:
		return no("the running cbth's validation fingerprint differs from the validated one (cbth desktop installation-state repair)")
	case bd.Unquiesced():
		return no("armed generation " + strconv.FormatUint(bd.ArmedGeneration, 10) + " not yet proven quiesced")
	case !bd.PauseDeadline.IsZero() && !now.Before(bd.PauseDeadline):
		return no("pause_deadline passed")
	}
	r.OK = true
	if !bd.PauseDeadline.IsZero() {
		r.Wake = bd.PauseDeadline
	}
	return r
}

// DesktopParkReason says why a batch can never take an automatic Desktop
// path, whatever the transport (park true), or "" when it can.
func DesktopParkReason(b *Batch) (reason string, park bool) {
	switch {
	case b.RequiresArtifactRead:
		return "requires_artifact_read: the batch needs an artifact read, which Desktop v1 leaves to the operator (cbth batch inspect)", true
	case !b.Policy.LowRisk():
		return "delivery policy is not read-only and low-risk: Desktop v1 leaves the batch to the operator", true
	}
	return "", false
}
