// Package api is the daemon's operation table: every socket operation's
// name with its request and reply types, declared once and shared by the
// client (cmd/cbth) and the server (adapters/daemon). The transport is
// package ipc; the socket is internal and the stable surface is the CLI,
// whose JSON shapes are these replies (spec/cli.md).
package api

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Op is one operation: its name and, through its type parameters, its
// request and reply.
type Op[Req, Rep any] struct {
	Name string
	// Passive operations only look at the daemon: they do not count as
	// activity for the idle rule.
	Passive bool
	// Attach makes the connection an attached integration client for as
	// long as it stays open: the daemon stays up meanwhile.
	Attach bool
	// Versionless operations are served to clients of any protocol
	// (ipc.Server.Versionless): their shapes only ever gain fields.
	Versionless bool
}

// Call runs the operation on c.
func (o Op[Req, Rep]) Call(c *ipc.Client, req Req) (Rep, error) {
	var rep Rep
	call := c.Call
	if o.Attach {
		call = c.CallAttached
	}
	err := call(o.Name, req, &rep)
	return rep, err
}

// Handler serves one operation from its encoded request.
type Handler struct {
	Passive     bool
	Versionless bool
	serve       func(ctx context.Context, args json.RawMessage) (any, error)
}

// Serve decodes the request and runs the operation.
func (h Handler) Serve(ctx context.Context, args json.RawMessage) (any, error) {
	return h.serve(ctx, args)
}

// Table maps operation names to their handlers.
type Table map[string]Handler

// Handle registers fn as o's handler in t.
func Handle[Req, Rep any](t Table, o Op[Req, Rep], fn func(context.Context, Req) (Rep, error)) {
	t[o.Name] = Handler{Passive: o.Passive, Versionless: o.Versionless, serve: func(ctx context.Context, args json.RawMessage) (any, error) {
		var req Req
		if len(args) > 0 {
			if err := json.Unmarshal(args, &req); err != nil {
				return nil, errs.Wrap(errs.EINVAL, err, "%s arguments", o.Name)
			}
		}
		return fn(ctx, req)
	}}
}

