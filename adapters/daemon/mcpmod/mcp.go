// Package mcpmod is the daemon's side of the agent's MCP tools
// (spec/mcp.md).
package mcpmod

import (
	"context"
	"os"

	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/codex"
	desktopcmd "github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/engine/command/mcp"
	"github.com/cbth-dev/cbth/engine/command/task"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The agent's MCP tools (spec/mcp.md). `cbth mcp serve` runs outside
// Codex's sandbox and relays each tools/call with the calling thread
// Codex put in its metadata; every decision is made here, where the log
// is: the target of the thread, whether a command is allowed, whether a
// job is the caller's. What the agent did, and what it tried and was
// refused, is recorded on the thread's mcp stream.

// Tasks starts a task for the agent (the task runner's module).
type Tasks interface {
	StartTask(ctx context.Context, m engine.Meta, a api.TaskRunArgs, wrap func(task.SubmitTask) engine.Decider) (query.TaskView, error)
	Cancel(ctx context.Context, m engine.Meta, id string, wrap func(engine.Decider) engine.Decider) (api.TaskCancelReply, error)
	Output(ctx context.Context, a api.TaskOutputArgs) (api.TaskOutputReply, error)
}

// CodexThreads says where a result for a Codex CLI thread will arrive
// (the Codex module).
type CodexThreads interface {
	Where(ctx context.Context, thread string) (api.MCPDelivery, error)
}

// Module is the agent's MCP tools.
type Module struct {
	daemon.Base
	h     *daemon.Host
	tasks Tasks
	codex CodexThreads
}

// New returns the MCP tools' module; tasks runs task_run's tasks, codex
// answers where a Codex CLI thread's result goes.
func New(tasks Tasks, codex CodexThreads) *Module { return &Module{tasks: tasks, codex: codex} }

// Name names the module.
func (m *Module) Name() string { return "mcp" }

// Start takes the host's services.
func (m *Module) Start(_ context.Context, h *daemon.Host) error {
	m.h = h
	return nil
}

// Ops registers the MCP tools' operations.
func (m *Module) Ops(t api.Table) {
	api.Handle(t, api.MCPJobSubmit, m.mcpSubmit)
	api.Handle(t, api.MCPTaskRun, m.mcpTaskRun)
	api.Handle(t, api.MCPJobStatus, func(_ context.Context, a api.MCPJobArgs) (query.JobView, error) {
		if err := a.Caller.Check(); err != nil {
			return query.JobView{}, err
		}
		return m.callersJob(a.Caller, a.JobID)
	})
	api.Handle(t, api.MCPJobList, func(_ context.Context, a api.MCPJobListArgs) (p query.JobPage, err error) {
		if err := a.Caller.Check(); err != nil {
			return p, err
		}
		err = m.h.Eng.Read(func(s engine.Snapshot) error {
			p, err = query.Jobs(s, query.JobFilter{ThreadID: a.Caller.ThreadID, State: fsm.JobState(a.Status), Limit: a.Limit})
			return err
		})
		return p, err
	})
	api.Handle(t, api.MCPJobCancel, m.mcpCancel)
	api.Handle(t, api.MCPWatchStart, m.mcpWatchStart)
	api.Handle(t, api.MCPWatchStop, m.mcpWatchStop)
	api.Handle(t, api.MCPTaskOutput, m.mcpTaskOutput)
}

// checkNamedThread refuses, and records, a call whose arguments name
// another thread than the one that made it: a tool acts for its caller
// only.
func (m *Module) checkNamedThread(ctx context.Context, c api.MCPCaller, tool string) error {
	if c.NamedThread == "" || c.NamedThread == c.ThreadID {
		return nil
	}
	return m.refuse(ctx, c, c.Record(tool), errs.New(errs.ThreadMismatch,
		"%s acts for the calling thread only; the arguments name thread %s, and this call comes from %s", tool, c.NamedThread, c.ThreadID))
}

// refuse records a call refused by policy and returns the refusal.
func (m *Module) refuse(ctx context.Context, c api.MCPCaller, rec events.MCPToolCalled, refusal error) error {
	rec.Code = string(errs.CodeOf(refusal))
	if _, err := m.h.Eng.Execute(ctx, c.Meta(), mcp.RecordMCPCall{ThreadID: c.ThreadID, Call: rec}); err != nil {
		return err
	}
	return refusal
}

// deliveryOf says when a result for thread through target will arrive.
func (m *Module) deliveryOf(ctx context.Context, target command.Target, thread string) (api.MCPDelivery, error) {
	switch target {
	case command.TargetDesktop:
		return m.desktopDelivery(thread)
	case command.TargetCodexCLI:
		return m.codex.Where(ctx, thread)
	}
	return api.MCPDelivery{When: string(target), Hint: "the result goes to the " + string(target) + " target"}, nil
}

// desktopDelivery says how a Desktop thread's result arrives: through its
// heartbeats, or, on an installation using the queue transport, through
// Codex's queue, which takes it only for a thread trusted with its own
// permissions.
func (m *Module) desktopDelivery(thread string) (api.MCPDelivery, error) {
	heartbeat := api.MCPDelivery{When: api.DeliverNextHeartbeat,
		Hint: "the result comes back into this Desktop thread through its heartbeat automation once the job is done"}
	var queue bool
	trust := m.h.Config.CLI.HomeTrust()
	err := m.h.Eng.Read(func(s engine.Snapshot) error {
		inst, err := command.Installation(s)
		if err != nil || inst == nil || inst.WritebackTransport() != desktopcmd.WritebackQueue {
			return err
		}
		queue = true
		own, err := codex.TrustOf(s, thread)
		if own != "" {
			trust = own
		}
		return err
	})
	switch {
	case err != nil:
		return api.MCPDelivery{}, err
	case !queue:
		return heartbeat, nil
	case trust != events.TrustOwnPermissions:
		return api.MCPDelivery{When: api.DeliverHeldForTrust, Hint: "the result is held until the user trusts this thread with its own permissions " +
			"(cbth thread trust --thread-id " + thread + " --own-permissions): it would go through Codex's queue, and a queued message runs as a turn with the thread's own permissions"}, nil
	}
	return api.MCPDelivery{When: api.DeliverThroughQueue, Hint: "once the job is done, cbth hands the result to Codex's queue for this thread; " +
		"Codex Desktop runs it as a new turn, with this thread's own permissions, when it next checks the queue with the thread open and idle (experimental)"}, nil
}

func (m *Module) mcpSubmit(ctx context.Context, a api.MCPSubmitArgs) (api.MCPSubmitReply, error) {
	c := a.Caller
	if err := c.Check(); err != nil {
		return api.MCPSubmitReply{}, err
	}
	pol, err := command.NormalizePolicy(a.Policy, nil)
	if err != nil {
		return api.MCPSubmitReply{}, err
	}
	if err := m.checkNamedThread(ctx, c, "job_submit"); err != nil {
		return api.MCPSubmitReply{}, err
	}
	target, err := m.h.ThreadTarget(c.ThreadID)
	if err != nil {
		return api.MCPSubmitReply{}, err
	}
	cmd := command.SubmitJob{Target: target, ThreadID: c.ThreadID, TaskKind: a.TaskKind, Summary: a.Summary,
		Policy: pol, Timeout: m.h.Config.JobTimeout.Duration}
	meta := c.Meta()
	if a.IdempotencyKey != "" {
		// Scoped to the thread: two threads' keys never meet.
		cmd.DedupeKey = api.MCPKey(c.ThreadID, a.IdempotencyKey)
		meta.CommandID = "job.submit/" + cmd.DedupeKey
	}
	j, dedup, err := m.h.Submitted(engine.ExecVia[string](ctx, m.h.Eng, meta, cmd, func(engine.Decider) engine.Decider {
		return mcp.RecordMCPCall{ThreadID: c.ThreadID, Call: c.Record("job_submit"), Inner: cmd}
	}))
	if err != nil {
		return api.MCPSubmitReply{}, err
	}
	del, err := m.deliveryOf(ctx, j.TargetKind, c.ThreadID)
	if err != nil {
		return api.MCPSubmitReply{}, err
	}
	return api.MCPSubmitReply{JobID: j.JobID, State: j.State, TargetKind: j.TargetKind, ThreadID: c.ThreadID,
		Deduplicated: dedup, Delivery: del}, nil
}

func (m *Module) mcpTaskRun(ctx context.Context, a api.MCPTaskRunArgs) (api.MCPTaskRunReply, error) {
	if len(a.WakeOn) > 0 {
		return api.MCPTaskRunReply{}, errs.New(errs.EINVAL, "task_run takes no wake_on: watch_start runs a watcher")
	}
	return m.startTask(ctx, "task_run", a, false)
}

// startTask is task_run and watch_start: the command runs for the calling
// thread only if a rule of the user allows it whole; as a watcher, its
// wake bound is the rule's.
func (m *Module) startTask(ctx context.Context, tool string, a api.MCPTaskRunArgs, watch bool) (api.MCPTaskRunReply, error) {
	c := a.Caller
	if err := c.Check(); err != nil {
		return api.MCPTaskRunReply{}, err
	}
	summary := a.Summary
	if summary == "" {
		summary = aggregate.CommandLine(a.Argv)
	}
	// Malformed input is refused before the policy, and recorded by
	// neither: only a well-formed command can be judged.
	kind := "task"
	if watch {
		kind = task.UpdateKind
	}
	run := task.SubmitTask{Job: command.SubmitJob{Target: command.TargetCodexCLI, ThreadID: c.ThreadID, TaskKind: kind, Summary: summary},
		Argv: a.Argv, Path: a.Path, Cwd: a.Cwd}
	if watch {
		// The patterns are checked before the policy, at the highest
		// bound a rule may set: malformed input is recorded by neither.
		run.Watch = &events.TaskWatch{Patterns: a.WakeOn, WakesPerHour: task.MaxWakesPerHour, LineMax: task.DefaultLineMax}
	}
	if err := run.Validate(); err != nil {
		return api.MCPTaskRunReply{}, err
	}
	if err := m.checkNamedThread(ctx, c, tool); err != nil {
		return api.MCPTaskRunReply{}, err
	}
	// The rules are read at every call: a rule the user just added
	// holds at once, without a daemon restart.
	cfg, err := m.h.Home.LoadConfig(os.Getenv)
	if err != nil {
		return api.MCPTaskRunReply{}, errs.Wrap(errs.ENOTCONF, err, "read the [mcp] task rules")
	}
	rec := c.Record(tool)
	rec.Task = a.Task
	var rule home.TaskRule
	if a.Task != "" {
		var ok bool
		if rule, ok = cfg.MCP.Task(a.Task); !ok {
			return api.MCPTaskRunReply{}, noTask(cfg.MCP, a.Task, m.h.Home.Config())
		}
		if why := rule.Why(a.Argv); why != "" {
			rec.Argv = a.Argv
			return api.MCPTaskRunReply{}, m.refuse(ctx, c, rec, refuseNamed(tool, rule, a.Argv, why, m.h.Home.Config()))
		}
	} else {
		var ok bool
		if rule, ok = cfg.MCP.Allowed(a.Argv); !ok {
			rec.Argv = a.Argv
			return api.MCPTaskRunReply{}, m.refuse(ctx, c, rec, refuseArgv(tool, cfg.MCP, a.Argv, m.h.Home.Config()))
		}
	}
	meta := c.Meta()
	if c.TurnID != "" && c.CallID != "" {
		// Codex names each call: the same call retried runs nothing twice.
		meta.CommandID = "mcp." + tool + "/" + api.MCPKey(c.ThreadID, c.TurnID, c.CallID)
	}
	var wake *api.WakeArgs
	if watch {
		wake = &api.WakeArgs{WakeOn: a.WakeOn, WakesPerHour: rule.WakesPerHour}
	}
	v, err := m.tasks.StartTask(ctx, meta, api.TaskRunArgs{
		SubmitArgs: api.SubmitArgs{SourceThreadID: c.ThreadID, TaskKind: kind, TaskSummary: summary},
		Argv:       a.Argv, Path: a.Path, Cwd: a.Cwd, Env: a.Env, TimeoutMS: a.TimeoutMS, Watch: wake,
	}, func(s task.SubmitTask) engine.Decider {
		return mcp.RecordMCPCall{ThreadID: c.ThreadID, Call: rec, Inner: s}
	})
	if err != nil {
		return api.MCPTaskRunReply{}, err
	}
	j, err := m.h.Job(v.JobID)
	if err != nil {
		return api.MCPTaskRunReply{}, err
	}
	del, err := m.deliveryOf(ctx, j.TargetKind, c.ThreadID)
	if err != nil {
		return api.MCPTaskRunReply{}, err
	}
	return api.MCPTaskRunReply{TaskID: v.TaskID, JobID: v.JobID, State: v.State, TargetKind: j.TargetKind, ThreadID: c.ThreadID,
		Argv: a.Argv, Rule: rule.Written(), Task: rule.Name, Delivery: del, Watch: wake}, nil
}

// callersJob returns the job if it is the calling thread's.
func (m *Module) callersJob(c api.MCPCaller, id string) (query.JobView, error) {
	j, err := m.h.Job(id)
	if err != nil {
		return j, err
	}
	if j.SourceThreadID != c.ThreadID {
		return query.JobView{}, errs.New(errs.ThreadMismatch, "job %s is not this thread's", id)
	}
	return j, nil
}

func (m *Module) mcpCancel(ctx context.Context, a api.MCPJobArgs) (api.TransitionReply, error) {
	c := a.Caller
	if err := c.Check(); err != nil {
		return api.TransitionReply{}, err
	}
	rec := c.Record("job_cancel")
	rec.JobID = a.JobID
	if _, err := m.callersJob(c, a.JobID); err != nil {
		if errs.CodeOf(err) == errs.ThreadMismatch {
			return api.TransitionReply{}, m.refuse(ctx, c, rec, err)
		}
		return api.TransitionReply{}, err
	}
	reason := a.Reason
	if reason == "" {
		reason = "cancelled by the agent through MCP"
	}
	return m.h.Cancel(ctx, c.Meta(), a.JobID, func(cj command.CancelJob) engine.Decider {
		return mcp.RecordMCPCall{ThreadID: c.ThreadID, Call: rec, Inner: cj}
	}, reason)
}
