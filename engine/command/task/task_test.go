package task_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/task"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

var cfg = enginetest.DeliveryConfig()

type taskEnv struct {
	t *testing.T
	e *engine.Engine
}

func newTaskEnv(t *testing.T) taskEnv {
	clock := engine.NewManualClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	return taskEnv{t, enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{Clock: clock, NoSync: true})}
}

func (te taskEnv) exec(d engine.Decider) (engine.Result, error) {
	return te.e.Execute(context.Background(), engine.Meta{Actor: events.ActorAdapter}, d)
}

func (te taskEnv) must(d engine.Decider) engine.Result {
	te.t.Helper()
	res, err := te.exec(d)
	if err != nil {
		te.t.Fatal(err)
	}
	return res
}

func (te taskEnv) submit() task.TaskRef {
	te.t.Helper()
	ref, _ := enginetest.Answer[task.TaskRef](te.t, te.e, engine.Meta{Actor: events.ActorAdapter}, task.SubmitTask{
		Job:  command.SubmitJob{Target: "debug", ThreadID: "T", TaskKind: "task", Summary: "run it", Policy: events.FailClosedPolicy},
		Argv: []string{"sh", "-c", "echo hi"}, Path: "/bin/sh", Cwd: "/tmp", Timeout: time.Second,
	})
	return ref
}

func (te taskEnv) state(k events.Kind, id string) aggregate.State {
	te.t.Helper()
	var s aggregate.State
	if err := te.e.Read(func(r engine.Snapshot) error {
		var err error
		s, err = r.State(k, id)
		return err
	}); err != nil {
		te.t.Fatal(err)
	}
	return s
}

func (te taskEnv) task(id string) *aggregate.Task {
	return te.state(events.KindTask, id).(*aggregate.Task)
}
func (te taskEnv) job(id string) *aggregate.Job { return te.state(events.KindJob, id).(*aggregate.Job) }

var spool = &command.Ingested{ArtifactID: "art-1", ManagedPath: "/h/artifacts/art-1/payload", ManifestPath: "/h/artifacts/art-1/manifest.json",
	ContentType: "text/plain", SizeBytes: 3, SHA256: "00"}

// A task and its job are submitted together; the task records the
// command and never the environment.
func TestSubmitTaskAppendsJobAndTask(t *testing.T) {
	te := newTaskEnv(t)
	ref := te.submit()
	tk, j := te.task(ref.TaskID), te.job(ref.JobID)
	if tk.State != fsm.TaskQueued || tk.JobID != ref.JobID || tk.Path != "/bin/sh" || tk.TimeoutMS != 1000 {
		t.Errorf("task = %+v", tk)
	}
	if j.State != fsm.JobRunning || j.TaskSummary != "run it" || tk.FirstSeq != j.FirstSeq+1 {
		t.Errorf("job = %+v (task at seq %d)", j, tk.FirstSeq)
	}
	for _, bad := range []task.SubmitTask{
		{Job: command.SubmitJob{Target: "debug", ThreadID: "T", TaskKind: "k", Summary: "s"}, Path: "/bin/sh", Cwd: "/tmp"},
		{Job: command.SubmitJob{Target: "debug", ThreadID: "T", TaskKind: "k", Summary: "s"}, Argv: []string{"sh"}, Path: "sh", Cwd: "/tmp"},
		{Job: command.SubmitJob{Target: "debug", ThreadID: "T", TaskKind: "k", Summary: "s"}, Argv: []string{"sh"}, Path: "/bin/sh", Cwd: "rel"},
		{Job: command.SubmitJob{Target: "debug", ThreadID: "T", TaskKind: "k", Summary: "s"}, Argv: []string{"a\x00b"}, Path: "/bin/sh", Cwd: "/tmp"},
		{Job: command.SubmitJob{Target: "debug", ThreadID: "T", TaskKind: "k", Summary: "s", DedupeKey: "d"}, Argv: []string{"sh"}, Path: "/bin/sh", Cwd: "/tmp"},
		{Job: command.SubmitJob{Target: "nowhere", ThreadID: "T", TaskKind: "k", Summary: "s"}, Argv: []string{"sh"}, Path: "/bin/sh", Cwd: "/tmp"},
	} {
		if _, err := te.exec(bad); errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("%+v: %v, want EINVAL", bad, err)
		}
	}
}

