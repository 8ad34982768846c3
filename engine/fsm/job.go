package fsm

import (
	"github.com/cbth-dev/cbth/events"
)

// JobState is the state of a job (spec/fsm.md).
type JobState string

// The states of a job.
const (
	JobRunning   JobState = "running"
	JobReady     JobState = "ready"
	JobFailed    JobState = "failed"
	JobCancelled JobState = "cancelled"
)

var jobTable = table[JobState]{
	Kind:   events.KindJob,
	States: []JobState{JobRunning, JobReady, JobFailed, JobCancelled},
	Moves: []move[JobState]{
		{events.TypeJobSubmitted, []JobState{None}, JobRunning},
		{events.TypeJobCompleted, []JobState{JobRunning}, JobReady},
		{events.TypeJobFailed, []JobState{JobRunning}, JobFailed},
		{events.TypeJobCancelled, []JobState{JobRunning, JobReady}, JobCancelled},
	},
	Updates: []update[JobState]{
		// A superseded batch's ready jobs move into the batch that
		// superseded it.
		{events.TypeJobCarried, []JobState{JobReady}},
	},
}.Table()
