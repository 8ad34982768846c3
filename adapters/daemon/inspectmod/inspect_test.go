package inspectmod_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/daemon/inspectmod"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/daemontest"
)

// The reading side on a daemon of its own (the host and this module), on
// the real socket and log and a manual clock; the built-in debug target
// is the delivery edge.

type rig struct{ *daemontest.Daemon }

func start(t *testing.T) rig { return rig{daemontest.Start(t, nil, inspectmod.New())} }

func (r rig) behave(thread, b string) {
	r.T.Helper()
	daemontest.Call(r.Daemon, api.DebugTargetSet, api.DebugSetArgs{SourceThreadID: thread, Behaviour: b})
}

func (r rig) submit(thread string) string {
	r.T.Helper()
	return daemontest.Call(r.Daemon, api.JobSubmit, api.SubmitArgs{TargetKind: command.TargetDebug, SourceThreadID: thread, TaskKind: "ci", TaskSummary: "work"}).JobID
}

func (r rig) complete(job string) {
	r.T.Helper()
	daemontest.Call(r.Daemon, api.JobComplete, api.CompleteArgs{JobID: job, ResultSummary: "done " + job})
}

func (r rig) head() uint64 {
	r.T.Helper()
	return daemontest.Call(r.Daemon, api.DaemonStatus, api.Empty{}).LogHeadSeq
}

func (r rig) job(id string) query {
	r.T.Helper()
	v := daemontest.Call(r.Daemon, api.JobQuery, api.JobArgs{JobID: id})
	return query{state: string(v.State), batch: v.Batch.BatchID}
}

type query struct{ state, batch string }

func at(t time.Time) *time.Time { return &t }

// Every bad moment and every name of the wrong kind is refused with its
// code and a message that says why, and appends nothing.
func TestBadMomentsAndNamesAreRefused(t *testing.T) {
	r := start(t)
	r.behave("T", target.Accept) // the batch stays open: a head to inspect
	job := r.submit("T")
	r.complete(job)
	batch := r.job(job).batch
	head := r.head()
	future, past := daemontest.T0.Add(time.Hour), daemontest.T0.Add(-24*time.Hour)
	for _, c := range []struct {
		name string
		call func() error
		code errs.Code
		says string
	}{
		{"seq and as-of both", func() error {
			_, err := api.BatchInspect.Call(r.Client, api.BatchArgs{BatchID: batch, PastArgs: api.PastArgs{AsOfSeq: 1, AsOf: at(daemontest.T0)}})
			return err
		}, errs.EINVAL, "not both"},
		{"a seq past the head", func() error {
			_, err := api.JobQuery.Call(r.Client, api.JobArgs{JobID: job, PastArgs: api.PastArgs{AsOfSeq: head + 1}})
			return err
		}, errs.EINVAL, "past the head of the log"},
		{"a time in the future", func() error {
			_, err := api.BatchInspect.Call(r.Client, api.BatchArgs{BatchID: batch, PastArgs: api.PastArgs{AsOf: &future}})
			return err
		}, errs.EINVAL, "in the future"},
		{"a time before the first event", func() error {
			_, err := api.BatchInspect.Call(r.Client, api.BatchArgs{BatchID: batch, PastArgs: api.PastArgs{AsOf: &past}})
			return err
		}, errs.EINVAL, "before the first event"},
		{"a batch named as a job", func() error {
			_, err := api.JobQuery.Call(r.Client, api.JobArgs{JobID: batch})
			return err
		}, errs.EINVAL, "is a batch, not a job"},
		{"a job named as a batch", func() error {
			_, err := api.BatchInspect.Call(r.Client, api.BatchArgs{BatchID: job})
			return err
		}, errs.EINVAL, "is a job, not a batch"},
		{"a job named as a batch, in the past", func() error {
			_, err := api.BatchInspect.Call(r.Client, api.BatchArgs{BatchID: job, PastArgs: api.PastArgs{AsOfSeq: 1}})
			return err
		}, errs.EINVAL, "is a job, not a batch"},
		{"a job named as a batch, its story", func() error {
			_, err := api.History.Call(r.Client, api.HistoryArgs{BatchID: job})
			return err
		}, errs.EINVAL, "is a job, not a batch"},
		{"no such job", func() error {
			_, err := api.JobQuery.Call(r.Client, api.JobArgs{JobID: "01a00000-0000-7000-8000-000000000000"})
			return err
		}, errs.ENOENT, ""},
		{"a job before it was submitted", func() error {
			r2 := r.submit("U")
			defer r.complete(r2)
			_, err := api.JobQuery.Call(r.Client, api.JobArgs{JobID: r2, PastArgs: api.PastArgs{AsOfSeq: 1}})
			return err
		}, errs.ENOENT, "did not exist yet at seq 1"},
		{"the head of no thread", func() error {
			_, err := api.BatchInspectHead.Call(r.Client, api.ThreadArgs{})
			return err
		}, errs.EINVAL, "source thread id is empty"},
		{"a thread with no open batch", func() error {
			_, err := api.BatchInspectHead.Call(r.Client, api.ThreadArgs{SourceThreadID: "nobody"})
			return err
		}, errs.ENOENT, "has no open batch"},
		{"a thread with no open batch then", func() error {
			_, err := api.BatchInspectHead.Call(r.Client, api.ThreadArgs{SourceThreadID: "T", PastArgs: api.PastArgs{AsOfSeq: 1}})
			return err
		}, errs.ENOENT, "had no open batch at seq 1"},
		{"a story of nothing", func() error {
			_, err := api.History.Call(r.Client, api.HistoryArgs{})
			return err
		}, errs.EINVAL, "name a batch, a job or a thread"},
		{"a story before its batch", func() error {
			_, err := api.History.Call(r.Client, api.HistoryArgs{BatchID: batch, PastArgs: api.PastArgs{AsOfSeq: 1}})
			return err
		}, errs.ENOENT, "did not exist yet at seq 1"},
		{"a story of a thread with no open batch", func() error {
			_, err := api.History.Call(r.Client, api.HistoryArgs{SourceThreadID: "nobody"})
			return err
		}, errs.ENOENT, "has no open batch"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := r.head()
			err := c.call()
			if errs.CodeOf(err) != c.code || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("%v, want %s saying %q", err, c.code, c.says)
			}
			if after := r.head(); after != before && c.name != "a job before it was submitted" {
				t.Fatalf("a refusal appended: head %d -> %d", before, after)
			}
		})
	}
}

