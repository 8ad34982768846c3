package aggregate

import (
	"slices"
	"time"

	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
)

// Binding binds a Desktop source thread to its caller heartbeat automation.
// BridgeThreadID, when set, pins it to one bridge thread; empty, it is
// served by whichever bridge the installation publishes for.
type Binding struct {
	Header[fsm.BindingState]
	SourceThreadID            string              `json:"source_thread_id"`
	CallerAutomationID        string              `json:"caller_automation_id"`
	BridgeThreadID            string              `json:"bridge_thread_id,omitempty"`
	Mirror                    events.Capabilities `json:"mirror"`
	ArmedGeneration           uint64              `json:"armed_generation,omitempty"`
	ArmedGenerationQuiesced   time.Time           `json:"armed_generation_quiesced_at,omitzero"`
	PauseNotBefore            time.Time           `json:"pause_not_before,omitzero"`
	PauseDeadline             time.Time           `json:"pause_deadline,omitzero"`
	DegradedReason            string              `json:"degraded_reason,omitempty"`
	LastVerifiedAt            time.Time           `json:"last_verified_at,omitzero"`
	AutomationDeletedOnUnbind bool                `json:"automation_deleted_on_unbind,omitempty"`
	// RelayMarkers are the pause-proof relay markers issued for the
	// binding and not yet expired when the last one was issued.
	RelayMarkers []RelayMarker `json:"relay_markers,omitempty"`
}

func (b *Binding) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.BindingBound:
		b.SourceThreadID, b.CallerAutomationID, b.BridgeThreadID = p.SourceThreadID, p.CallerAutomationID, p.BridgeThreadID
		b.Mirror, b.DegradedReason, b.LastVerifiedAt = p.Mirror, "", e.RecordedAt
		b.AutomationDeletedOnUnbind = false
		// The repairing operator takes the pause over: a deadline that
		// passed would degrade the repaired binding at once. The armed
		// generation still needs its pause proven before a fresh arm.
		b.PauseDeadline = time.Time{}
		if p.ReplacedAutomation {
			// The armed generation belonged to the old automation, whose
			// late wakes can only hit superseded generations: the new one
			// starts unarmed.
			b.ArmedGeneration, b.ArmedGenerationQuiesced = 0, time.Time{}
			b.PauseNotBefore, b.PauseDeadline = time.Time{}, time.Time{}
		}
	case *events.BindingArmed:
		b.ArmedGeneration, b.ArmedGenerationQuiesced = p.Generation, time.Time{}
		b.PauseNotBefore, b.PauseDeadline = p.PauseNotBefore, p.PauseDeadline
	case *events.BindingQuiesced:
		if p.Generation == b.ArmedGeneration {
			b.ArmedGenerationQuiesced = e.RecordedAt
			b.PauseNotBefore, b.PauseDeadline = time.Time{}, time.Time{}
		}
	case *events.BindingDegraded:
		b.DegradedReason = p.Reason
	case *events.BindingUnbound:
		b.AutomationDeletedOnUnbind = p.DeleteAutomation
	case *events.BindingRelayMarkerIssued:
		// Expired markers can never be consumed: drop them, so a
		// long-lived binding keeps at most a relay_marker_ttl's worth.
		b.RelayMarkers = slices.DeleteFunc(b.RelayMarkers, func(m RelayMarker) bool { return !e.RecordedAt.Before(m.ExpiresAt) })
		b.RelayMarkers = append(b.RelayMarkers, RelayMarker{Marker: p.Marker, Kind: p.Kind, BridgeThreadID: p.BridgeThreadID,
			BridgeRequestID: p.BridgeRequestID, IssuedAt: e.RecordedAt, ExpiresAt: p.ExpiresAt, Generation: p.Generation, AttemptID: p.AttemptID})
	case *events.BindingRelayConsumed:
		if m := b.Marker(p.Marker); m != nil {
			m.ConsumedSHA256, m.ConsumedAt = p.EnvelopeSHA256, e.RecordedAt
		}
	}
}

// Unquiesced reports whether the binding's caller heartbeat was armed for
// a generation that is not yet proven paused, deleted or quiesced.
func (b *Binding) Unquiesced() bool {
	return b.ArmedGeneration > 0 && b.ArmedGenerationQuiesced.IsZero()
}

// Deadlines implements Deadliner.
func (b *Binding) Deadlines() []Deadline {
	if b.State == fsm.BindingBound && !b.PauseDeadline.IsZero() {
		return []Deadline{{index.DueBindingPause, b.PauseDeadline}}
	}
	return nil
}

// Indexes implements Indexer: every binding by its thread; a bound or
// degraded one by its caller automation (an automation serves one thread);
// one whose armed generation is not yet quiesced by its pause_not_before,
// for the pause-due snapshot.
func (b *Binding) Indexes() []IndexEntry {
	out := []IndexEntry{{index.BindingByThread, b.SourceThreadID}}
	if b.State == fsm.BindingBound || b.State == fsm.BindingDegraded {
		if b.CallerAutomationID != "" { // a binding for the queue transport names none
			out = append(out, IndexEntry{index.BindingByAutomation, b.CallerAutomationID})
		}
		if b.Unquiesced() {
			out = append(out, IndexEntry{index.BindingUnquiesced, index.Time(b.PauseNotBefore)})
		}
	}
	for _, m := range b.RelayMarkers {
		out = append(out, IndexEntry{index.BindingRelayMarker, m.Marker})
	}
	return out
}
