package fsm

import (
	"github.com/cbth-dev/cbth/events"
)

// CtxTreeState is the state of a CortexFS object tree (spec/fsm.md).
type CtxTreeState string

// The states of a CortexFS object tree.
const (
	CtxTreeActive CtxTreeState = "active"
)

// A CortexFS tree: its objects and aliases are registrations; the files
// under the root are their projection.
var ctxTreeTable = table[CtxTreeState]{
	Kind:   events.KindCtxTree,
	States: []CtxTreeState{CtxTreeActive},
	Moves: []move[CtxTreeState]{
		{events.TypeCtxTreeInitialized, []CtxTreeState{None}, CtxTreeActive},
	},
	Updates: []update[CtxTreeState]{
		{events.TypeCtxTreeInitialized, []CtxTreeState{CtxTreeActive}},
		{events.TypeCtxTreeObjectPut, []CtxTreeState{CtxTreeActive}},
		{events.TypeCtxTreeObjectRemoved, []CtxTreeState{CtxTreeActive}},
		{events.TypeCtxTreeAliasPut, []CtxTreeState{CtxTreeActive}},
		{events.TypeCtxTreeAliasRemoved, []CtxTreeState{CtxTreeActive}},
	},
}.Table()