// A job, a batch and a thread's head as of a past seq or time are their
// state right after that event: the job running before its completion,
// the batch queued before its delivery with the core's gate of then;
// the present is unchanged and carries no as_of_seq.
func TestThePastIsTheStateThen(t *testing.T) {
	r := start(t)
	r.behave("T", target.Accept)
	job := r.submit("T")
	submitted := r.head()
	submittedAt := r.Clock.Now()
	r.Advance(time.Minute)
	r.complete(job)
	batch := r.job(job).batch

	then := daemontest.Call(r.Daemon, api.JobQuery, api.JobArgs{JobID: job, PastArgs: api.PastArgs{AsOfSeq: submitted}})
	if then.State != fsm.JobRunning || then.AsOfSeq != submitted || then.Batch != nil {
		t.Fatalf("the job at seq %d: %s in %+v as of %d, want running in no batch", submitted, then.State, then.Batch, then.AsOfSeq)
	}
	byTime := daemontest.Call(r.Daemon, api.JobQuery, api.JobArgs{JobID: job, PastArgs: api.PastArgs{AsOf: &submittedAt}})
	if byTime.AsOfSeq != submitted || byTime.State != fsm.JobRunning {
		t.Fatalf("the job as of %s: seq %d %s, want seq %d running", submittedAt, byTime.AsOfSeq, byTime.State, submitted)
	}
	now := daemontest.Call(r.Daemon, api.JobQuery, api.JobArgs{JobID: job})
	if now.State != fsm.JobReady || now.AsOfSeq != 0 {
		t.Fatalf("the job now: %s as of %d", now.State, now.AsOfSeq)
	}

	// The batch's story, to find the seq it was opened at.
	story := daemontest.Call(r.Daemon, api.History, api.HistoryArgs{BatchID: batch})
	var opened uint64
	for _, e := range story.Entries {
		if e.Type == "batch.opened" {
			opened = e.Seq
		}
	}
	if opened == 0 {
		t.Fatalf("no batch.opened in the batch's story: %+v", story.Entries)
	}
	in := daemontest.Call(r.Daemon, api.BatchInspect, api.BatchArgs{BatchID: batch, PastArgs: api.PastArgs{AsOfSeq: opened}})
	if in.Batch.State != fsm.BatchQueued || in.AsOfSeq != opened || len(in.Attempts) != 0 || in.Gate == "" {
		t.Fatalf("the batch at seq %d: %s, %d attempts, gate %q, as of %d", opened, in.Batch.State, len(in.Attempts), in.Gate, in.AsOfSeq)
	}
	headThen := daemontest.Call(r.Daemon, api.BatchInspectHead, api.ThreadArgs{SourceThreadID: "T", PastArgs: api.PastArgs{AsOfSeq: opened}})
	if headThen.Batch.BatchID != batch || headThen.Batch.State != fsm.BatchQueued {
		t.Fatalf("the head at seq %d: %+v", opened, headThen.Batch)
	}
	cur := daemontest.Call(r.Daemon, api.BatchInspect, api.BatchArgs{BatchID: batch})
	if cur.Batch.State != fsm.BatchCooldown || cur.AsOfSeq != 0 || len(cur.Attempts) != 1 {
		t.Fatalf("the batch now: %s, %d attempts, as of %d", cur.Batch.State, len(cur.Attempts), cur.AsOfSeq)
	}
}

