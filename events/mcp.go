package events

import "time"

// ---- the agent's MCP tools (spec/mcp.md) ----

// KindMCP is the stream of one Codex thread's calls of cbth's MCP tools,
// by the calling thread's id: what the agent in that thread did through
// cbth, or tried to do and was refused.
const KindMCP Kind = "mcp"

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
}

// EventType implements Payload.
func (MCPToolCalled) EventType() string { return "mcp.tool_called" }

// InstallationMCPValidationRequested opens a live validation of the MCP
// writeback transport (`cbth desktop validate-mcp`): the token a Desktop
// thread's call of desktop_validate_mcp must bring back before ExpiresAt.
type InstallationMCPValidationRequested struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// EventType implements Payload.
func (InstallationMCPValidationRequested) EventType() string {
	return "installation.mcp_validation_requested"
}

// InstallationMCPWritebackValidated records the proof that Codex Desktop
// runs cbth's MCP server in its threads and lets them call its tools: a
// call of desktop_validate_mcp, with the requested token, from the thread
// Codex named. It validates the mcp writeback transport for the cbth
// whose fingerprint it names, and changes no other capability.
type InstallationMCPWritebackValidated struct {
	ThreadID    string `json:"thread_id"`
	SandboxMode string `json:"sandbox_mode,omitempty"`
	Fingerprint string `json:"validation_fingerprint"`
	Token       string `json:"token"`
}

// EventType implements Payload.
func (InstallationMCPWritebackValidated) EventType() string {
	return "installation.mcp_writeback_validated"
}
