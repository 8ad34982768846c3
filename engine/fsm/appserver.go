package fsm

import (
	"github.com/cbth-dev/cbth/events"
)

// AppServerState is the state of an instance of the shared Codex app-server (spec/fsm.md).
type AppServerState string

// The states of an instance of the shared Codex app-server.
const (
	AppServerRunning AppServerState = "running"
	AppServerExited  AppServerState = "exited"
)

// One instance of the shared Codex app-server: started, then exited.
var appServerTable = table[AppServerState]{
	Kind:   events.KindAppServer,
	States: []AppServerState{AppServerRunning, AppServerExited},
	Moves: []move[AppServerState]{
		{events.TypeAppServerStarted, []AppServerState{None}, AppServerRunning},
		{events.TypeAppServerExited, []AppServerState{AppServerRunning}, AppServerExited},
	},
}.Table()
