package fsm

import (
	"github.com/cbth-dev/cbth/events"
)

// MCPState is the state of a Codex thread's MCP calls (spec/fsm.md).
type MCPState string

// The states of a Codex thread's MCP calls.
const (
	MCPActive MCPState = "active"
)

// The MCP calls of one Codex thread are an audit stream, not one of the
// seed's aggregates: every call is recorded, none changes its state.
var mcpTable = table[MCPState]{
	Kind:   events.KindMCP,
	States: []MCPState{MCPActive},
	Moves: []move[MCPState]{
		{events.TypeMCPToolCalled, []MCPState{None}, MCPActive},
	},
	Updates: []update[MCPState]{
		{events.TypeMCPToolCalled, []MCPState{MCPActive}},
	},
}.Table()
