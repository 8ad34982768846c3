package query

import (
	"errors"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// TaskView is a task with every field (task inspect, task run). Its
// output tail is the last output_tail bytes the command wrote, as text.
type TaskView struct {
	TaskID         string        `json:"task_id"`
	JobID          string        `json:"job_id"`
	State          fsm.TaskState `json:"state"`
	Argv           []string      `json:"argv"`
	Path           string        `json:"path"`
	Cwd            string        `json:"cwd"`
	TimeoutMS      int64         `json:"timeout_ms"`
	PID            int           `json:"pid"`
	PIDStart       string        `json:"pid_start"`
	DaemonPID      int           `json:"daemon_pid"`
	CreatedAt      time.Time     `json:"created_at"`
	StartedAt      *time.Time    `json:"started_at"`
	StoppingAt     *time.Time    `json:"stopping_at"`
	EndedAt        *time.Time    `json:"ended_at"`
	UpdatedAt      time.Time     `json:"updated_at"`
	StopReason     string        `json:"stop_reason"`
	Outcome        string        `json:"outcome"`
	ExitCode       *int          `json:"exit_code"`
	Signal         string        `json:"signal"`
	Killed         bool          `json:"killed"`
	Error          string        `json:"error"`
	LostReason     string        `json:"lost_reason"`
	GroupKilled    bool          `json:"group_killed"`
	DurationMS     int64         `json:"duration_ms"`
	SpoolPath      string        `json:"spool_path"`
	OutputBytes    int64         `json:"output_bytes"`
	SpoolBytes     int64         `json:"spool_bytes"`
	SpoolTruncated bool          `json:"spool_truncated"`
	OutputTail     string        `json:"output_tail"`
	TailTruncated  bool          `json:"output_tail_truncated"`
	ArtifactID     string        `json:"artifact_id"`
	Artifact       *ArtifactView `json:"artifact"`
	Job            JobView       `json:"job"`
	Version        uint64        `json:"version"`
	// Watch is a watcher's settings and wakes; null for a plain task.
	Watch *TaskWatchView `json:"watch"`
}

// TaskRow is a task in a listing: no tail and the command as one line,
// so a page of them stays small.
type TaskRow struct {
	TaskID         string        `json:"task_id"`
	JobID          string        `json:"job_id"`
	State          fsm.TaskState `json:"state"`
	Outcome        string        `json:"outcome"`
	ExitCode       *int          `json:"exit_code"`
	Command        string        `json:"command"`
	TargetKind     events.Target `json:"target_kind"`
	SourceThreadID string        `json:"source_thread_id"`
	JobState       fsm.JobState  `json:"job_status"`
	CreatedAt      time.Time     `json:"created_at"`
	StartedAt      *time.Time    `json:"started_at"`
	EndedAt        *time.Time    `json:"ended_at"`
	DurationMS     int64         `json:"duration_ms"`
	OutputBytes    int64         `json:"output_bytes"`
	// Watch says the task is a watcher, Wakes how many updates it made.
	Watch bool `json:"watch"`
	Wakes int  `json:"wakes"`
}

// exitCode is the view of an exit status: null until the command exited
// with one (a signal, a failed start or a lost task have none).
func exitCode(t *aggregate.Task) *int {
	if t.State != fsm.TaskExited || t.ExitCode < 0 {
		return nil
	}
	c := t.ExitCode
	return &c
}

// NewTaskView renders a task with its job and output artifact (a may be
// nil).
func NewTaskView(t *aggregate.Task, j JobView, a *aggregate.Artifact) TaskView {
	v := TaskView{
		TaskID: t.ID, JobID: t.JobID, State: t.State, Argv: t.Argv, Path: t.Path, Cwd: t.Cwd, TimeoutMS: t.TimeoutMS,
		PID: t.PID, PIDStart: t.PIDStart, DaemonPID: t.DaemonPID, CreatedAt: t.CreatedAt, StartedAt: opt(t.StartedAt), StoppingAt: opt(t.StoppingAt),
		EndedAt: opt(t.EndedAt), UpdatedAt: t.UpdatedAt, StopReason: t.StopReason, Outcome: t.Outcome, ExitCode: exitCode(t),
		Signal: t.Signal, Killed: t.Killed, Error: t.Error, LostReason: t.LostReason, GroupKilled: t.GroupKill,
		DurationMS: t.DurationMS, SpoolPath: t.SpoolPath, OutputBytes: t.OutputBytes, SpoolBytes: t.SpoolBytes,
		SpoolTruncated: t.SpoolTruncated, OutputTail: t.Tail, TailTruncated: t.TailTruncated, ArtifactID: t.ArtifactID,
		Job: j, Version: t.Version, Watch: NewTaskWatchView(t),
	}
	if a != nil {
		av := NewArtifactView(a)
		v.Artifact = &av
	}
	return v
}

// Task returns one task's view.
func Task(s engine.Reader, id string) (TaskView, error) {
	if id == "" {
		return TaskView{}, errs.New(errs.EINVAL, "task id is empty")
	}
	t, err := engine.Task(s, id)
	if err != nil {
		return TaskView{}, err
	}
	if t == nil {
		return TaskView{}, errs.New(errs.ENOENT, "no task %s", id)
	}
	j, err := Job(s, t.JobID)
	if err != nil {
		return TaskView{}, err
	}
	var a *aggregate.Artifact
	if t.ArtifactID != "" {
		if a, err = engine.Artifact(s, t.ArtifactID); err != nil {
			return TaskView{}, err
		}
	}
	return NewTaskView(t, j, a), nil
}

// TaskOfJob returns the id of the task that runs a job, or "".
func TaskOfJob(s engine.Reader, jobID string) string {
	if refs := s.Lookup(index.TaskJob, jobID); len(refs) > 0 {
		return refs[0].ID
	}
	return ""
}

// TaskFilter selects tasks for Tasks.
type TaskFilter struct {
	State string // a task state, or TasksLive
	After string
	Limit int
}

// TasksLive is the task filter beside the task states: every task that
// has not ended.
const TasksLive = "live"

// TaskPage is one page of tasks in id (submission) order.
type TaskPage struct {
	Tasks []TaskRow `json:"tasks"`
	Next  string    `json:"next,omitempty"`
}

// Tasks lists tasks in id order (ids are time-ordered UUIDv7s), one page
// (see PageBytes) at a time.
func Tasks(s engine.Snapshot, f TaskFilter) (TaskPage, error) {
	p := newPager[TaskRow](f.Limit)
	var page TaskPage
	add := func(t *aggregate.Task) error {
		if f.State != "" && string(t.State) != f.State && !(f.State == TasksLive && t.Live()) {
			return nil
		}
		j, err := engine.Job(s, t.JobID)
		if err != nil {
			return err
		}
		r := TaskRow{TaskID: t.ID, JobID: t.JobID, State: t.State, Outcome: t.Outcome, ExitCode: exitCode(t),
			Command: t.CommandLine(), CreatedAt: t.CreatedAt, StartedAt: opt(t.StartedAt), EndedAt: opt(t.EndedAt),
			DurationMS: t.DurationMS, OutputBytes: t.OutputBytes, Watch: t.Watcher(), Wakes: t.Wakes}
		if j != nil {
			r.TargetKind, r.SourceThreadID, r.JobState = j.TargetKind, j.SourceThreadID, j.State
		}
		if !p.add(r) {
			page.Next = p.items[len(p.items)-1].TaskID
			return errStop
		}
		return nil
	}
	err := s.ForEachAfter(events.KindTask, f.After, func(st aggregate.State) error { return add(st.(*aggregate.Task)) })
	if errors.Is(err, errStop) {
		err = nil
	}
	page.Tasks = p.items
	return page, err
}

// LiveTasks returns the tasks queued, running or stopping, in id order.
func LiveTasks(s engine.Reader) ([]*aggregate.Task, error) {
	var out []*aggregate.Task
	for _, r := range s.Lookup(index.TaskLive, "") {
		t, err := engine.Task(s, r.ID)
		if err != nil {
			return nil, err
		}
		if t != nil {
			out = append(out, t)
		}
	}
	return out, nil
}
