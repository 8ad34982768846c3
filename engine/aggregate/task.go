package aggregate

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
)

// Task is a command the daemon runs for a job (cbth task run).
type Task struct {
	Header[fsm.TaskState]
	JobID      string    `json:"job_id"`
	Argv       []string  `json:"argv"`
	Path       string    `json:"path"`
	Cwd        string    `json:"cwd"`
	TimeoutMS  int64     `json:"timeout_ms,omitempty"`
	PID        int       `json:"pid,omitempty"`
	PIDStart   string    `json:"pid_start,omitempty"`
	DaemonPID  int       `json:"daemon_pid,omitempty"`
	SpoolPath  string    `json:"spool_path,omitempty"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	StopReason string    `json:"stop_reason,omitempty"`
	StoppingAt time.Time `json:"stopping_at,omitzero"`
	Outcome    string    `json:"outcome,omitempty"`
	ExitCode   int       `json:"exit_code"`
	Signal     string    `json:"signal,omitempty"`
	Killed     bool      `json:"killed,omitempty"`
	Error      string    `json:"error,omitempty"`
	DurationMS int64     `json:"duration_ms,omitempty"`
	LostReason string    `json:"lost_reason,omitempty"`
	GroupKill  bool      `json:"group_killed,omitempty"`
	EndedAt    time.Time `json:"ended_at,omitzero"`
	events.TaskOutput
	// A watcher's record (task_watch.go); empty for a plain task.
	Watch *events.TaskWatch `json:"watch,omitempty"`
	taskWakes
}

// Live reports whether the task has not ended.
func (t *Task) Live() bool {
	switch t.State {
	case fsm.TaskQueued, fsm.TaskRunning, fsm.TaskStopping:
		return true
	}
	return false
}

func (t *Task) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.TaskSubmitted:
		t.JobID, t.Argv, t.Path, t.Cwd, t.TimeoutMS = p.JobID, p.Argv, p.Path, p.Cwd, p.TimeoutMS
		t.ExitCode, t.Watch = -1, p.Watch
	case *events.TaskStarted:
		t.PID, t.PIDStart, t.DaemonPID, t.SpoolPath, t.StartedAt = p.PID, p.PIDStart, p.DaemonPID, p.SpoolPath, e.RecordedAt
	case *events.TaskStopping:
		t.StopReason, t.Signal, t.StoppingAt = p.Reason, p.Signal, e.RecordedAt
	case *events.TaskExited:
		t.Outcome, t.ExitCode, t.Signal, t.Killed, t.Error = p.Outcome, p.ExitCode, p.Signal, p.Killed, p.Error
		t.DurationMS, t.TaskOutput, t.EndedAt = p.DurationMS, p.TaskOutput, e.RecordedAt
		t.ended()
	case *events.TaskLost:
		t.Outcome, t.LostReason, t.GroupKill = "lost", p.Reason, p.GroupKilled
		t.TaskOutput, t.EndedAt = p.TaskOutput, e.RecordedAt
		t.ended()
	case *events.TaskMatched:
		t.matched(p)
	case *events.TaskWoke:
		t.woke(e, p)
	}
}

// Indexes implements Indexer.
func (t *Task) Indexes() []IndexEntry {
	out := []IndexEntry{{index.TaskJob, t.JobID}}
	if t.Live() {
		out = append(out, IndexEntry{index.TaskLive, ""})
	}
	return out
}

// CommandLine renders the task's argv on one line for people, quoting
// the words a shell would split or expand, cut to 200 bytes.
func (t *Task) CommandLine() string { return CommandLine(t.Argv) }

// CommandLine renders argv as Task.CommandLine does, for a command line
// shown before its task is recorded.
func CommandLine(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`;&|<>()*?[]{}~#!") {
			b.WriteString(strconv.Quote(a))
		} else {
			b.WriteString(a)
		}
	}
	s := b.String()
	if len(s) <= 200 {
		return s
	}
	i := 200 - len("…")
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
