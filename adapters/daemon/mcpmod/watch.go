package mcpmod

import (
	"context"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command/mcp"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Watchers through MCP (spec/mcp.md): watch_start runs a command as
// task_run does, under the same rules, as a watcher of the calling
// thread; watch_stop stops one of the thread's tasks (its end is the
// watcher's final update); task_output reads one's output and records
// nothing.

func (m *Module) mcpWatchStart(ctx context.Context, a api.MCPTaskRunArgs) (api.MCPTaskRunReply, error) {
	return m.startTask(ctx, "watch_start", a, true)
}

// callersTask returns the task if its job is the calling thread's.
func (m *Module) callersTask(c api.MCPCaller, id string) (query.TaskView, error) {
	if id == "" {
		return query.TaskView{}, errs.New(errs.EINVAL, "task_id is required")
	}
	var v query.TaskView
	err := m.h.Eng.Read(func(s engine.Snapshot) error {
		var err error
		v, err = query.Task(s, id)
		return err
	})
	if err != nil {
		return v, err
	}
	if v.Job.SourceThreadID != c.ThreadID {
		return query.TaskView{}, errs.New(errs.ThreadMismatch, "task %s is not this thread's", id)
	}
	return v, nil
}

func (m *Module) mcpWatchStop(ctx context.Context, a api.MCPTaskArgs) (api.TaskCancelReply, error) {
	c := a.Caller
	if err := c.Check(); err != nil {
		return api.TaskCancelReply{}, err
	}
	rec := c.Record("watch_stop")
	rec.TaskID = a.TaskID
	v, err := m.callersTask(c, a.TaskID)
	if err != nil {
		if errs.CodeOf(err) == errs.ThreadMismatch {
			return api.TaskCancelReply{}, m.refuse(ctx, c, rec, err)
		}
		return api.TaskCancelReply{}, err
	}
	rec.JobID = v.JobID
	return m.tasks.Cancel(ctx, c.Meta(), a.TaskID, func(d engine.Decider) engine.Decider {
		return mcp.RecordMCPCall{ThreadID: c.ThreadID, Call: rec, Inner: d}
	})
}

func (m *Module) mcpTaskOutput(ctx context.Context, a api.MCPTaskOutputArgs) (api.TaskOutputReply, error) {
	if err := a.Caller.Check(); err != nil {
		return api.TaskOutputReply{}, err
	}
	// A read: refused or not, it records nothing.
	if _, err := m.callersTask(a.Caller, a.TaskID); err != nil {
		return api.TaskOutputReply{}, err
	}
	return m.tasks.Output(ctx, a.TaskOutputArgs)
}