// How a task ended decides its outcome and its job's state.
func TestFinishTaskSettlesTheJob(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stop    string
		exit    task.TaskExit
		outcome string
		job     fsm.JobState
		text    string
	}{
		{"exit 0", "", task.TaskExit{ExitCode: 0}, task.TaskSucceeded, fsm.JobReady, "exited 0"},
		{"exit 3", "", task.TaskExit{ExitCode: 3}, task.TaskFailed, fsm.JobFailed, "status 3"},
		{"killed by someone", "", task.TaskExit{ExitCode: -1, Signal: "KILL"}, task.TaskFailed, fsm.JobFailed, "signal KILL"},
		{"timeout", task.StopTimeout, task.TaskExit{ExitCode: -1, Signal: "TERM"}, task.TaskTimedOut, fsm.JobFailed, "timed out"},
		{"timeout needing KILL", task.StopTimeout, task.TaskExit{ExitCode: -1, Signal: "KILL", Killed: true}, task.TaskTimedOut, fsm.JobFailed, "then KILL"},
		{"cancel", task.StopCancel, task.TaskExit{ExitCode: -1, Signal: "TERM"}, task.TaskCancelled, fsm.JobCancelled, "cancelled"},
		{"a stop that raced a clean exit", task.StopCancel, task.TaskExit{ExitCode: 0}, task.TaskCancelled, fsm.JobCancelled, "cancelled"},
		{"daemon stop", task.StopDaemon, task.TaskExit{ExitCode: -1, Signal: "TERM"}, task.TaskStopped, fsm.JobFailed, "daemon stopped"},
		{"handover", task.StopHandover, task.TaskExit{ExitCode: -1, Signal: "TERM"}, task.TaskStopped, fsm.JobFailed, "--stop-tasks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			te := newTaskEnv(t)
			ref := te.submit()
			te.must(task.StartTask{TaskID: ref.TaskID, PID: 42, DaemonPID: 7, SpoolPath: "/h/tasks/x/output"})
			if tc.stop != "" {
				te.must(task.StopTask{TaskID: ref.TaskID, Reason: tc.stop})
			}
			res := te.must(task.FinishTask{Config: cfg, TaskID: ref.TaskID, Exit: tc.exit, Artifact: spool,
				Output: events.TaskOutput{OutputBytes: 3, SpoolBytes: 3, Tail: "hi\n"}})
			tk, j := te.task(ref.TaskID), te.job(ref.JobID)
			if string(res.Outcome) != tc.outcome || tk.State != fsm.TaskExited || tk.Outcome != tc.outcome || tk.ArtifactID != "art-1" {
				t.Fatalf("outcome %s, task %+v", res.Outcome, tk)
			}
			text := j.ResultSummary + j.FailReason + j.CancelReason
			if j.State != tc.job || !strings.Contains(text, tc.text) || !strings.Contains(text, "last output: hi") {
				t.Errorf("job %s %q, want %s with %q and the output", j.State, text, tc.job, tc.text)
			}
			// The output is kept as an artifact either way; only a
			// completed job's result is referenced by its batch.
			a := te.state(events.KindArtifact, "art-1").(*aggregate.Artifact)
			if a.SourceJobID != ref.JobID || (len(a.OpenBatchIDs) > 0) != (tc.job == fsm.JobReady) {
				t.Errorf("artifact %+v", a)
			}
			if again := te.must(task.FinishTask{Config: cfg, TaskID: ref.TaskID, Exit: tc.exit}); again.Outcome != "already_exited" || len(again.Events) != 0 {
				t.Errorf("a second finish: %s, %d events", again.Outcome, len(again.Events))
			}
		})
	}
}