// The operations.
var (
	Ping         = Op[Empty, PingReply]{Name: "ping", Passive: true, Versionless: true}
	DaemonStatus = Op[Empty, Status]{Name: "daemon.status", Passive: true, Versionless: true}
	DaemonStop   = Op[Empty, Outcome]{Name: "daemon.stop"}

	JobSubmit   = Op[SubmitArgs, SubmitReply]{Name: "job.submit"}
	JobComplete = Op[CompleteArgs, TransitionReply]{Name: "job.complete"}
	JobFail     = Op[JobArgs, TransitionReply]{Name: "job.fail"}
	JobCancel   = Op[JobArgs, TransitionReply]{Name: "job.cancel"}
	JobQuery    = Op[JobArgs, query.JobView]{Name: "job.query"}
	JobList     = Op[JobListArgs, query.JobPage]{Name: "job.list"}

	BatchCloseHead   = Op[CloseHeadArgs, CloseHeadReply]{Name: "batch.close_head"}
	BatchInspectHead = Op[ThreadArgs, query.BatchInspection]{Name: "batch.inspect_head"}
	BatchInspect     = Op[BatchArgs, query.BatchInspection]{Name: "batch.inspect"}
	BatchList        = Op[BatchListArgs, query.BatchPage]{Name: "batch.list"}
	BatchSupersede   = Op[SupersedeArgs, SupersedeReply]{Name: "batch.supersede"}
	Wait             = Op[WaitArgs, query.WaitResult]{Name: "wait"}

	ArtifactPin = Op[PinArgs, PinReply]{Name: "artifact.pin"}

	EventsVerify = Op[Empty, engine.Report]{Name: "events.verify"}
	EventsRead   = Op[ReadArgs, EventsPage]{Name: "events.read"}

	// The operator's and auditor's time machine (spec/cli.md, "History"):
	// a batch's, a job's or a thread's story.
	History = Op[HistoryArgs, query.HistoryPage]{Name: "audit.history"}
	// WatchNext is `cbth watch`'s subscription: it waits for a commit
	// past After, then answers the live view. Passive: watching neither
	// keeps the daemon up nor counts as activity.
	WatchNext     = Op[WatchArgs, WatchView]{Name: "watch.next", Passive: true}
	ThreadHistory = Op[ThreadHistoryArgs, query.ThreadHistoryPage]{Name: "thread.history"}

	DebugTargetSet = Op[DebugSetArgs, DebugSetReply]{Name: "debug.target.set"}
	DebugTurn      = Op[DebugTurnArgs, DebugTurnReply]{Name: "debug.turn"}
	DebugClock     = Op[AdvanceArgs, AdvanceReply]{Name: "debug.clock.advance"}

	CtxTreeLoad = Op[TreeArgs, TreeDoc]{Name: "ctx.tree.load"}
	CtxTreeSave = Op[TreeArgs, TreeSaveReply]{Name: "ctx.tree.save"}
	// CtxServe is `cbth model serve`: the daemon serves the object's
	// socket (its sessions are events) and the foreground's attached
	// connection holds the daemon up until it ends.
	CtxServe = Op[CtxServeArgs, CtxServeReply]{Name: "ctx.serve", Attach: true}

	// The Codex CLI adapter (adapters/codex/sessions): a foreground `cbth
	// cli run` attaches on its connection, which then holds the session
	// live until it detaches or the connection ends.
	CLIAttach         = Op[CLIAttachArgs, CLIAttachReply]{Name: "cli.attach", Attach: true}
	CLIDetach         = Op[Empty, CLIDetachReply]{Name: "cli.detach"}
	CLISessionList    = Op[SessionListArgs, query.SessionPage]{Name: "cli.session.list"}
	CLISessionInspect = Op[SessionInspectArgs, query.SessionInspection]{Name: "cli.session.inspect"}

	// The user's trust in a thread's deliveries (spec/codex-cli.md,
	// "Trust"): operator commands, offered to no agent.
	ThreadTrust   = Op[ThreadTrustArgs, ThreadTrustReply]{Name: "thread.trust"}
	ThreadUntrust = Op[ThreadTrustArgs, ThreadTrustReply]{Name: "thread.untrust"}

	TaskRun     = Op[TaskRunArgs, query.TaskView]{Name: "task.run"}
	TaskInspect = Op[TaskArgs, query.TaskView]{Name: "task.inspect"}
	TaskList    = Op[TaskListArgs, query.TaskPage]{Name: "task.list"}
	TaskCancel  = Op[TaskArgs, TaskCancelReply]{Name: "task.cancel"}
	// TaskOutput reads a task's kept output (spec/tasks.md, "Reading
	// without polling"); it starts nothing and appends nothing.
	TaskOutput = Op[TaskOutputArgs, TaskOutputReply]{Name: "task.output"}

	// DaemonHandover, like Ping and DaemonStatus, is answered whatever
	// protocol the client speaks (ipc.Versionless): a newer client uses
	// them to find an older daemon idle and replace it.
	DaemonHandover = Op[HandoverArgs, HandoverReply]{Name: "daemon.handover", Versionless: true}

	// The channel gateway's routes (spec/channels.md); the envelopes
	// themselves travel on the gateway's own socket.
	GatewayRouteAdd    = Op[RouteArgs, RouteReply]{Name: "gateway.route.add"}
	GatewayRouteRemove = Op[RouteArgs, RouteReply]{Name: "gateway.route.rm"}
	GatewayRouteList   = Op[Empty, query.RoutePage]{Name: "gateway.route.list"}
)

// RouteArgs names a routing key and, to add, its destination.
type RouteArgs struct {
	WorkspaceID string `json:"workspace_id"`
	AgentID     string `json:"agent_id"`
	To          string `json:"to,omitempty"`
	Target      string `json:"target,omitempty"`
}

