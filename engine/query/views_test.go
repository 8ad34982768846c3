package query_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

// submit submits a debug job on thread and returns its id.
func submit(t *testing.T, e *engine.Engine, thread string) string {
	t.Helper()
	id, _ := enginetest.Answer[string](t, e, engine.Meta{Actor: events.ActorCLI}, command.SubmitJob{Target: command.TargetDebug,
		ThreadID: thread, TaskKind: "ci", Summary: "work", Policy: events.FailClosedPolicy})
	return id
}

// complete completes job (with an artifact of that id unless it is "")
// and returns the batch it went to.
func complete(t *testing.T, e *engine.Engine, job, artifact string) string {
	t.Helper()
	c := command.CompleteJob{Config: enginetest.DeliveryConfig(), JobID: job, Summary: "green"}
	if artifact != "" {
		c.Artifact = &command.Ingested{ArtifactID: artifact, ManagedPath: "/h/artifacts/" + artifact + "/payload", SizeBytes: 2, SHA256: "ab"}
	}
	batch, _ := enginetest.Answer[string](t, e, engine.Meta{Actor: events.ActorCLI}, c)
	return batch
}

// jobs is an engine with four jobs of two threads: j1 completed into a
// batch, j2 failed, j3 cancelled, j4 still running.
func jobs(t *testing.T) (e *engine.Engine, j1, j2, j3, j4 string) {
	t.Helper()
	clock := engine.NewManualClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	e = enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{Clock: clock, NoSync: true})
	run := func(d engine.Decider) {
		if _, err := e.Execute(context.Background(), engine.Meta{Actor: events.ActorCLI}, d); err != nil {
			t.Fatal(err)
		}
	}
	j1, j2, j3, j4 = submit(t, e, "T"), submit(t, e, "T"), submit(t, e, "U"), submit(t, e, "U")
	complete(t, e, j1, "")
	run(command.FailJob{JobID: j2, Reason: "lost"})
	run(command.CancelJob{Config: enginetest.DeliveryConfig(), JobID: j3, Reason: "not needed"})
	return e, j1, j2, j3, j4
}

// A job's view follows its state and names the batch its result went
// to; an id of another kind is EINVAL naming what it is, an unknown one
// ENOENT; the counters and the thread's head follow the jobs.
func TestJobViewsKindsAndCounters(t *testing.T) {
	e, j1, j2, j3, j4 := jobs(t)
	err := e.Read(func(s engine.Snapshot) error {
		v, err := query.Job(s, j1)
		if err != nil || v.State != fsm.JobReady || v.Batch == nil || v.Batch.State != fsm.BatchQueued || v.ResultSummary != "green" || v.ReadyAt == nil {
			t.Errorf("the completed job: %+v, %v", v, err)
		}
		batch := v.Batch.BatchID
		if f, _ := query.Job(s, j2); f.State != fsm.JobFailed || f.FailReason != "lost" || f.Batch != nil {
			t.Errorf("the failed job: %+v", f)
		}
		if c, _ := query.Job(s, j3); c.State != fsm.JobCancelled || c.CancelReason != "not needed" {
			t.Errorf("the cancelled job: %+v", c)
		}
		if k, err := query.KindOf(s, batch); err != nil || k != events.KindBatch {
			t.Errorf("KindOf the batch: %s %v", k, err)
		}
		if err := query.NotA(s, events.KindJob, batch); errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("a batch named as a job: %v", err)
		}
		if err := query.NotA(s, events.KindJob, "nope"); errs.CodeOf(err) != errs.ENOENT {
			t.Errorf("nothing named: %v", err)
		}
		if got := query.JobIDsOfThread(s, "T"); !slices.Equal(got, []string{j1, j2}) {
			t.Errorf("thread T's jobs %v", got)
		}
		if query.HeadBatchID(s, "T") != batch || query.HeadBatchID(s, "U") != "" {
			t.Errorf("heads %q %q", query.HeadBatchID(s, "T"), query.HeadBatchID(s, "U"))
		}
		if query.ActiveJobs(s) != 1 || query.Parked(s) != 0 || query.Undelivered(s) != 0 {
			t.Errorf("counters: %d active, %d parked, %d undelivered", query.ActiveJobs(s), query.Parked(s), query.Undelivered(s))
		}
		for state, want := range map[fsm.JobState][]string{fsm.JobRunning: {j4}, fsm.JobFailed: {j2}, fsm.JobCancelled: {j3}, fsm.JobReady: {j1}} {
			p, err := query.Jobs(s, query.JobFilter{State: state})
			var ids []string
			for _, j := range p.Jobs {
				ids = append(ids, j.JobID)
			}
			if err != nil || !slices.Equal(ids, want) {
				t.Errorf("jobs %s: %v %v, want %v", state, ids, err, want)
			}
		}
		for filter, want := range map[string]int{query.BatchesOpen: 1, query.BatchesParked: 0, query.BatchesUndelivered: 0, string(fsm.BatchQueued): 1, string(fsm.BatchClosed): 0} {
			if p, err := query.Batches(s, query.BatchFilter{State: filter}); err != nil || len(p.Batches) != want {
				t.Errorf("batches %q: %d, %v; want %d", filter, len(p.Batches), err, want)
			}
		}
		in, err := query.Inspect(s, batch)
		if err != nil || in.Batch.BatchID != batch || len(in.Jobs) != 1 || in.Jobs[0].JobID != j1 || in.HeadAttempt != nil || len(in.Attempts) != 0 {
			t.Errorf("the batch's inspection: %+v, %v", in, err)
		}
		streams, err := query.BatchStreams(s, batch)
		if err != nil || len(streams) != 2 || streams[0].Kind != events.KindBatch {
			t.Errorf("the batch's streams %v, %v", streams, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Waiting: a failed or cancelled job is done, a ready job is done only
// once its batch closes, and ok means every one was delivered; an
// unknown job is ENOENT and a bad cursor EINVAL.
func TestWaitSaysWhenDone(t *testing.T) {
	e, j1, j2, j3, j4 := jobs(t)
	err := e.Read(func(s engine.Snapshot) error {
		for _, c := range []struct {
			name     string
			ids      []string
			done, ok bool
		}{
			{"failed and cancelled", []string{j2, j3}, true, false},
			{"ready in an open batch", []string{j1}, false, false},
			{"still running", []string{j4}, false, false},
		} {
			res, err := query.Wait(s, c.ids, "", "", 0)
			if err != nil || res.Done != c.done || res.OK != c.ok || len(res.Jobs) != len(c.ids) {
				t.Errorf("%s: %+v, %v; want done %v ok %v", c.name, res, err, c.done, c.ok)
			}
		}
		if _, err := query.Wait(s, []string{"nope"}, "", "", 0); errs.CodeOf(err) != errs.ENOENT {
			t.Errorf("an unknown job: %v", err)
		}
		if _, err := query.Wait(s, []string{j1}, "", "x", 0); errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("a bad cursor: %v", err)
		}
		first, _ := query.Wait(s, nil, "U", "", 1)
		if len(first.Jobs) != 1 || first.Next == "" {
			t.Fatalf("a page of one: %+v", first)
		}
		second, _ := query.Wait(s, nil, "U", first.Next, 1)
		if len(second.Jobs) != 1 || second.Jobs[0].JobID == first.Jobs[0].JobID {
			t.Errorf("the next page: %+v after %+v", second, first)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
