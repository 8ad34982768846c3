package fsm

import (
	"github.com/cbth-dev/cbth/events"
)

// ThreadState is the state of what the user decided for a Codex thread
// (spec/fsm.md).
type ThreadState string

// The states of a thread's trust.
const (
	ThreadTrusted   ThreadState = "trusted"
	ThreadUntrusted ThreadState = "untrusted"
)

// A thread's trust: given (and changed) by the user, and taken back, as
// often as the user likes; the home's setting applies while untrusted.
var threadTable = table[ThreadState]{
	Kind:   events.KindThread,
	States: []ThreadState{ThreadTrusted, ThreadUntrusted},
	Moves: []move[ThreadState]{
		{events.TypeThreadTrusted, []ThreadState{None, ThreadUntrusted}, ThreadTrusted},
		{events.TypeThreadUntrusted, []ThreadState{ThreadTrusted}, ThreadUntrusted},
	},
	Updates: []update[ThreadState]{
		{events.TypeThreadTrusted, []ThreadState{ThreadTrusted}},
	},
}.Table()