// A queued task ends without starting only for a stop reason or a
// failed start.
func TestFinishQueuedTask(t *testing.T) {
	te := newTaskEnv(t)
	ref := te.submit()
	if _, err := te.exec(task.FinishTask{Config: cfg, TaskID: ref.TaskID}); errs.CodeOf(err) != errs.ESTATE {
		t.Fatalf("finish of a queued task without a reason: %v", err)
	}
	if _, err := te.exec(task.StopTask{TaskID: ref.TaskID, Reason: task.StopCancel}); errs.CodeOf(err) != errs.ESTATE {
		t.Fatalf("stop of a queued task: %v", err)
	}
	res := te.must(task.FinishTask{Config: cfg, TaskID: ref.TaskID, Unstarted: task.StopCancel})
	if res.Outcome != task.TaskCancelled || te.job(ref.JobID).State != fsm.JobCancelled || !strings.Contains(te.job(ref.JobID).CancelReason, "before") {
		t.Errorf("queued cancel: %s, job %+v", res.Outcome, te.job(ref.JobID))
	}
	ref = te.submit()
	res = te.must(task.FinishTask{Config: cfg, TaskID: ref.TaskID, Exit: task.TaskExit{ExitCode: -1, Error: "permission denied"}})
	if res.Outcome != task.TaskStartFailed || !strings.Contains(te.job(ref.JobID).FailReason, "permission denied") {
		t.Errorf("start failure: %s, job %+v", res.Outcome, te.job(ref.JobID))
	}
}

// A job settled before its task ended keeps its state; the task still
// records its end and its output.
func TestFinishTaskOfASettledJob(t *testing.T) {
	te := newTaskEnv(t)
	ref := te.submit()
	te.must(task.StartTask{TaskID: ref.TaskID, PID: 42})
	te.must(command.CancelJob{Config: cfg, JobID: ref.JobID, Reason: "by hand"})
	te.must(task.StopTask{TaskID: ref.TaskID, Reason: task.StopJobCancelled})
	te.must(task.FinishTask{Config: cfg, TaskID: ref.TaskID, Exit: task.TaskExit{ExitCode: 0}, Artifact: spool})
	if j := te.job(ref.JobID); j.State != fsm.JobCancelled || j.CancelReason != "by hand" {
		t.Errorf("job = %+v", j)
	}
	if tk := te.task(ref.TaskID); tk.Outcome != task.TaskCancelled || tk.ArtifactID != "art-1" {
		t.Errorf("task = %+v", tk)
	}
}

// A lost task fails its job closed with the reason and the output.
func TestLoseTask(t *testing.T) {
	te := newTaskEnv(t)
	ref := te.submit()
	te.must(task.StartTask{TaskID: ref.TaskID, PID: 42})
	te.must(task.LoseTask{Config: cfg, TaskID: ref.TaskID, Reason: "the daemon died", GroupKilled: true, Artifact: spool,
		Output: events.TaskOutput{OutputBytes: 8, SpoolBytes: 8, Tail: "partial\n"}})
	tk, j := te.task(ref.TaskID), te.job(ref.JobID)
	if tk.State != fsm.TaskLost || !tk.GroupKill || tk.Tail != "partial\n" || tk.ArtifactID != "art-1" {
		t.Errorf("task = %+v", tk)
	}
	if j.State != fsm.JobFailed || j.FailReason != "the daemon died; last output: partial" {
		t.Errorf("job = %+v", j)
	}
	if _, err := te.exec(task.StartTask{TaskID: ref.TaskID, PID: 43}); errs.CodeOf(err) != errs.ESTATE {
		t.Errorf("a lost task started again: %v", err)
	}
}
