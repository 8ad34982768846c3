package projections_test

import (
	"errors"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/projections"
	bolt "go.etcd.io/bbolt"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func openDB(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "p.db"), 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Update(projections.Create); err != nil {
		t.Fatal(err)
	}
	return db
}

// store applies events to aggregates and puts each new state into the
// projections as the engine does in its append: the state, its derived
// entries moved from the old state's, the stream's seq, the command's
// range and the checkpoint.
type store struct {
	t        *testing.T
	db       *bolt.DB
	ms       *fsm.Machines
	seq      uint64
	states   map[events.StreamID]aggregate.State
	streams  map[events.StreamID][]uint64
	commands map[string]engine.CommandRange
}

func newStore(t *testing.T) *store {
	return &store{t: t, db: openDB(t), ms: fsm.New(), states: map[events.StreamID]aggregate.State{},
		streams: map[events.StreamID][]uint64{}, commands: map[string]engine.CommandRange{}}
}

func (s *store) apply(k events.Kind, id, command string, p events.Payload) aggregate.State {
	s.t.Helper()
	sid := events.StreamID{Kind: k, ID: id}
	old := s.states[sid]
	var prev aggregate.State
	v := uint64(1)
	if old != nil {
		prev, v = aggregate.Clone(old), old.Head().Version+1
	}
	s.seq++
	st, err := aggregate.Apply(s.ms, prev, &events.Envelope{Seq: s.seq, Stream: sid, Version: v, RecordedAt: t0.Add(time.Duration(s.seq) * time.Minute)}, p)
	if err != nil {
		s.t.Fatalf("apply %s to %s: %v", p.EventType(), sid, err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		px := projections.Wrap(tx)
		if err := px.Put(old, st); err != nil {
			return err
		}
		if err := px.PutStreamSeq(sid, s.seq); err != nil {
			return err
		}
		if command != "" {
			if err := px.PutCommand(command, s.seq); err != nil {
				return err
			}
		}
		return px.SetCheckpoint(s.seq)
	})
	if err != nil {
		s.t.Fatal(err)
	}
	s.states[sid] = st
	s.streams[sid] = append(s.streams[sid], s.seq)
	if command != "" {
		r, ok := s.commands[command]
		if !ok {
			r.First = s.seq
		}
		r.Last = s.seq
		s.commands[command] = r
	}
	return st
}

func (s *store) view(fn func(*projections.Tx)) {
	s.t.Helper()
	if err := s.db.View(func(tx *bolt.Tx) error { fn(projections.Wrap(tx)); return nil }); err != nil {
		s.t.Fatal(err)
	}
}

// A day of a job and its batch: submitted, completed into a batch,
// delivered, closed; a second job failed; a third left running.
func (s *store) history() {
	s.apply(events.KindJob, "j1", "submit-1", &events.JobSubmitted{SourceThreadID: "T", TargetKind: "debug", DedupeKey: "k1", TimeoutAt: t0.Add(time.Hour)})
	s.apply(events.KindJob, "j2", "submit-2", &events.JobSubmitted{SourceThreadID: "T", TargetKind: "debug", TimeoutAt: t0.Add(2 * time.Hour)})
	s.apply(events.KindJob, "j3", "", &events.JobSubmitted{SourceThreadID: "U", TargetKind: "debug", TimeoutAt: t0.Add(3 * time.Hour)})
	s.apply(events.KindJob, "j1", "complete-1", &events.JobCompleted{ResultSummary: "green", BatchID: "b1"})
	s.apply(events.KindBatch, "b1", "complete-1", &events.BatchOpened{SourceThreadID: "T", TargetKind: "debug", JobIDs: []string{"j1"}, Head: true,
		MaxDeliveryAttempts: 3, RedeliveryWindowEndsAt: t0.Add(5 * time.Hour)})
	s.apply(events.KindJob, "j2", "", &events.JobFailed{Reason: "lost"})
	s.apply(events.KindAttempt, "a1", "", &events.AttemptPrepared{SourceThreadID: "T", BatchID: "b1", Generation: 1})
	s.apply(events.KindBatch, "b1", "", &events.BatchMaterialized{AttemptID: "a1", Generation: 1})
	s.apply(events.KindAttempt, "a1", "", &events.AttemptAcceptPending{RPCRequestID: "r1"})
	s.apply(events.KindAttempt, "a1", "", &events.AttemptAccepted{TurnID: "turn", CooldownUntil: t0.Add(time.Minute)})
	s.apply(events.KindBatch, "b1", "", &events.BatchDeliveryAccepted{AttemptID: "a1", Generation: 1, CooldownUntil: t0.Add(time.Minute)})
	s.apply(events.KindAttempt, "a1", "", &events.AttemptClosed{Reason: "delivered"})
	s.apply(events.KindBatch, "b1", "", &events.BatchClosed{CloseReason: "delivered"})
}

