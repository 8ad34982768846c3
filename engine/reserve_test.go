package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/projections"
	bolt "go.etcd.io/bbolt"
)

func appendJob(t *testing.T, e *engine.Engine, id string) {
	t.Helper()
	sid := events.StreamID{Kind: events.KindJob, ID: id}
	if _, err := e.Append(context.Background(), engine.Meta{Actor: events.ActorCLI}, sid, 0, &events.JobSubmitted{TargetKind: "cli", SourceThreadID: "t", TaskKind: "ci",
		TaskSummary: "a summary long enough that a few hundred of these fill many pages"}); err != nil {
		t.Fatal(err)
	}
}

func highWater(t *testing.T, e *engine.Engine) int64 {
	t.Helper()
	var n int64
	if err := e.DB().View(func(tx *bolt.Tx) error { n = tx.Size(); return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func hasReserve(t *testing.T, e *engine.Engine) bool {
	t.Helper()
	var ok bool
	if err := e.DB().View(func(tx *bolt.Tx) error { ok = tx.Bucket(engine.BucketReserve) != nil; return nil }); err != nil {
		t.Fatal(err)
	}
	return ok
}

// The high-water mark moves in bulk: over 3,000 single-event commits it
// moves a handful of times, where bbolt alone moves it in about a third
// of them. A reserve never outlives the commit after the one that made
// it.
func TestReserveMovesTheHighWaterMarkInBulk(t *testing.T) {
	e := openTest(t)
	moves, reserves, prev := 0, 0, highWater(t, e)
	heldBefore := false
	for i := range 3000 {
		appendJob(t, e, fmt.Sprintf("job-%06d", i))
		if hw := highWater(t, e); hw != prev {
			moves, prev = moves+1, hw
		}
		held := hasReserve(t, e)
		if held && heldBefore {
			t.Fatalf("commit %d: the reserve survived the commit after the one that stored it", i)
		}
		if held {
			reserves++
		}
		heldBefore = held
	}
	// Each reserve is 256 pages written for nothing but the move of the
	// mark: about as many reserves as moves, never one per few commits.
	if reserves > moves+5 {
		t.Fatalf("%d reserves stored for %d moves of the mark in 3000 commits", reserves, moves)
	}
	// 3,000 events grow the file by some 1,100 pages: at reservePages
	// (256) a move, about 5 moves. Without the reserve it is some 860.
	if moves > 60 {
		t.Fatalf("the high-water mark moved in %d of 3000 commits; want a handful", moves)
	}
	if rep, err := e.Verify(context.Background()); err != nil || !rep.OK() {
		t.Fatalf("verify: %v %+v", err, rep.Problems)
	}
}

// A reserve left in the file by a crash between its two commits is
// deleted by the first commit after Open.
func TestReserveLeftByACrashIsDeleted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.db")
	e, err := engine.Open(path, engine.Options{Projections: projections.Store{}, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	// Stand in for the crash: a reserve committed, the delete never run.
	if err := e.DB().Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(engine.BucketReserve)
		if err != nil {
			return err
		}
		return b.Put([]byte("filler"), make([]byte, 64<<10))
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e, err = engine.Open(path, engine.Options{Projections: projections.Store{}, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !hasReserve(t, e) {
		t.Fatal("setup: no reserve in the file")
	}
	appendJob(t, e, "job-after-crash")
	if hasReserve(t, e) {
		t.Fatal("the first commit after Open kept the reserve a crash left")
	}
	if rep, err := e.Verify(context.Background()); err != nil || !rep.OK() {
		t.Fatalf("verify: %v %+v", err, rep.Problems)
	}
}