// RouteReply is the reply of gateway.route.add and gateway.route.rm.
type RouteReply struct {
	Outcome engine.Outcome  `json:"outcome"`
	Route   query.RouteView `json:"route"`
}

// All names every operation, for the test that the daemon serves each.
var All = []string{
	Ping.Name, DaemonStatus.Name, DaemonStop.Name,
	JobSubmit.Name, JobComplete.Name, JobFail.Name, JobCancel.Name, JobQuery.Name, JobList.Name,
	BatchCloseHead.Name, BatchInspectHead.Name, BatchInspect.Name, BatchList.Name, BatchSupersede.Name, Wait.Name,
	ArtifactPin.Name, EventsVerify.Name, EventsRead.Name, History.Name, ThreadHistory.Name, WatchNext.Name,
	DebugTargetSet.Name, DebugTurn.Name, DebugClock.Name,
	CtxTreeLoad.Name, CtxTreeSave.Name, CtxServe.Name,
	CLIAttach.Name, CLIDetach.Name, CLISessionList.Name, CLISessionInspect.Name, ThreadTrust.Name, ThreadUntrust.Name,
	DesktopInstallation.Name, DesktopInstallationRepair.Name, DesktopBindingRepair.Name,
	DesktopBindingUnbind.Name, DesktopBindingList.Name, DesktopPreflight.Name, BatchSkipHead.Name, DesktopQueueValidate.Name,
	DesktopNoteArmPending.Name, DesktopNoteArm.Name, DesktopNotePaused.Name, DesktopNoteBoundaryCrossed.Name,
	DesktopRelayMarkerIssue.Name, DesktopRelayScannerBind.Name, DesktopRelayConsume.Name,
	DesktopReadArtifact.Name, DesktopRevokeLease.Name, DesktopIssueLeases.Name,
	TaskRun.Name, TaskInspect.Name, TaskList.Name, TaskCancel.Name, TaskOutput.Name, DaemonHandover.Name,
	GatewayRouteAdd.Name, GatewayRouteRemove.Name, GatewayRouteList.Name,
	PluginHandshake.Name, AppServerEnsure.Name, DeliveryEnqueue.Name, DeliveryInspect.Name,
	MCPJobSubmit.Name, MCPTaskRun.Name, MCPJobStatus.Name, MCPJobList.Name, MCPJobCancel.Name,
	MCPWatchStart.Name, MCPWatchStop.Name, MCPTaskOutput.Name,
	MCPDesktopPreflight.Name, MCPDesktopNoteArmPending.Name, MCPDesktopNoteArm.Name, MCPDesktopNotePaused.Name,
	MCPDesktopNoteBoundaryCrossed.Name, MCPDesktopReadArtifact.Name, MCPDesktopValidate.Name, DesktopMCPValidationRequest.Name,
}

// Empty is the request of operations that take none.
type Empty struct{}

// Outcome is the reply of operations that only report what they did.
type Outcome struct {
	Outcome engine.Outcome `json:"outcome"`
}

// PingReply is ping's reply.
type PingReply struct {
	PID      int    `json:"pid"`
	Version  string `json:"version"`
	Protocol int    `json:"protocol"`
}

