package aggregate

import (
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
)

// AppServer is one instance of the shared Codex app-server.
type AppServer struct {
	Header[fsm.AppServerState]
	events.AppServerStarted
	ExitReason string `json:"exit_reason,omitempty"`
	ExitStatus string `json:"exit_status,omitempty"`
}

func (a *AppServer) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.AppServerStarted:
		a.AppServerStarted = *p
	case *events.AppServerExited:
		a.ExitReason, a.ExitStatus = p.Reason, p.Status
	}
}

// Indexes implements Indexer: the running instance of each transport, at
// most one ("" the shared app-server, codex_daemon the user's daemon).
func (a *AppServer) Indexes() []IndexEntry {
	if a.State == fsm.AppServerRunning {
		return []IndexEntry{{index.AppServerRunning, a.Transport}}
	}
	return nil
}
