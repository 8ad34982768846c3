package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/events"
	bolt "go.etcd.io/bbolt"
)

// A submitter that leads the group commit must return once its own
// request is committed, even when more is queued: the rest is handed to
// a new leader. Without the hand-off, a caller could wait on other
// callers' commits for as long as load lasts.
func TestLeaderReturnsOnceItsOwnRequestIsCommitted(t *testing.T) {
	e := openTest(t)

	release1, release2 := make(chan struct{}), make(chan struct{})
	started1, started2 := make(chan struct{}), make(chan struct{})

	// The first request makes its caller the leader and holds the
	// transaction. It is an exclusive one, so that nothing queued behind
	// it can join its commit: what happens next is the hand-off alone.
	leaderDone := make(chan error, 1)
	go func() {
		leaderDone <- e.exclusive(context.Background(), func(*bolt.Tx) error {
			close(started1)
			<-release1
			return nil
		})
	}()
	<-started1

	// A second request queues behind it.
	secondDone := make(chan error, 1)
	go func() {
		_, err := e.Execute(context.Background(), Meta{}, DeciderFunc(func(View, time.Time) (Decision, error) {
			close(started2)
			<-release2
			return Decision{Outcome: "ok"}, nil
		}))
		secondDone <- err
	}()
	for e.queued() == 0 {
		time.Sleep(time.Millisecond)
	}

	// Let the first commit finish. The second request's decision then
	// blocks in whichever goroutine leads next; the first caller must
	// still get its answer.
	close(release1)
	<-started2
	select {
	case err := <-leaderDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // a hang detector, not a timing bound
		close(release2)
		t.Fatal("the first caller is still leading the second caller's commit")
	}
	close(release2)
	if err := <-secondDone; err != nil {
		t.Fatal(err)
	}
}

// Requests queued while a group is being decided join its transaction:
// one commit, one fsync, for both.
func TestRequestsQueuedDuringDecisionJoinTheCommit(t *testing.T) {
	e := openTest(t)
	before := e.Stats()

	started, release := make(chan struct{}), make(chan struct{})
	firstDone := make(chan error, 1)
	go func() {
		_, err := e.Execute(context.Background(), Meta{}, DeciderFunc(func(View, time.Time) (Decision, error) {
			close(started)
			<-release
			return Decision{Outcome: "ok"}, nil
		}))
		firstDone <- err
	}()
	<-started
	secondDone := make(chan error, 1)
	go func() {
		_, err := e.Execute(context.Background(), Meta{}, DeciderFunc(func(View, time.Time) (Decision, error) {
			return Decision{Outcome: "ok"}, nil
		}))
		secondDone <- err
	}()
	for e.queued() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if err := <-secondDone; err != nil {
		t.Fatal(err)
	}
	st := e.Stats()
	if c, r := st.Commits-before.Commits, st.Requests-before.Requests; c != 1 || r != 2 {
		t.Fatalf("%d commits answered %d requests; want the second request to join the first commit", c, r)
	}
}

// An exclusive request queued while a group is deciding does not join it:
// it runs alone, after that group's commit.
func TestExclusiveRequestNeverJoinsAGroup(t *testing.T) {
	e := openTest(t)

	started, release := make(chan struct{}), make(chan struct{})
	firstDone := make(chan error, 1)
	go func() {
		_, err := e.Execute(context.Background(), Meta{Actor: events.ActorCLI}, DeciderFunc(func(View, time.Time) (Decision, error) {
			close(started)
			<-release
			sid := events.StreamID{Kind: events.KindJob, ID: "j1"}
			return Decision{Emits: []Emit{{Stream: sid, Payload: &events.JobSubmitted{
				TargetKind: "cli", SourceThreadID: "t", TaskKind: "k", TaskSummary: "s", DeliveryPolicy: events.FailClosedPolicy,
			}}}}, nil
		}))
		firstDone <- err
	}()
	<-started
	var sawFirst, ran bool
	exclusiveDone := make(chan error, 1)
	go func() {
		exclusiveDone <- e.exclusive(context.Background(), func(tx *bolt.Tx) error {
			ran = true
			sawFirst = tx.Bucket(bucketLog).Get(binary.BigEndian.AppendUint64(nil, 1)) != nil
			return nil
		})
	}()
	for e.queued() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if err := <-exclusiveDone; err != nil {
		t.Fatal(err)
	}
	if !ran || !sawFirst {
		t.Fatalf("exclusive ran=%v, saw the group's committed event=%v; want it run alone after the group", ran, sawFirst)
	}
}

// openTest opens a log that is verified when the test ends (the internal
// tests cannot use enginetest.Open, which imports this package).
func openTest(t *testing.T) *Engine {
	t.Helper()
	path := filepath.Join(t.TempDir(), "log.db")
	e, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Close()
		rep, err := VerifyFile(context.Background(), path, time.Second)
		if err != nil || !rep.OK() {
			t.Errorf("log does not verify: %v %+v", err, rep.Problems)
		}
	})
	return e
}

// The writer's state cache stays within maxCache however many streams are
// written, and a state read after the cache was emptied is still the
// committed one.
func TestStateCacheIsBounded(t *testing.T) {
	e := openTest(t)
	ctx := context.Background()
	first := events.StreamID{Kind: events.KindJob, ID: "cache-000000"}
	for i := range maxCache + 10 {
		sid := events.StreamID{Kind: events.KindJob, ID: fmt.Sprintf("cache-%06d", i)}
		if _, err := e.Append(ctx, Meta{Actor: events.ActorCLI}, sid, 0, &events.JobSubmitted{TargetKind: "cli", SourceThreadID: "t", TaskKind: "ci"}); err != nil {
			t.Fatal(err)
		}
		if len(e.cache) > maxCache {
			t.Fatalf("after %d streams the cache holds %d states, over %d", i+1, len(e.cache), maxCache)
		}
	}
	if _, ok := e.cache[first]; ok {
		t.Fatalf("the first stream is still cached after %d more; the cache was never emptied", maxCache)
	}
	// Version 1 is only accepted if the writer loads the stream's state.
	if _, err := e.Append(ctx, Meta{Actor: events.ActorCLI}, first, 1, &events.JobCancelled{Reason: "test"}); err != nil {
		t.Fatalf("append to an evicted stream at its committed version: %v", err)
	}
}