// Status is daemon.status's reply.
type Status struct {
	PID             int       `json:"pid"`
	Version         string    `json:"version"`
	Protocol        int       `json:"protocol"`
	Home            string    `json:"home"`
	StartedAt       time.Time `json:"started_at"`
	UptimeSeconds   float64   `json:"uptime_seconds"`
	LogHeadSeq      uint64    `json:"log_head_seq"`
	Checkpoint      uint64    `json:"projection_checkpoint"`
	ProjectionLag   uint64    `json:"projection_lag"`
	ActiveJobs      int       `json:"active_jobs"`
	AttachedClients int       `json:"attached_clients"`
	ParkedBatches   int       `json:"parked_batches"`
	// UndeliveredBatches counts the batches cbth ever closed with their
	// result never confirmed delivered (command.UndeliveredReasons).
	UndeliveredBatches int `json:"closed_undelivered_batches"`
	Deliveries         int `json:"deliveries_in_flight"`
	RunningTasks       int `json:"running_tasks"`
	QueuedTasks        int `json:"queued_tasks"`
	// HandingOver is set while a handover waits for running tasks.
	HandingOver  bool                `json:"handing_over"`
	IdleTimeout  string              `json:"idle_timeout"`
	IdleDeadline time.Time           `json:"idle_deadline"`
	BusyReasons  []string            `json:"busy_reasons"`
	NextDue      *time.Time          `json:"next_due"`
	LastSweep    command.SweepResult `json:"last_sweep"`
	// Codex is the Codex CLI as this daemon finds it (the Codex module
	// fills it in): the daemon looks codex_binary up on its own PATH,
	// the one it started with, which need not be the client's.
	Codex *CodexLookup `json:"codex,omitempty"`
	// CodexDaemon is the user's Codex daemon as this daemon finds it,
	// when the codex_daemon transport is on.
	CodexDaemon *CodexDaemonStatus `json:"codex_daemon,omitempty"`
}

// CodexLookup is codex_binary as a daemon resolves it: its absolute
// path, or why it cannot run it. It never holds the PATH searched.
type CodexLookup struct {
	Binary string `json:"binary"`
	Path   string `json:"path,omitempty"`
	Error  string `json:"error,omitempty"`
}

// CodexDaemonStatus is the user's Codex daemon as cbth finds it: its
// socket, whether it passed the checks and the probe, and so whether
// deliveries can go through it.
type CodexDaemonStatus struct {
	CodexHome string `json:"codex_home"`
	Socket    string `json:"socket"`
	// State is one of the CodexDaemon* states.
	State     string `json:"state"`
	PID       int    `json:"pid,omitempty"`
	UserAgent string `json:"user_agent,omitempty"`
	Instance  string `json:"instance,omitempty"`
	Code      string `json:"code,omitempty"`
	Error     string `json:"error,omitempty"`
	// Deliveries says whether a delivery can go through it now.
	Deliveries bool `json:"deliveries"`
}

// The states of CodexDaemonStatus: running (connected, checked and
// probed), found (its socket is there and safe; cbth connects on the
// first delivery), not_running, refused (an unsafe socket, another cbth
// home, or a failed probe) or error.
const (
	CodexDaemonRunning    = "running"
	CodexDaemonFound      = "found"
	CodexDaemonNotRunning = "not_running"
	CodexDaemonRefused    = "refused"
	CodexDaemonError      = "error"
)

// ThreadTrustArgs name a thread and, to trust it, the trust.
type ThreadTrustArgs struct {
	ThreadID string `json:"thread_id"`
	Trust    string `json:"trust,omitempty"`
}

// ThreadTrustReply says what thread.trust and thread.untrust did, and
// the trust the thread's deliveries now get.
type ThreadTrustReply struct {
	Outcome  engine.Outcome `json:"outcome"`
	ThreadID string         `json:"thread_id"`
	// Trust is the thread's effective trust; Source says whose: "thread"
	// (the user trusted it itself) or "home" ([cli] trust).
	Trust  string `json:"trust"`
	Source string `json:"source"`
}

// SubmitArgs are job.submit's request.
type SubmitArgs struct {
	TargetKind     command.Target      `json:"target_kind"`
	SourceThreadID string              `json:"source_thread_id"`
	TaskKind       string              `json:"task_kind"`
	TaskSummary    string              `json:"task_summary"`
	Metadata       json.RawMessage     `json:"metadata,omitempty"`
	DedupeKey      string              `json:"dedupe_key,omitempty"`
	Policy         command.PolicyFlags `json:"delivery_policy"`
}

// SubmitReply is job.submit's reply.
type SubmitReply struct {
	JobID        string       `json:"job_id"`
	State        fsm.JobState `json:"status"`
	AcceptedAt   time.Time    `json:"accepted_at"`
	Deduplicated bool         `json:"deduplicated"`
}

