package aggregate

import (
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
)

// MCPThread counts one Codex thread's calls of cbth's MCP tools; the
// calls themselves are its events.
type MCPThread struct {
	Header[fsm.MCPState]
	Accepted int    `json:"accepted"`
	Refused  int    `json:"refused"`
	LastTool string `json:"last_tool"`
}

func (m *MCPThread) mutate(e *events.Envelope, p events.Payload) {
	if p, ok := p.(*events.MCPToolCalled); ok {
		if p.Outcome == events.MCPRefused {
			m.Refused++
		} else {
			m.Accepted++
		}
		m.LastTool = p.Tool
	}
}
