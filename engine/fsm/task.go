package fsm

import (
	"slices"

	"github.com/cbth-dev/cbth/events"
)

// TaskState is the state of a task (spec/fsm.md).
type TaskState string

// The states of a task.
const (
	TaskQueued   TaskState = "queued"
	TaskRunning  TaskState = "running"
	TaskStopping TaskState = "stopping"
	TaskExited   TaskState = "exited"
	TaskLost     TaskState = "lost"
)

// taskLive are the states of a task that has not ended.
var taskLive = []TaskState{TaskQueued, TaskRunning, TaskStopping}

// Live reports whether a task in state s has not ended.
func (s TaskState) Live() bool { return slices.Contains(taskLive, s) }

// A task is the daemon running one job's command (cbth task run). It is
// not one of the seed's aggregates: the job keeps the seed's four states,
// and the process supervision lives beside it. A task ends exactly once:
// exited when its daemon saw the process end (or never start), lost when
// a later daemon found it unfinished and failed it closed.
var taskTable = table[TaskState]{
	Kind:   events.KindTask,
	States: []TaskState{TaskQueued, TaskRunning, TaskStopping, TaskExited, TaskLost},
	Moves: []move[TaskState]{
		{events.TypeTaskSubmitted, []TaskState{None}, TaskQueued},
		{events.TypeTaskStarted, []TaskState{TaskQueued}, TaskRunning},
		{events.TypeTaskStopping, []TaskState{TaskRunning}, TaskStopping},
		{events.TypeTaskExited, taskLive, TaskExited},
		{events.TypeTaskLost, taskLive, TaskLost},
	},
	// A watcher's matches are recorded while its process runs, and
	// while it is being stopped (its output is read to the end).
	Updates: []update[TaskState]{
		{events.TypeTaskMatched, []TaskState{TaskRunning, TaskStopping}},
		{events.TypeTaskWoke, []TaskState{TaskRunning, TaskStopping}},
	},
}.Table()