// CompleteArgs are job.complete's request. ResultFile is absolute.
type CompleteArgs struct {
	JobID         string `json:"job_id"`
	ResultSummary string `json:"result_summary"`
	ResultFile    string `json:"result_file,omitempty"`
}

// JobArgs name one job, with a reason for fail and cancel.
type JobArgs struct {
	JobID  string `json:"job_id"`
	Reason string `json:"reason,omitempty"`
	// PastArgs ask job.query for the job as it was then.
	PastArgs
}

// TransitionReply is the reply of complete, fail and cancel: what the
// command did and the job after it.
type TransitionReply struct {
	JobID    string              `json:"job_id"`
	State    fsm.JobState        `json:"status"`
	Outcome  engine.Outcome      `json:"outcome"`
	Job      query.JobView       `json:"job"`
	Artifact *query.ArtifactView `json:"artifact"`
}

// JobListArgs select a page of job.list.
type JobListArgs struct {
	SourceThreadID string `json:"source_thread_id,omitempty"`
	Status         string `json:"status,omitempty"`
	After          string `json:"after,omitempty"`
	Limit          int    `json:"limit,omitempty"`
}

// CloseHeadArgs are batch.close_head's request.
type CloseHeadArgs struct {
	SourceThreadID string `json:"source_thread_id"`
	Reason         string `json:"reason"`
	BatchID        string `json:"batch_id,omitempty"`
}

// CloseHeadReply is batch.close_head's reply.
type CloseHeadReply struct {
	Outcome engine.Outcome   `json:"outcome"`
	BatchID string           `json:"batch_id"`
	Batch   *query.BatchView `json:"batch"`
}

// SupersedeArgs are batch.supersede's request.
type SupersedeArgs struct {
	BatchID string `json:"batch_id"`
	Reason  string `json:"reason"`
}

// SupersedeReply is batch.supersede's reply: the superseded batch after
// the command, and the batch its jobs went into.
type SupersedeReply struct {
	Outcome      engine.Outcome   `json:"outcome"`
	BatchID      string           `json:"batch_id"`
	SupersededBy string           `json:"superseded_by"`
	Batch        *query.BatchView `json:"batch"`
}

// ThreadArgs name a thread.
type ThreadArgs struct {
	SourceThreadID string `json:"source_thread_id"`
	PastArgs
}

// PastArgs ask for a past moment instead of the present: the state right
// after the event at seq AsOfSeq, or after the last event recorded at or
// before AsOf. Neither set means now.
type PastArgs struct {
	AsOfSeq uint64     `json:"as_of_seq,omitempty"`
	AsOf    *time.Time `json:"as_of,omitempty"`
}

