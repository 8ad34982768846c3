package command

import (
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
)

// SubmitReady submits a job and completes it in the same decision: a
// result that exists the moment it is known (a watcher's update,
// spec/tasks.md). The job goes through the thread's FIFO as any other
// completed job (place: the tail batch while it merges, else a new
// batch), so merge windows, send intervals and fair order apply
// unchanged. It answers with the job's id.
type SubmitReady struct {
	engine.Answers[string]

	Config DeliveryConfig
	Job    SubmitJob
	// Result is the completed job's result summary.
	Result string
}

// Decide implements engine.Decider.
func (c SubmitReady) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	// A job ready at once is never deduplicated nor timed out.
	c.Job.DedupeKey, c.Job.Timeout = "", 0
	if err := CheckText("result summary", c.Result, true); err != nil {
		return engine.Decision{}, err
	}
	sub, err := c.Job.Decide(v, now)
	if err != nil {
		return engine.Decision{}, err
	}
	id := engine.AnswerOf(c.Job, sub)
	// The job is not in the view yet (it is appended with this
	// decision): placing it needs only what its submission says.
	j := &aggregate.Job{Header: aggregate.Header[fsm.JobState]{ID: id, State: fsm.JobRunning},
		TargetKind: c.Job.Target, SourceThreadID: c.Job.ThreadID, TaskKind: c.Job.TaskKind, TaskSummary: c.Job.Summary,
		DeliveryPolicy: c.Job.Policy, DeliveryTarget: c.Job.DeliveryTarget}
	batchID, placed, err := c.Config.place(v, now, j, c.Result, nil)
	if err != nil {
		return engine.Decision{}, err
	}
	emits := append(sub.Emits, engine.Emit{Stream: jobStream(id), Payload: &events.JobCompleted{ResultSummary: c.Result, BatchID: batchID}})
	return c.Answer(engine.Decision{Outcome: OutcomeCompleted, Emits: append(emits, placed...)}, id), nil
}