// The buckets the appends built one event at a time are the image
// derived from the final states alone: nothing a move left behind,
// nothing it forgot (replay equality, spec/engine.md). Written back
// whole or in small chunks, the image reads back the same.
func TestIncrementalEqualsTheImage(t *testing.T) {
	s := newStore(t)
	s.history()
	var states []aggregate.State
	for _, st := range s.states {
		states = append(states, st)
	}
	want, err := projections.ImageOf(states, s.commands, s.streams, s.seq)
	if err != nil {
		t.Fatal(err)
	}
	var got engine.Image
	s.db.View(func(tx *bolt.Tx) error { got, err = projections.ReadImage(tx); return err })
	compare(t, "the appends' buckets", got, want)

	for _, chunk := range []int{0, 2} {
		db := openDB(t)
		img := cloneImage(want)
		if chunk == 0 {
			err = db.Update(func(tx *bolt.Tx) error { return projections.WriteImage(tx, img) })
		} else {
			err = projections.WriteImageChunked(db, img, chunk)
		}
		if err != nil {
			t.Fatal(err)
		}
		var back engine.Image
		db.View(func(tx *bolt.Tx) error { back, err = projections.ReadImage(tx); return err })
		compare(t, "the image written back", back, want)
		db.View(func(tx *bolt.Tx) error {
			if v := projections.Wrap(tx).Version(); v != projections.Version {
				t.Errorf("written back (chunk %d): version %d", chunk, v)
			}
			return nil
		})
	}
}

func cloneImage(img engine.Image) engine.Image {
	out := engine.Image{}
	for b, m := range img {
		out[b] = maps.Clone(m)
	}
	return out
}

func compare(t *testing.T, what string, got, want engine.Image) {
	t.Helper()
	for _, b := range slices.Sorted(maps.Keys(want)) {
		g, w := got[b], want[b]
		for _, k := range slices.Sorted(maps.Keys(w)) {
			if v, ok := g[k]; !ok || !reflect.DeepEqual(v, w[k]) {
				t.Errorf("%s: %s[%q] = %q (present %v), want %q", what, b, k, v, ok, w[k])
			}
		}
		for _, k := range slices.Sorted(maps.Keys(g)) {
			if _, ok := w[k]; !ok {
				t.Errorf("%s: %s holds %q, which the states do not derive", what, b, k)
			}
		}
	}
}

// What the readers ask of the projections: a state by id, the entries of
// an index by key and by prefix, the deadlines due by a moment (and the
// next one), a counter, an idempotency key's range, a stream's seqs.
func TestReads(t *testing.T) {
	s := newStore(t)
	s.history()
	s.view(func(px *projections.Tx) {
		st, err := px.State(events.KindJob, "j1")
		if j, ok := st.(*aggregate.Job); err != nil || !ok || j.State != fsm.JobReady {
			t.Errorf("State(j1): %+v, %v", st, err)
		}
		if st, err := px.State(events.KindJob, "nope"); st != nil || err != nil {
			t.Errorf("State of no job: %+v, %v", st, err)
		}
		if refs := px.Lookup(index.Dedupe, "k1"); len(refs) != 1 || refs[0].ID != "j1" || refs[0].Kind != events.KindJob {
			t.Errorf("the dedupe key: %+v", refs)
		}
		if refs := px.Lookup(index.Dedupe, "k"); len(refs) != 0 {
			t.Errorf("a key that is a prefix of another found %+v", refs)
		}
		if refs := px.Lookup(index.JobThread, "T"); len(refs) != 2 {
			t.Errorf("thread T's jobs: %+v", refs)
		}
		if refs := px.Scan(index.ThreadOpen, ""); len(refs) != 0 {
			t.Errorf("open batches after the close: %+v", refs)
		}
		// Only j3 still runs: its timeout is the one deadline left.
		if due := px.DueBy(t0.Add(2 * time.Hour)); len(due) != 0 {
			t.Errorf("due by +2h: %+v", due)
		}
		due := px.DueBy(t0.Add(3 * time.Hour))
		if len(due) != 1 || due[0].ID != "j3" || due[0].Name != index.DueJobTimeout {
			t.Errorf("due by +3h: %+v", due)
		}
		if next, ok := px.NextDue(); !ok || next.ID != "j3" {
			t.Errorf("next due: %+v %v", next, ok)
		}
		if _, ok := px.NextDueAfter(t0.Add(3 * time.Hour)); ok {
			t.Error("a deadline after the last one")
		}
		if n := px.Count(aggregate.CountJobActive); n != 1 {
			t.Errorf("active jobs %d, want 1", n)
		}
		if r, ok := px.Command("complete-1"); !ok || r.First != 4 || r.Last != 5 {
			t.Errorf("the range of complete-1: %+v %v", r, ok)
		}
		if _, ok := px.Command("never"); ok {
			t.Error("a command never given has a range")
		}
		var seqs []uint64
		px.StreamSeqs(events.StreamID{Kind: events.KindBatch, ID: "b1"}, 0, func(seq uint64) bool { seqs = append(seqs, seq); return true })
		if !slices.Equal(seqs, []uint64{5, 8, 11, 13}) {
			t.Errorf("b1's seqs %v", seqs)
		}
		seqs = nil
		px.StreamSeqs(events.StreamID{Kind: events.KindBatch, ID: "b1"}, 8, func(seq uint64) bool { seqs = append(seqs, seq); return true })
		if !slices.Equal(seqs, []uint64{5, 8}) {
			t.Errorf("b1's seqs until 8: %v", seqs)
		}
		if px.Checkpoint() != 13 {
			t.Errorf("checkpoint %d", px.Checkpoint())
		}
		var ids []string
		px.ForEachAfter(events.KindJob, "j1", func(st aggregate.State) error { ids = append(ids, st.Head().ID); return nil })
		if !slices.Equal(ids, []string{"j2", "j3"}) {
			t.Errorf("jobs after j1: %v", ids)
		}
	})
}