// HistoryArgs name the story to tell (a batch, a job, or a thread's head
// batch, as of PastArgs when set) and the page: the entries after seq
// After.
type HistoryArgs struct {
	BatchID        string `json:"batch_id,omitempty"`
	JobID          string `json:"job_id,omitempty"`
	SourceThreadID string `json:"source_thread_id,omitempty"`
	PastArgs
	After uint64 `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// WatchArgs ask for the live view once the log passes seq After, waiting
// at most WaitMS (at most a minute) for it.
type WatchArgs struct {
	After  uint64 `json:"after,omitempty"`
	WaitMS int64  `json:"wait_ms,omitempty"`
}

// WatchView is the live view `cbth watch` shows (spec/cli.md, "Watch"):
// each list holds at most 100, the counts say how many there are.
type WatchView struct {
	Seq         uint64         `json:"seq"`
	Heads       []WatchHead    `json:"heads"`
	HeadCount   int            `json:"head_count"`
	InFlight    []WatchAttempt `json:"in_flight"`
	Parked      []WatchHead    `json:"parked"`
	ParkedCount int            `json:"parked_count"`
	Undelivered int            `json:"closed_undelivered_batches"`
	Tasks       []WatchTask    `json:"tasks"`
	BusyReasons []string       `json:"busy_reasons"`
}

// WatchHead is a thread's open head batch.
type WatchHead struct {
	SourceThreadID string         `json:"source_thread_id"`
	BatchID        string         `json:"batch_id"`
	TargetKind     command.Target `json:"target_kind"`
	State          fsm.BatchState `json:"state"`
	ReplayPolicy   string         `json:"replay_policy"`
	Reason         string         `json:"replay_policy_reason"`
	Jobs           int            `json:"jobs"`
	Since          time.Time      `json:"since"`
}

// WatchAttempt is a delivery in flight.
type WatchAttempt struct {
	TargetKind     command.Target   `json:"target_kind"`
	SourceThreadID string           `json:"source_thread_id"`
	BatchID        string           `json:"batch_id"`
	AttemptID      string           `json:"attempt_id"`
	Generation     uint64           `json:"generation"`
	State          fsm.AttemptState `json:"state"`
	Since          time.Time        `json:"since"`
}

// WatchTask is a task queued, running or stopping.
type WatchTask struct {
	TaskID  string        `json:"task_id"`
	JobID   string        `json:"job_id"`
	State   fsm.TaskState `json:"state"`
	Command string        `json:"command"`
	Since   time.Time     `json:"since"`
	// Watch: the task is a watcher; Wakes counts its updates so far.
	Watch bool `json:"watch"`
	Wakes int  `json:"wakes"`
}

// ThreadHistoryArgs select a page of a thread's batches.
type ThreadHistoryArgs struct {
	SourceThreadID string `json:"source_thread_id"`
	After          string `json:"after,omitempty"`
	Limit          int    `json:"limit,omitempty"`
}

// BatchArgs name a batch.
type BatchArgs struct {
	BatchID string `json:"batch_id"`
	PastArgs
}

// BatchListArgs select a page of batch.list.
type BatchListArgs struct {
	SourceThreadID string `json:"source_thread_id,omitempty"`
	State          string `json:"state,omitempty"`
	After          string `json:"after,omitempty"`
	Limit          int    `json:"limit,omitempty"`
}

// WaitArgs name the jobs (or every job of a thread) to wait for, bounded
// by TimeoutMS (0 waits until done). The reply lists one page of the
// jobs; After (the reply's next) asks, without waiting, for the page
// after it, Limit bounds a page's jobs.
type WaitArgs struct {
	JobIDs         []string `json:"job_ids,omitempty"`
	SourceThreadID string   `json:"source_thread_id,omitempty"`
	TimeoutMS      int64    `json:"timeout_ms,omitempty"`
	After          string   `json:"after,omitempty"`
	Limit          int      `json:"limit,omitempty"`
}

// PinArgs pin an artifact until a time, or for a span of the daemon's
// clock.
type PinArgs struct {
	ArtifactID string    `json:"artifact_id"`
	Until      time.Time `json:"until,omitzero"`
	For        string    `json:"for,omitempty"`
}

// PinReply is artifact.pin's reply.
type PinReply struct {
	Outcome    engine.Outcome `json:"outcome"`
	ArtifactID string         `json:"artifact_id"`
}

// ReadArgs page through the log: events with seq >= From, optionally of
// one stream ("kind/id").
type ReadArgs struct {
	From   uint64 `json:"from,omitempty"`
	Stream string `json:"stream,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	// WaitMS, when set and nothing at or after From exists yet, waits up
	// to this long for a commit (tail -f).
	WaitMS int64 `json:"wait_ms,omitempty"`
}

// EventsPage is one page of events.read; Next is the seq to continue from.
type EventsPage struct {
	Events []events.Envelope `json:"events"`
	Next   uint64            `json:"next,omitempty"`
	Head   uint64            `json:"head"`
}

// DebugSetArgs set the debug target's behaviour for a thread.
type DebugSetArgs struct {
	SourceThreadID string `json:"source_thread_id"`
	Behaviour      string `json:"behaviour"`
}

// DebugSetReply is debug.target.set's reply.
type DebugSetReply struct {
	Outcome        engine.Outcome `json:"outcome"`
	SourceThreadID string         `json:"source_thread_id"`
	Behaviour      string         `json:"behaviour"`
}

