package events

// ---- the agent's MCP tools (spec/mcp.md) ----

// KindMCP is the stream of one Codex thread's calls of cbth's MCP tools,
// by the calling thread's id: what the agent in that thread did through
// cbth, or tried to do and was refused.
const KindMCP Kind = "mcp"

// mcpEvents declares the mcp events (see declarations).
func mcpEvents() []declaration {
	return []declaration{
		decl[MCPToolCalled](KindMCP),
	}
}

// The outcomes of an MCP tool call.
const (
	MCPAccepted = "accepted"
	MCPRefused  = "refused"
)

// MCPToolCalled records one call of a tool that acts (job_submit,
// task_run, job_cancel), accepted or refused, and any call refused by
// policy. The thread is the one Codex named in the call's metadata, never
// one the model wrote. It holds no output text: a task's output is the
// task's own record.
type MCPToolCalled struct {
	Tool        string `json:"tool"`
	TurnID      string `json:"turn_id,omitempty"`
	SandboxMode string `json:"sandbox_mode,omitempty"`
	Outcome     string `json:"outcome"`
	// Code is the stable error code of a refusal.
	Code   string `json:"code,omitempty"`
	JobID  string `json:"job_id,omitempty"`
	TaskID string `json:"task_id,omitempty"`
	// Argv is a task_run's command as the model asked for it: on a
	// refusal it is what the operator would write a rule for.
	Argv []string `json:"argv,omitempty"`
	// Task is the named task ([mcp.tasks.NAME]) a task_run asked for.
	Task string `json:"task,omitempty"`
}

const TypeMCPToolCalled = "mcp.tool_called"

func (MCPToolCalled) EventType() string { return TypeMCPToolCalled }
