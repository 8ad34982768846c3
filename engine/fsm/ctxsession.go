package fsm

import (
	"github.com/cbth-dev/cbth/events"
)

// CtxSessionState is the state of a CortexFS session (spec/fsm.md).
type CtxSessionState string

// The states of a CortexFS session.
const (
	CtxSessionActive CtxSessionState = "active"
	CtxSessionIdle   CtxSessionState = "idle"
	CtxSessionDone   CtxSessionState = "done"
	CtxSessionError  CtxSessionState = "error"
)

var ctxSessionTable = table[CtxSessionState]{
	Kind:   events.KindCtxSession,
	States: []CtxSessionState{CtxSessionActive, CtxSessionIdle, CtxSessionDone, CtxSessionError},
	Moves: []move[CtxSessionState]{
		{events.TypeCtxSessionOpened, []CtxSessionState{None}, CtxSessionActive},
		{stateChanged(CtxSessionIdle), []CtxSessionState{CtxSessionActive}, CtxSessionIdle},
		{stateChanged(CtxSessionDone), []CtxSessionState{CtxSessionActive, CtxSessionIdle}, CtxSessionDone},
		{stateChanged(CtxSessionError), []CtxSessionState{CtxSessionActive, CtxSessionIdle}, CtxSessionError},
		{stateChanged(CtxSessionActive), []CtxSessionState{CtxSessionIdle, CtxSessionDone, CtxSessionError}, CtxSessionActive},
	},
	Updates: []update[CtxSessionState]{
		{events.TypeCtxSessionMessage, []CtxSessionState{CtxSessionActive, CtxSessionIdle}},
		{events.TypeCtxSessionEvent, []CtxSessionState{CtxSessionActive, CtxSessionIdle, CtxSessionDone, CtxSessionError}},
	},
}.Table()
