package tasksmod

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/adapters/task"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Output reads a task's output (spec/tasks.md, "Reading without
// polling"): the spool of a running task, the artifact of one that
// ended, or the tail its end recorded once the artifact is collected. It
// starts nothing and appends nothing. The text was redacted on its way
// into the spool; the token shapes are taken out once more, for output
// an older cbth spooled.
func (m *Module) Output(ctx context.Context, a api.TaskOutputArgs) (api.TaskOutputReply, error) {
	switch {
	case a.MaxBytes < 0 || a.MaxBytes > api.MaxOutputRead:
		return api.TaskOutputReply{}, errs.New(errs.EINVAL, "max_bytes must be between 1 and %d", api.MaxOutputRead)
	case a.FromLine < 0:
		return api.TaskOutputReply{}, errs.New(errs.EINVAL, "from_line counts from 1")
	case a.Offset != nil && *a.Offset < 0:
		return api.TaskOutputReply{}, errs.New(errs.EINVAL, "offset must not be negative")
	case a.Offset != nil && a.FromLine > 0:
		return api.TaskOutputReply{}, errs.New(errs.EINVAL, "give from_line or offset, not both")
	}
	if a.MaxBytes == 0 {
		a.MaxBytes = api.DefaultOutputRead
	}
	if err := checkTaskID(a.TaskID); err != nil {
		return api.TaskOutputReply{}, err
	}
	k, t, err := m.kept(ctx, a.TaskID)
	if err != nil {
		return api.TaskOutputReply{}, err
	}
	rep := api.TaskOutputReply{TaskID: t.ID, State: t.State}
	if k == nil {
		return rep, nil // queued: nothing written yet
	}
	defer k.Close()
	var ch task.Chunk
	switch {
	case a.FromLine > 0:
		ch, err = k.Read(0, a.FromLine, a.MaxBytes)
	case a.Offset != nil:
		ch, err = k.Read(*a.Offset, 0, a.MaxBytes)
	default:
		ch, err = k.Tail(a.MaxBytes)
	}
	if err != nil {
		return api.TaskOutputReply{}, errs.Wrap(errs.EINVAL, err, "read the output of task %s", t.ID)
	}
	end := k.Start + k.Size()
	rep.Data = strings.ToValidUTF8(task.Redactor(nil)(string(ch.Data)), "\uFFFD")
	rep.Offset, rep.Next, rep.Line, rep.NextLine = ch.Offset, ch.Next, ch.Line, ch.NextLine
	rep.KeptFrom, rep.Dropped, rep.Bytes = k.Start, ch.Dropped, end
	rep.End = !t.Live() && ch.Next == end
	return rep, nil
}

func checkTaskID(id string) error {
	if strings.TrimSpace(id) == "" {
		return errs.New(errs.EINVAL, "task_id is required")
	}
	return nil
}

// kept opens what of a task's output can be read, and the task as the
// log has it; nil for a task that has not started.
func (m *Module) kept(ctx context.Context, id string) (*task.Kept, *aggregate.Task, error) {
	t, err := m.task(id)
	if err != nil {
		return nil, nil, err
	}
	if t == nil {
		return nil, nil, errs.New(errs.ENOENT, "no task %s", id)
	}
	if t.Live() {
		m.mu.Lock()
		r := m.running[id]
		var p *task.Process
		if r != nil {
			p = r.p
		}
		m.mu.Unlock()
		if p == nil {
			return nil, t, nil
		}
		k, err := p.Kept()
		if !errors.Is(err, task.ErrEnded) {
			return k, t, err
		}
		// The output is being merged for the end: read what the end
		// records, once it is (a kill_grace or two at most).
		m.waitTaskEnd(ctx, id, 3*m.h.Config.Task.KillGrace.Duration+10*time.Second)
		if t, err = m.task(id); err != nil {
			return nil, nil, err
		}
	}
	if t.Live() {
		return nil, nil, errs.New(errs.EAGAIN, "task %s is ending; read its output again in a moment", id)
	}
	start := t.OutputBytes - t.SpoolBytes
	line := t.SpoolDroppedLines + 1
	if t.SpoolTruncated && t.SpoolDroppedLines == 0 {
		line = 0 // a spool whose dropped start no daemon counted
	}
	if t.ArtifactID != "" {
		var av query.ArtifactView
		var stored bool
		_ = m.h.Eng.Read(func(s engine.Snapshot) error {
			a, err := engine.Artifact(s, t.ArtifactID)
			if a != nil && err == nil {
				av, stored = query.NewArtifactView(a), a.State == fsm.ArtifactStored
			}
			return err
		})
		if stored {
			k, err := task.KeptFile(av.ManagedPath, start, line)
			if err == nil {
				return k, t, nil
			}
			m.h.Log.Warn("read a task's output artifact; reading its recorded tail", "task", id, "err", err)
		}
	}
	// The artifact is gone (collected after its retention), or there was
	// none: the tail its end recorded is what is left.
	tail := []byte(t.Tail)
	return task.KeptBytes(tail, t.OutputBytes-int64(len(tail))), t, nil
}
