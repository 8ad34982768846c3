package aggregate_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// folder applies events to states as the engine does: one global seq,
// each stream's versions in order, a minute between events.
type folder struct {
	t   *testing.T
	ms  *fsm.Machines
	seq uint64
}

func newFolder(t *testing.T) *folder { return &folder{t: t, ms: fsm.New()} }

func (f *folder) env(st aggregate.State, k events.Kind, id string) *events.Envelope {
	f.seq++
	v := uint64(1)
	if st != nil {
		v = st.Head().Version + 1
	}
	return &events.Envelope{Seq: f.seq, Stream: events.StreamID{Kind: k, ID: id}, Version: v, RecordedAt: t0.Add(time.Duration(f.seq) * time.Minute)}
}

// fold applies ps in order to st (nil: a new aggregate) and fails the
// test on an error.
func (f *folder) fold(st aggregate.State, k events.Kind, id string, ps ...events.Payload) aggregate.State {
	f.t.Helper()
	for _, p := range ps {
		var err error
		if st, err = aggregate.Apply(f.ms, st, f.env(st, k, id), p); err != nil {
			f.t.Fatalf("apply %s: %v", p.EventType(), err)
		}
	}
	return st
}

// Apply stamps the header (the first event's seq and time on creation,
// the last one's after each), moves the state as its machine says, and
// refuses, leaving the state as it was, an event out of version order
// (ECONFLICT) or one its machine does not allow (ESTATE).
func TestApply(t *testing.T) {
	f := newFolder(t)
	st := f.fold(nil, events.KindJob, "j1", &events.JobSubmitted{TargetKind: "debug", SourceThreadID: "T", TimeoutAt: t0.Add(time.Hour)})
	j := st.(*aggregate.Job)
	if j.ID != "j1" || j.State != fsm.JobRunning || j.Version != 1 || j.FirstSeq != 1 || j.LastSeq != 1 || j.CreatedSeq != 1 ||
		!j.CreatedAt.Equal(t0.Add(time.Minute)) || !j.UpdatedAt.Equal(j.CreatedAt) || j.SourceThreadID != "T" {
		t.Fatalf("after submission: %+v", j)
	}
	f.fold(st, events.KindJob, "j1", &events.JobCompleted{ResultSummary: "green", BatchID: "b1"})
	if j.State != fsm.JobReady || j.Version != 2 || j.FirstSeq != 1 || j.LastSeq != 2 || !j.CreatedAt.Equal(t0.Add(time.Minute)) ||
		!j.UpdatedAt.Equal(t0.Add(2*time.Minute)) || !j.ReadyAt.Equal(j.UpdatedAt) || j.BatchID != "b1" || j.ResultSummary != "green" {
		t.Fatalf("after completion: %+v", j)
	}
	before, _ := aggregate.Encode(st)
	for _, c := range []struct {
		name    string
		version uint64
		p       events.Payload
		code    errs.Code
	}{
		{"a version skipped", 4, &events.JobCancelled{Reason: "x"}, errs.ECONFLICT},
		{"a version repeated", 2, &events.JobCancelled{Reason: "x"}, errs.ECONFLICT},
		{"an illegal move", 3, &events.JobFailed{Reason: "x"}, errs.ESTATE},
	} {
		env := f.env(st, events.KindJob, "j1")
		env.Version = c.version
		if _, err := aggregate.Apply(f.ms, st, env, c.p); !errors.Is(err, errs.Sentinel(c.code)) {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
		if after, _ := aggregate.Encode(st); !bytes.Equal(after, before) {
			t.Errorf("%s: the refused event changed the state", c.name)
		}
	}
	// An aggregate that does not exist yet can only be created.
	if _, err := aggregate.Apply(f.ms, nil, f.env(nil, events.KindJob, "j2"), &events.JobCompleted{}); !errors.Is(err, errs.Sentinel(errs.ESTATE)) {
		t.Errorf("completing a job never submitted: %v", err)
	}
}

// Every kind has a state type, new in the pseudo-state none, of its own
// kind; a state encodes to deterministic JSON that decodes to the same
// bytes; a stored value that is not one is ECORRUPT.
func TestNewEncodeDecode(t *testing.T) {
	for _, tab := range fsm.Tables() {
		st, err := aggregate.New(tab.Kind, "x1")
		if err != nil {
			t.Fatalf("%s: %v", tab.Kind, err)
		}
		if aggregate.KindOf(st) != tab.Kind || st.Head().State != fsm.None || st.Head().ID != "x1" || st.Head().Version != 0 {
			t.Errorf("%s: new state %+v of kind %s", tab.Kind, st.Head(), aggregate.KindOf(st))
		}
		b, err := aggregate.Encode(st)
		if err != nil {
			t.Fatal(err)
		}
		back, err := aggregate.Decode(tab.Kind, b)
		if err != nil {
			t.Fatalf("%s: decode: %v", tab.Kind, err)
		}
		if again, _ := aggregate.Encode(back); !bytes.Equal(again, b) {
			t.Errorf("%s: encode, decode, encode differs:\n%s\n%s", tab.Kind, b, again)
		}
		if _, err := aggregate.Decode(tab.Kind, []byte("not json")); errs.CodeOf(err) != errs.ECORRUPT {
			t.Errorf("%s: decoding garbage: %v", tab.Kind, err)
		}
	}
	if _, err := aggregate.New("nosuchkind", "x"); errs.CodeOf(err) != errs.EINTERNAL {
		t.Errorf("an unknown kind: %v", err)
	}
}

// The sweep's deadlines, the indexes and the counts a state gives, as
// its state moves: each entry stands exactly while its rule holds.
func TestDeadlinesIndexesAndCounts(t *testing.T) {
	f := newFolder(t)
	names := func(ds []aggregate.Deadline) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Name)
		}
		return out
	}
	indexes := func(es []aggregate.IndexEntry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Index)
		}
		return out
	}

	// A job: its timeout and the active count while it runs; its thread
	// and its dedupe key always.
	job := f.fold(nil, events.KindJob, "j", &events.JobSubmitted{SourceThreadID: "T", DedupeKey: "k", TimeoutAt: t0.Add(time.Hour)}).(*aggregate.Job)
	if d := job.Deadlines(); len(d) != 1 || d[0].Name != index.DueJobTimeout || !d[0].At.Equal(t0.Add(time.Hour)) || !slices.Equal(job.Counts(), []string{aggregate.CountJobActive}) {
		t.Errorf("a running job: deadlines %+v, counts %v", d, job.Counts())
	}
	if !slices.Equal(indexes(job.Indexes()), []string{index.JobThread, index.Dedupe}) {
		t.Errorf("a job's indexes %v", indexes(job.Indexes()))
	}
	f.fold(job, events.KindJob, "j", &events.JobFailed{Reason: "lost"})
	if len(job.Deadlines()) != 0 || len(job.Counts()) != 0 {
		t.Errorf("a failed job: deadlines %v, counts %v", job.Deadlines(), job.Counts())
	}
	untimed := f.fold(nil, events.KindJob, "j2", &events.JobSubmitted{SourceThreadID: "T"}).(*aggregate.Job)
	if len(untimed.Deadlines()) != 0 || slices.Contains(indexes(untimed.Indexes()), index.Dedupe) {
		t.Errorf("a job without timeout or key: %v %v", untimed.Deadlines(), untimed.Indexes())
	}

	// A batch: open, a head, its redelivery window; parked, it waits for
	// its park hook; once its last counted attempt cools down, it closes;
	// closed undelivered, it counts and tells its hook again.
	b := f.fold(nil, events.KindBatch, "b", &events.BatchOpened{SourceThreadID: "T", TargetKind: "debug", JobIDs: []string{"j"},
		Head: true, MaxDeliveryAttempts: 1, RedeliveryWindowEndsAt: t0.Add(time.Hour)}).(*aggregate.Batch)
	if got := names(b.Deadlines()); !slices.Equal(got, []string{index.DueRedeliveryWindow}) {
		t.Errorf("an open batch's deadlines %v", got)
	}
	if got := indexes(b.Indexes()); !slices.Equal(got, []string{index.BatchThread, index.ThreadOpen, index.Head}) {
		t.Errorf("an open head's indexes %v", got)
	}
	f.fold(b, events.KindBatch, "b", &events.BatchJobsAdded{JobIDs: []string{"j", "j3"}})
	if !slices.Equal(b.JobIDs, []string{"j", "j3"}) {
		t.Errorf("jobs added twice: %v", b.JobIDs)
	}
	f.fold(b, events.KindBatch, "b", &events.BatchMaterialized{AttemptID: "a", Generation: 1},
		&events.BatchDeliveryAccepted{AttemptID: "a", CooldownUntil: t0.Add(2 * time.Hour)})
	if !b.BudgetSpent() || !slices.Contains(names(b.Deadlines()), index.DueMaxAttempts) {
		t.Errorf("a batch whose one attempt was counted: spent %v, deadlines %v", b.BudgetSpent(), names(b.Deadlines()))
	}
	f.fold(b, events.KindBatch, "b", &events.BatchReplayPolicyChanged{ReplayPolicy: aggregate.ReplayManual, Reason: "unknown"})
	if !b.Parked() || !slices.Contains(names(b.Deadlines()), index.DueParkHook) || !slices.Contains(indexes(b.Indexes()), index.Parked) ||
		slices.Contains(names(b.Deadlines()), index.DueMaxAttempts) {
		t.Errorf("a parked batch: deadlines %v, indexes %v", names(b.Deadlines()), indexes(b.Indexes()))
	}
	f.fold(b, events.KindBatch, "b", &events.BatchParkNotified{Attempt: 1, NextRetryAt: t0.Add(3 * time.Hour)})
	if got := b.Deadlines(); !slices.ContainsFunc(got, func(d aggregate.Deadline) bool {
		return d.Name == index.DueParkHook && d.At.Equal(t0.Add(3*time.Hour))
	}) {
		t.Errorf("a park hook that failed is tried again at its next retry: %+v", got)
	}
	f.fold(b, events.KindBatch, "b", &events.BatchParkNotified{Attempt: 2, OK: true})
	if slices.Contains(names(b.Deadlines()), index.DueParkHook) {
		t.Error("a parked batch whose hook was told still waits for it")
	}
	f.fold(b, events.KindBatch, "b", &events.BatchClosed{CloseReason: "manual_expired", Undelivered: true})
	if b.Open() || b.Parked() || b.IsHead || !slices.Equal(b.Counts(), []string{aggregate.CountBatchUndelivered}) ||
		!slices.Equal(names(b.Deadlines()), []string{index.DueParkHook}) || !slices.Equal(indexes(b.Indexes()), []string{index.BatchThread}) {
		t.Errorf("closed undelivered: counts %v, deadlines %v, indexes %v", b.Counts(), names(b.Deadlines()), indexes(b.Indexes()))
	}

	// An attempt: live while not ended; arm-pending has its deadline;
	// an accepted turn observed until its deadline is tracked.
	a := f.fold(nil, events.KindAttempt, "a", &events.AttemptPrepared{SourceThreadID: "T", BatchID: "b", Generation: 1}).(*aggregate.Attempt)
	if !a.Live() || !slices.Equal(indexes(a.Indexes()), []string{index.BatchAttempts, index.ThreadLive}) || len(a.Deadlines()) != 0 {
		t.Errorf("a prepared attempt: live %v, indexes %v, deadlines %v", a.Live(), indexes(a.Indexes()), a.Deadlines())
	}
	f.fold(a, events.KindAttempt, "a", &events.AttemptAcceptPending{RPCRequestID: "r1"}, &events.AttemptAccepted{TurnID: "turn",
		ObservationDeadline: t0.Add(time.Hour), CooldownUntil: t0.Add(time.Minute)})
	if !a.Tracking() || !slices.Equal(names(a.Deadlines()), []string{index.DueObservation}) ||
		!slices.Contains(indexes(a.Indexes()), index.Tracking) || !slices.Contains(indexes(a.Indexes()), index.ThreadSends) {
		t.Errorf("an accepted, observed attempt: tracking %v, deadlines %v, indexes %v", a.Tracking(), names(a.Deadlines()), indexes(a.Indexes()))
	}
	f.fold(a, events.KindAttempt, "a", &events.AttemptClosed{Reason: "delivered"})
	if a.Live() || a.Tracking() || len(a.Deadlines()) != 0 || slices.Contains(indexes(a.Indexes()), index.ThreadLive) {
		t.Errorf("a closed attempt: live %v, tracking %v, deadlines %v", a.Live(), a.Tracking(), a.Deadlines())
	}
	d := f.fold(nil, events.KindAttempt, "d", &events.AttemptPrepared{SourceThreadID: "U", BatchID: "c", Generation: 1},
		&events.AttemptArmPendingNoted{LeaseID: "l", ArmPendingDeadline: t0.Add(5 * time.Minute)}).(*aggregate.Attempt)
	if got := d.Deadlines(); len(got) != 1 || got[0].Name != index.DueArmPending || !got[0].At.Equal(t0.Add(5*time.Minute)) {
		t.Errorf("an arm-pending attempt's deadlines %+v", got)
	}
	f.fold(a, events.KindAttempt, "a") // nothing: a no-op fold
	r := f.fold(nil, events.KindAttempt, "r", &events.AttemptPrepared{SourceThreadID: "V", BatchID: "e", Generation: 1},
		&events.AttemptAcceptPending{RPCRequestID: "r1"}, &events.AttemptRejectedBeforeAccept{Reason: "busy"},
		&events.AttemptAcceptPending{RPCRequestID: "r2"}).(*aggregate.Attempt)
	if !slices.Equal(r.RejectedRequestIDs, []string{"r1"}) || r.RPCRequestID != "r2" || r.State != fsm.AttemptAcceptPending {
		t.Errorf("a rejected then retried attempt: %+v", r)
	}
}
