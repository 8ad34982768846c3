package fsm

import (
	"github.com/cbth-dev/cbth/events"
)

// CursorState is the state of a fair-ready cursor (spec/fsm.md).
type CursorState string

// The states of a fair-ready cursor.
const (
	CursorActive CursorState = "active"
)

// The cursor is not one of the seed's aggregates but its durable
// fair-ready cursor: one per target scope, only ever advanced.
var cursorTable = table[CursorState]{
	Kind:   events.KindCursor,
	States: []CursorState{CursorActive},
	Moves: []move[CursorState]{
		{events.TypeCursorAdvanced, []CursorState{None}, CursorActive},
	},
	Updates: []update[CursorState]{
		{events.TypeCursorAdvanced, []CursorState{CursorActive}},
	},
}.Table()
