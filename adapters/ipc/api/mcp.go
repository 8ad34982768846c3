package api

import (
	"net/url"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The agent's MCP tools (spec/mcp.md): `cbth mcp serve` relays each
// tools/call with the calling thread Codex named in its metadata. The
// daemon decides: which target, whether a task is allowed, whether a job
// is the caller's.
var (
	MCPJobSubmit = Op[MCPSubmitArgs, MCPSubmitReply]{Name: "mcp.job_submit"}
	MCPTaskRun   = Op[MCPTaskRunArgs, MCPTaskRunReply]{Name: "mcp.task_run"}
	MCPJobStatus = Op[MCPJobArgs, query.JobView]{Name: "mcp.job_status"}
	MCPJobList   = Op[MCPJobListArgs, query.JobPage]{Name: "mcp.job_list"}
	MCPJobCancel = Op[MCPJobArgs, TransitionReply]{Name: "mcp.job_cancel"}

	// Watchers (spec/mcp.md): watch_start is task_run's command run as a
	// watcher, under the same rules; watch_stop stops one of the calling
	// thread's tasks; task_output reads one's output, appending nothing.
	MCPWatchStart = Op[MCPTaskRunArgs, MCPTaskRunReply]{Name: "mcp.watch_start"}
	MCPWatchStop  = Op[MCPTaskArgs, TaskCancelReply]{Name: "mcp.watch_stop"}
	MCPTaskOutput = Op[MCPTaskOutputArgs, TaskOutputReply]{Name: "mcp.task_output"}
)

// MCPTaskArgs name one task of the calling thread.
type MCPTaskArgs struct {
	Caller MCPCaller `json:"caller"`
	TaskID string    `json:"task_id"`
}

// MCPTaskOutputArgs are mcp.task_output's request.
type MCPTaskOutputArgs struct {
	Caller MCPCaller `json:"caller"`
	TaskOutputArgs
}

// MCPCaller is who makes a tool call, as Codex put it in the call's
// _meta: never an argument the model wrote.
type MCPCaller struct {
	ThreadID string `json:"thread_id"`
	// NamedThread is a thread the model wrote into the arguments: the
	// daemon refuses the call (thread_mismatch) unless it is ThreadID.
	NamedThread string `json:"named_thread,omitempty"`
	TurnID      string `json:"turn_id,omitempty"`
	CallID      string `json:"call_id,omitempty"`
	SandboxMode string `json:"sandbox_mode,omitempty"`
}

// Check refuses a call that does not say which thread made it.
func (c MCPCaller) Check() error {
	if strings.TrimSpace(c.ThreadID) == "" {
		return errs.New(errs.ThreadUnidentified, "the call names no calling thread (Codex puts it in the tools/call _meta)")
	}
	return nil
}

// Meta is the metadata of what the agent's call appends.
func (c MCPCaller) Meta() engine.Meta {
	return engine.Meta{Actor: events.ActorAgent, CorrelationID: "mcp:" + c.ThreadID}
}

// MCPKeyPrefix starts every key the MCP tools make for the engine's
// idempotency (a job_submit's dedupe key, a task_run's command id): a
// client's own dedupe key may not, so the two never meet
// (CheckClientDedupeKey).
const MCPKeyPrefix = "mcp/"

// MCPKey is an idempotency key of the MCP tools, scoped by parts (the
// calling thread first). Each part is escaped so that "/" appears only
// between parts: two threads' keys never meet, whatever their ids and
// the model's key hold.
func MCPKey(parts ...string) string {
	esc := make([]string, len(parts))
	for i, p := range parts {
		esc[i] = url.PathEscape(p)
	}
	return MCPKeyPrefix + strings.Join(esc, "/")
}

// CheckClientDedupeKey refuses a dedupe key given by any client but the
// MCP tools that would fall in their namespace.
func CheckClientDedupeKey(key string) error {
	if strings.HasPrefix(key, MCPKeyPrefix) {
		return errs.New(errs.EINVAL, "dedupe key %q starts with %q, which is reserved for the agent's MCP tools; choose another", key, MCPKeyPrefix)
	}
	return nil
}

// Record is the record of the call of tool, for the calling thread's mcp
// stream.
func (c MCPCaller) Record(tool string) events.MCPToolCalled {
	return events.MCPToolCalled{Tool: tool, TurnID: c.TurnID, SandboxMode: c.SandboxMode}
}

// MCPSubmitArgs are mcp.job_submit's request.
type MCPSubmitArgs struct {
	Caller         MCPCaller           `json:"caller"`
	TaskKind       string              `json:"task_kind"`
	Summary        string              `json:"summary"`
	IdempotencyKey string              `json:"idempotency_key,omitempty"`
	Policy         command.PolicyFlags `json:"delivery_policy"`
}

// MCPDelivery says when a result for the calling thread will arrive.
type MCPDelivery struct {
	// When is "when_idle" (the thread can take it: a new turn as soon as
	// the work is done and the thread idle), "held_until_trusted" (the
	// thread's permissions are more than cbth starts a turn with unasked:
	// the user's `cbth thread trust` lets it go), "when_opened" (once the
	// thread is open in Codex again, or under `cbth cli run
	// --bind-thread-id`), "next_heartbeat" (a Desktop thread: through
	// its bound heartbeats) or "through_codex_queue" (a Desktop thread of
	// an installation on the queue transport: handed to Codex's queue,
	// run when Codex Desktop next drains it).
	When string `json:"when"`
	// Hint is the same for people (and models), with the command to run
	// where one is needed.
	Hint string `json:"hint"`
}

// The values of MCPDelivery.When.
const (
	DeliverWhenIdle      = "when_idle"
	DeliverHeldForTrust  = "held_until_trusted"
	DeliverWhenOpened    = "when_opened"
	DeliverNextHeartbeat = "next_heartbeat"
	DeliverThroughQueue  = "through_codex_queue"
)

// MCPSubmitReply is mcp.job_submit's reply.
type MCPSubmitReply struct {
	JobID        string         `json:"job_id"`
	State        fsm.JobState   `json:"status"`
	TargetKind   command.Target `json:"target_kind"`
	ThreadID     string         `json:"source_thread_id"`
	Deduplicated bool           `json:"deduplicated"`
	Delivery     MCPDelivery    `json:"delivery"`
}

// MCPTaskRunArgs are mcp.task_run's request. Path is argv[0] resolved on
// the MCP server's PATH, Cwd its working directory (the thread's), Env
// its environment: kept in the daemon's memory, never in the log. Task
// names the named task the model asked for; Argv is then that task's
// command and the extra arguments the model gave, which the daemon
// checks against the task as it reads it.
type MCPTaskRunArgs struct {
	Caller    MCPCaller `json:"caller"`
	Task      string    `json:"task,omitempty"`
	Argv      []string  `json:"argv"`
	Path      string    `json:"path"`
	Cwd       string    `json:"cwd"`
	Env       []string  `json:"env"`
	Summary   string    `json:"summary"`
	TimeoutMS int64     `json:"timeout_ms,omitempty"`
	// WakeOn are watch_start's patterns (task_run takes none).
	WakeOn []string `json:"wake_on,omitempty"`
}

// MCPTaskRunReply is mcp.task_run's reply.
type MCPTaskRunReply struct {
	TaskID     string         `json:"task_id"`
	JobID      string         `json:"job_id"`
	State      fsm.TaskState  `json:"state"`
	TargetKind command.Target `json:"target_kind"`
	ThreadID   string         `json:"source_thread_id"`
	Argv       []string       `json:"argv"`
	// Rule is the rule that allowed the command, as written in
	// task_allow (a named task: its command), and Task the named task.
	Rule     []string    `json:"allowed_by"`
	Task     string      `json:"task,omitempty"`
	Delivery MCPDelivery `json:"delivery"`
	// Watch is a watcher's settings (watch_start).
	Watch *WakeArgs `json:"watch,omitempty"`
}

// MCPJobArgs name one job of the calling thread.
type MCPJobArgs struct {
	Caller MCPCaller `json:"caller"`
	JobID  string    `json:"job_id"`
	Reason string    `json:"reason,omitempty"`
}

// MCPJobListArgs select the calling thread's jobs.
type MCPJobListArgs struct {
	Caller MCPCaller `json:"caller"`
	Status string    `json:"status,omitempty"`
	Limit  int       `json:"limit,omitempty"`
}

// The Desktop heartbeats' writeback through the MCP tools
// (spec/desktop.md, "Writeback transports"): the same requests and
// answers as the CLI helpers', with the calling thread Codex named. A
// bridge operation must come from the bridge thread the thread's binding
// serves, a crossing from the bound source thread itself.
var (
	MCPDesktopPreflight           = Op[MCPDesktopArgs, PreflightReply]{Name: "mcp.desktop.preflight"}
	MCPDesktopNoteArmPending      = Op[MCPArmArgs, ArmPendingReply]{Name: "mcp.desktop.note_arm_pending"}
	MCPDesktopNoteArm             = Op[MCPArmArgs, ArmReply]{Name: "mcp.desktop.note_arm"}
	MCPDesktopNotePaused          = Op[MCPPausedArgs, PausedReply]{Name: "mcp.desktop.note_paused"}
	MCPDesktopNoteBoundaryCrossed = Op[MCPBoundaryArgs, BoundaryReply]{Name: "mcp.desktop.note_boundary_crossed"}
	MCPDesktopReadArtifact        = Op[MCPReadArtifactArgs, ReadArtifactReply]{Name: "mcp.desktop.read_artifact"}
	MCPDesktopValidate            = Op[MCPValidateArgs, MCPValidateReply]{Name: "mcp.desktop.validate"}
	// DesktopMCPValidationRequest opens a live validation of the mcp
	// transport (cbth desktop validate-mcp).
	DesktopMCPValidationRequest = Op[MCPValidationRequestArgs, MCPValidationRequestReply]{Name: "desktop.mcp_validation.request"}
)

// MCPDesktopArgs carry only the caller: the bridge is the calling thread.
type MCPDesktopArgs struct {
	Caller       MCPCaller         `json:"caller"`
	Fingerprints map[string]string `json:"observed_validation_fingerprints,omitempty"`
}

// MCPArmArgs are note-arm-pending's and note-arm's request by a bridge.
type MCPArmArgs struct {
	Caller MCPCaller `json:"caller"`
	ArmArgs
}

// MCPPausedArgs are note-paused's request by a bridge.
type MCPPausedArgs struct {
	Caller MCPCaller `json:"caller"`
	PausedArgs
}

// MCPBoundaryArgs are note-boundary-crossed's request by the caller
// heartbeat, in its source thread.
type MCPBoundaryArgs struct {
	Caller MCPCaller `json:"caller"`
	BoundaryArgs
}

// MCPReadArtifactArgs are read-artifact's request by the thread the
// artifact's job is for.
type MCPReadArtifactArgs struct {
	Caller MCPCaller `json:"caller"`
	ReadArtifactArgs
}

// MCPValidateArgs are desktop_validate_mcp's request: the token `cbth
// desktop validate-mcp` printed, and the fingerprints the answering cbth
// observes.
type MCPValidateArgs struct {
	Caller       MCPCaller         `json:"caller"`
	Token        string            `json:"token"`
	Fingerprints map[string]string `json:"observed_validation_fingerprints,omitempty"`
}

// MCPValidateReply is the proof recorded ("validated" or
// "already_validated").
type MCPValidateReply struct {
	Outcome     engine.Outcome `json:"outcome"`
	ThreadID    string         `json:"thread_id"`
	SandboxMode string         `json:"sandbox_mode"`
	Fingerprint string         `json:"validation_fingerprint"`
}

// MCPValidationRequestArgs open a validation that lasts TTLMS.
type MCPValidationRequestArgs struct {
	TTLMS int64 `json:"ttl_ms"`
}

// MCPValidationRequestReply is the open validation: its token, until
// when, and the prompt to paste into a Desktop thread.
type MCPValidationRequestReply struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	Prompt    string    `json:"prompt"`
}