// DebugTurnArgs report a turn event on the debug target's accepted turn
// of a thread. SessionEpoch, when set, reports it from that epoch instead
// of the current one (to show that a stale stream is ignored).
type DebugTurnArgs struct {
	SourceThreadID string `json:"source_thread_id"`
	Event          string `json:"event"`
	SessionEpoch   uint64 `json:"session_epoch,omitempty"`
}

// DebugTurnReply is debug.turn's reply: what the core made of the event.
type DebugTurnReply struct {
	Outcome          engine.Outcome `json:"outcome"`
	SourceThreadID   string         `json:"source_thread_id"`
	AttemptID        string         `json:"attempt_id"`
	TurnID           string         `json:"delivery_turn_id"`
	Event            string         `json:"event"`
	ManagedSessionID string         `json:"managed_session_id"`
	SessionEpoch     uint64         `json:"session_epoch"`
}

// AdvanceArgs move a manual clock.
type AdvanceArgs struct {
	By string `json:"by"`
	// NoSweep moves the clock only, as time passes between two ticks of
	// a daemon on the system clock: the next pass sweeps.
	NoSweep bool `json:"no_sweep,omitempty"`
}

// AdvanceReply is debug.clock.advance's reply.
type AdvanceReply struct {
	Now time.Time `json:"now"`
}

// TreeArgs name a CortexFS tree and, for saves, its wanted content.
type TreeArgs struct {
	Root string   `json:"root"`
	Set  tree.Set `json:"set"`
}

// TreeDoc is ctx.tree.load's reply.
type TreeDoc struct {
	Exists bool     `json:"exists"`
	Set    tree.Set `json:"set"`
}

// CtxServeArgs name a tree and one of its objects ("model/P/M").
type CtxServeArgs struct {
	Root   string `json:"root"`
	Object string `json:"object"`
}

// CtxServeReply says where the daemon serves the object's socket.
type CtxServeReply struct {
	Object string `json:"object"`
	Socket string `json:"socket"`
}

// TreeSaveReply is ctx.tree.save's reply.
type TreeSaveReply struct {
	Outcome engine.Outcome `json:"outcome"`
	Events  int            `json:"events"`
}

// CLIAttachArgs are cli.attach's request. Mode is "bind_thread" (with
// BoundThreadID), "new_thread" or "exploratory" (no session, outside
// auto-continuation). Cwd is the foreground's working directory, the
// project a new thread runs in.
type CLIAttachArgs struct {
	Mode          string                `json:"mode"`
	BoundThreadID string                `json:"bound_thread_id,omitempty"`
	Profile       events.SessionProfile `json:"session_profile"`
	Cwd           string                `json:"cwd"`
}

// CLIAttachReply tells the foreground how to run Codex on the shared
// app-server: `CodexBinary --remote unix://Socket` with CODEX_HOME set to
// CodexHome, in Cwd. Session is the bound session (null while a new
// thread is awaited, and for an exploratory run). Warnings go to stderr.
type CLIAttachReply struct {
	Outcome          engine.Outcome       `json:"outcome"`
	Mode             string               `json:"mode"`
	AutoContinuation bool                 `json:"auto_continuation"`
	Socket           string               `json:"socket"`
	CodexBinary      string               `json:"codex_binary"`
	CodexHome        string               `json:"codex_home"`
	Cwd              string               `json:"cwd"`
	Session          *query.SessionView   `json:"session"`
	AppServer        *query.AppServerView `json:"app_server"`
	Warnings         []string             `json:"warnings"`
}

// CLIDetachReply is cli.detach's reply: the session as the foreground
// left it (null if none was bound) and the warnings gathered meanwhile.
type CLIDetachReply struct {
	Outcome  engine.Outcome     `json:"outcome"`
	Session  *query.SessionView `json:"session"`
	Warnings []string           `json:"warnings"`
}