// A stream whose id another extends (b1 and b10) keeps its own seqs.
func TestStreamSeqsOfPrefixIDs(t *testing.T) {
	s := newStore(t)
	s.apply(events.KindJob, "j1", "", &events.JobSubmitted{SourceThreadID: "T"})
	s.apply(events.KindJob, "j10", "", &events.JobSubmitted{SourceThreadID: "T"})
	s.apply(events.KindJob, "j1", "", &events.JobCancelled{})
	s.view(func(px *projections.Tx) {
		var seqs []uint64
		px.StreamSeqs(events.StreamID{Kind: events.KindJob, ID: "j1"}, 0, func(seq uint64) bool { seqs = append(seqs, seq); return true })
		if !slices.Equal(seqs, []uint64{1, 3}) {
			t.Errorf("j1's seqs %v, want [1 3]", seqs)
		}
	})
}

// A counter cannot go below zero: a state that leaves a count the
// projections do not hold is corruption, not a negative number.
func TestCountersNeverGoNegative(t *testing.T) {
	db := openDB(t)
	ms := fsm.New()
	running, err := aggregate.Apply(ms, nil, &events.Envelope{Seq: 1, Stream: events.StreamID{Kind: events.KindJob, ID: "j"}, Version: 1}, &events.JobSubmitted{})
	if err != nil {
		t.Fatal(err)
	}
	failed, err := aggregate.Apply(ms, aggregate.Clone(running), &events.Envelope{Seq: 2, Stream: events.StreamID{Kind: events.KindJob, ID: "j"}, Version: 2}, &events.JobFailed{})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error { return projections.Wrap(tx).Put(running, failed) })
	if !errors.Is(err, errs.Sentinel(errs.ECORRUPT)) {
		t.Fatalf("a count taken that was never given: %v", err)
	}
}

// Fresh projections are of the current version; dropped, they are empty
// and current again; a state bucket names its kind.
func TestVersionDropAndBuckets(t *testing.T) {
	s := newStore(t)
	s.history()
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := projections.Drop(tx); err != nil {
			return err
		}
		px := projections.Wrap(tx)
		if st, _ := px.State(events.KindJob, "j1"); st != nil || px.Checkpoint() != 0 || px.Version() != projections.Version {
			t.Errorf("after a drop: state %v, checkpoint %d, version %d", st, px.Checkpoint(), px.Version())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range projections.Buckets() {
		if k, ok := projections.KindOfBucket(string(b)); ok && !slices.Contains(events.Kinds, k) {
			t.Errorf("bucket %s names kind %s, not a kind", b, k)
		}
	}
	if _, ok := projections.KindOfBucket("p.index"); ok {
		t.Error("p.index names a kind")
	}
}
