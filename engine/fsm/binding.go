package fsm

import (
	"github.com/cbth-dev/cbth/events"
)

// BindingState is the state of a Desktop binding (spec/fsm.md).
type BindingState string

// The states of a Desktop binding.
const (
	BindingUnbound  BindingState = "unbound"
	BindingBound    BindingState = "bound"
	BindingDegraded BindingState = "degraded"
)

var bindingTable = table[BindingState]{
	Kind:   events.KindBinding,
	States: []BindingState{BindingUnbound, BindingBound, BindingDegraded},
	Moves: []move[BindingState]{
		{events.TypeBindingBound, []BindingState{None, BindingUnbound, BindingDegraded}, BindingBound},
		{events.TypeBindingDegraded, []BindingState{BindingBound}, BindingDegraded},
		{events.TypeBindingUnbound, []BindingState{BindingBound, BindingDegraded}, BindingUnbound},
	},
	Updates: []update[BindingState]{
		{events.TypeBindingBound, []BindingState{BindingBound}}, // operator repair of a bound thread
		{events.TypeBindingArmed, []BindingState{BindingBound}},
		{events.TypeBindingQuiesced, []BindingState{BindingBound, BindingDegraded}},
		// Pause-proof relay markers: a degraded binding's armed
		// generation may still be proven paused (note-paused).
		{events.TypeBindingRelayMarkerIssued, []BindingState{BindingBound, BindingDegraded}},
		{events.TypeBindingRelayConsumed, []BindingState{BindingBound, BindingDegraded}},
	},
}.Table()
