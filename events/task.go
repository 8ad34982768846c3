package events

// KindTask is the stream of one command the daemon runs for a job (cbth task run).
const KindTask Kind = "task"

// taskEvents declares the task events (see declarations).
func taskEvents() []declaration {
	return []declaration{
		decl[TaskSubmitted](KindTask),
		decl[TaskStarted](KindTask),
		decl[TaskStopping](KindTask),
		decl[TaskExited](KindTask),
		decl[TaskLost](KindTask),
		decl[TaskMatched](KindTask),
		decl[TaskWoke](KindTask),
	}
}

// TaskSubmitted opens a task in state queued. Its job is submitted in the
// same append. The command's environment is never recorded: it may hold
// secrets, and a task is never started again from the log.
type TaskSubmitted struct {
	JobID string   `json:"job_id"`
	Argv  []string `json:"argv"`
	// Path is argv[0] as the client resolved it against its PATH.
	Path      string `json:"path"`
	Cwd       string `json:"cwd"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	// Watch makes the task a watcher (events/watch.go); nil for a plain
	// task.
	Watch *TaskWatch `json:"watch,omitempty"`
}

const TypeTaskSubmitted = "task.submitted"

func (TaskSubmitted) EventType() string { return TypeTaskSubmitted }

// TaskStarted records the command running as the leader of its own
// process group (PID is also the group id). PIDStart is the kernel's
// start time of that process, read by the daemon: with PID it names the
// group for a later daemon, which signals it only while they still
// match (empty when it could not be read, or before cbth recorded it).
type TaskStarted struct {
	PID       int    `json:"pid"`
	PIDStart  string `json:"pid_start,omitempty"`
	DaemonPID int    `json:"daemon_pid"`
	SpoolPath string `json:"spool_path"`
}

const TypeTaskStarted = "task.started"

func (TaskStarted) EventType() string { return TypeTaskStarted }

// TaskStopping records that the daemon asked the task's process group to
// stop (TERM, then KILL after the grace period) and why.
type TaskStopping struct {
	Reason string `json:"stop_reason"`
	Signal string `json:"signal"`
}

const TypeTaskStopping = "task.stopping"

func (TaskStopping) EventType() string { return TypeTaskStopping }

// TaskOutput is what became of a task's output: how much it wrote, how
// much of it the spool kept (the spool is capped), the tail kept inline,
// and the artifact holding the spool.
type TaskOutput struct {
	OutputBytes    int64  `json:"output_bytes"`
	SpoolBytes     int64  `json:"spool_bytes"`
	SpoolTruncated bool   `json:"spool_truncated"`
	Tail           string `json:"output_tail"`
	TailTruncated  bool   `json:"output_tail_truncated"`
	ArtifactID     string `json:"artifact_id,omitempty"`
	// SpoolDroppedLines counts the line ends in the output the spool did
	// not keep (its start, dropped by rotation): the kept output starts
	// on line SpoolDroppedLines+1.
	SpoolDroppedLines int64 `json:"spool_dropped_lines,omitempty"`
}

// TaskExited ends a task whose process this daemon saw end (or never
// start). Outcome is one of the TaskOutcome values of engine/command.
type TaskExited struct {
	Outcome    string `json:"outcome"`
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	Killed     bool   `json:"killed,omitempty"`
	Error      string `json:"error,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	TaskOutput
}

const TypeTaskExited = "task.exited"

func (TaskExited) EventType() string { return TypeTaskExited }

// TaskLost ends a task whose daemon stopped without seeing it end: it is
// failed closed, never run again, with whatever output its spool kept.
type TaskLost struct {
	Reason string `json:"reason"`
	// GroupKilled is set when processes of the task were still running
	// and the new daemon killed them.
	GroupKilled bool `json:"group_killed,omitempty"`
	TaskOutput
}

const TypeTaskLost = "task.lost"

func (TaskLost) EventType() string { return TypeTaskLost }