// SessionListArgs select a page of cli.session.list's sessions.
type SessionListArgs struct {
	BoundThreadID string `json:"bound_thread_id,omitempty"`
	State         string `json:"session_state,omitempty"`
	After         string `json:"after,omitempty"`
	Limit         int    `json:"limit,omitempty"`
}

// SessionInspectArgs name a session, or a thread whose non-retired
// session to show.
type SessionInspectArgs struct {
	ManagedSessionID string `json:"managed_session_id,omitempty"`
	BoundThreadID    string `json:"bound_thread_id,omitempty"`
}

// TaskRunArgs are task.run's request: the job to submit and the command
// to run for it. Env is the client's environment, given to the command
// and kept only in the daemon's memory, never in the log.
type TaskRunArgs struct {
	SubmitArgs
	Argv      []string `json:"argv"`
	Path      string   `json:"path"`
	Cwd       string   `json:"cwd"`
	Env       []string `json:"env"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`
	// Watch makes the task a watcher (spec/tasks.md, "Watchers").
	Watch *WakeArgs `json:"watch,omitempty"`
}

// WakeArgs make a task a watcher: the lines that wake its thread (none:
// only its end) and at most how many wakes an hour (1 to 600; the
// client says, there is no default here).
type WakeArgs struct {
	WakeOn       []string `json:"wake_on,omitempty"`
	WakesPerHour int      `json:"wakes_per_hour"`
}

// TaskOutputArgs select a read of a task's output: from a line (from 1)
// or a byte offset of the output, or neither for its last bytes; at
// most MaxBytes (default DefaultOutputRead, at most MaxOutputRead).
type TaskOutputArgs struct {
	TaskID   string `json:"task_id"`
	FromLine int64  `json:"from_line,omitempty"`
	Offset   *int64 `json:"offset,omitempty"`
	MaxBytes int    `json:"max_bytes,omitempty"`
}

// The bounds of one task.output read.
const (
	DefaultOutputRead = 16 << 10
	MaxOutputRead     = 64 << 10
)

// TaskOutputReply is one read of a task's output: Data (redacted text)
// starts at byte Offset of the output, on line Line (0: not known), and
// the next read goes from Next (NextLine). KeptFrom is the first byte
// the spool kept (Dropped: the read asked for one before it); Bytes is
// how much the task has written so far; End says Data reaches the end of
// what a task that ended wrote.
type TaskOutputReply struct {
	TaskID   string        `json:"task_id"`
	State    fsm.TaskState `json:"state"`
	Data     string        `json:"data"`
	Offset   int64         `json:"offset"`
	Next     int64         `json:"next_offset"`
	Line     int64         `json:"line"`
	NextLine int64         `json:"next_line"`
	KeptFrom int64         `json:"kept_from"`
	Dropped  bool          `json:"dropped"`
	Bytes    int64         `json:"output_bytes"`
	End      bool          `json:"end"`
}

// TaskArgs name one task.
type TaskArgs struct {
	TaskID string `json:"task_id"`
}

// TaskListArgs select a page of task.list.
type TaskListArgs struct {
	State string `json:"state,omitempty"`
	After string `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// TaskCancelReply is task.cancel's reply.
type TaskCancelReply struct {
	Outcome engine.Outcome `json:"outcome"`
	Task    query.TaskView `json:"task"`
}

// HandoverArgs ask the daemon to hand over to a new one: refuse new
// tasks, wait up to WaitMS for running ones (or stop them with
// StopTasks), then stop serving and exit.
type HandoverArgs struct {
	WaitMS    int64 `json:"wait_ms"`
	StopTasks bool  `json:"stop_tasks,omitempty"`
}

// HandoverReply is daemon.handover's reply, sent just before the daemon
// stops serving.
type HandoverReply struct {
	Outcome      engine.Outcome `json:"outcome"`
	PID          int            `json:"pid"`
	Version      string         `json:"version"`
	Protocol     int            `json:"protocol"`
	TasksStopped int            `json:"tasks_stopped"`
}