// A story lists the events of a batch with its attempts and jobs (or of
// a job, or of a thread's head batch) in log order, in pages; as of a
// past seq it stops there.
func TestHistoryTellsTheStory(t *testing.T) {
	r := start(t)
	r.behave("T", target.Accept)
	job := r.submit("T")
	r.complete(job)
	batch := r.job(job).batch
	all := daemontest.Call(r.Daemon, api.History, api.HistoryArgs{BatchID: batch})
	var types []string
	for i, e := range all.Entries {
		types = append(types, e.Type)
		if i > 0 && e.Seq <= all.Entries[i-1].Seq {
			t.Fatalf("entries out of log order: %+v", all.Entries)
		}
	}
	for _, want := range []string{"batch.opened", "job.submitted", "job.completed", "attempt.prepared", "attempt.accepted"} {
		if !strings.Contains(strings.Join(types, " "), want) {
			t.Errorf("the batch's story %v lacks %s", types, want)
		}
	}
	byThread := daemontest.Call(r.Daemon, api.History, api.HistoryArgs{SourceThreadID: "T"})
	if len(byThread.Entries) != len(all.Entries) {
		t.Errorf("the thread's head story has %d entries, the batch's %d", len(byThread.Entries), len(all.Entries))
	}
	ofJob := daemontest.Call(r.Daemon, api.History, api.HistoryArgs{JobID: job})
	if len(ofJob.Entries) == 0 || ofJob.Entries[0].Type != "job.submitted" {
		t.Errorf("the job's story: %+v", ofJob.Entries)
	}

	// In pages of two, the same entries.
	var paged []uint64
	for after := uint64(0); ; {
		p := daemontest.Call(r.Daemon, api.History, api.HistoryArgs{BatchID: batch, After: after, Limit: 2})
		if len(p.Entries) > 2 {
			t.Fatalf("a page of %d entries, limit 2", len(p.Entries))
		}
		for _, e := range p.Entries {
			paged = append(paged, e.Seq)
		}
		if p.Next == 0 {
			break
		}
		after = p.Next
	}
	if len(paged) != len(all.Entries) {
		t.Errorf("paged %v, whole %d entries", paged, len(all.Entries))
	}

	// As of the attempt's preparation, nothing after it.
	var completed uint64
	for _, e := range all.Entries {
		if e.Type == "attempt.prepared" {
			completed = e.Seq
		}
	}
	cut := daemontest.Call(r.Daemon, api.History, api.HistoryArgs{BatchID: batch, PastArgs: api.PastArgs{AsOfSeq: completed}})
	for _, e := range cut.Entries {
		if e.Seq > completed {
			t.Errorf("the story as of seq %d tells seq %d (%s)", completed, e.Seq, e.Type)
		}
	}
	if len(cut.Entries) == 0 || len(cut.Entries) >= len(all.Entries) {
		t.Errorf("the story as of seq %d has %d of %d entries", completed, len(cut.Entries), len(all.Entries))
	}
}

// The lists: jobs of a thread and by state, batches by state, a
// thread's batches, each in pages that join up to the whole.
func TestListsAndPages(t *testing.T) {
	r := start(t)
	r.behave("*", target.Deliver)
	var jobs []string
	for range 5 {
		j := r.submit("T")
		jobs = append(jobs, j)
	}
	r.complete(jobs[0])
	r.submit("U")

	ofT := daemontest.Call(r.Daemon, api.JobList, api.JobListArgs{SourceThreadID: "T"})
	if len(ofT.Jobs) != 5 {
		t.Fatalf("thread T has %d jobs, want 5", len(ofT.Jobs))
	}
	running := daemontest.Call(r.Daemon, api.JobList, api.JobListArgs{Status: string(fsm.JobRunning)})
	if len(running.Jobs) != 5 {
		t.Fatalf("%d running jobs, want 5 (4 of T, 1 of U)", len(running.Jobs))
	}
	seen := map[string]bool{}
	for after := ""; ; {
		p := daemontest.Call(r.Daemon, api.JobList, api.JobListArgs{SourceThreadID: "T", After: after, Limit: 2})
		for _, j := range p.Jobs {
			if seen[j.JobID] {
				t.Fatalf("job %s listed twice across pages", j.JobID)
			}
			seen[j.JobID] = true
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if len(seen) != 5 {
		t.Errorf("pages of 2 listed %d jobs, want 5", len(seen))
	}
	closed := daemontest.Call(r.Daemon, api.BatchList, api.BatchListArgs{State: string(fsm.BatchClosed)})
	if len(closed.Batches) != 1 || closed.Batches[0].SourceThreadID != "T" {
		t.Fatalf("closed batches: %+v", closed.Batches)
	}
	th := daemontest.Call(r.Daemon, api.ThreadHistory, api.ThreadHistoryArgs{SourceThreadID: "T"})
	if len(th.Batches) != 1 {
		t.Fatalf("thread T's batches: %+v", th.Batches)
	}
	if _, err := api.ThreadHistory.Call(r.Client, api.ThreadHistoryArgs{}); errs.CodeOf(err) != errs.EINVAL {
		t.Fatalf("a thread history of no thread: %v", err)
	}
}
