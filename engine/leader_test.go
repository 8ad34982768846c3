package engine_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
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
		leaderDone <- engine.Exclusive(e, context.Background(), func(*bolt.Tx) error {
			close(started1)
			<-release1
			return nil
		})
	}()
	<-started1

	// A second request queues behind it.
	secondDone := make(chan error, 1)
	go func() {
		_, err := e.Execute(context.Background(), engine.Meta{}, engine.DeciderFunc(func(engine.View, time.Time) (engine.Decision, error) {
			close(started2)
			<-release2
			return engine.Decision{Outcome: "ok"}, nil
		}))
		secondDone <- err
	}()
	for engine.Queued(e) == 0 {
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
		_, err := e.Execute(context.Background(), engine.Meta{}, engine.DeciderFunc(func(engine.View, time.Time) (engine.Decision, error) {
			close(started)
			<-release
			return engine.Decision{Outcome: "ok"}, nil
		}))
		firstDone <- err
	}()
	<-started
	secondDone := make(chan error, 1)
	go func() {
		_, err := e.Execute(context.Background(), engine.Meta{}, engine.DeciderFunc(func(engine.View, time.Time) (engine.Decision, error) {
			return engine.Decision{Outcome: "ok"}, nil
		}))
		secondDone <- err
	}()
	for engine.Queued(e) == 0 {
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
		_, err := e.Execute(context.Background(), engine.Meta{Actor: events.ActorCLI}, engine.DeciderFunc(func(engine.View, time.Time) (engine.Decision, error) {
			close(started)
			<-release
			sid := events.StreamID{Kind: events.KindJob, ID: "j1"}
			return engine.Decision{Emits: []engine.Emit{{Stream: sid, Payload: &events.JobSubmitted{
				TargetKind: "cli", SourceThreadID: "t", TaskKind: "k", TaskSummary: "s", DeliveryPolicy: events.FailClosedPolicy,
			}}}}, nil
		}))
		firstDone <- err
	}()
	<-started
	var sawFirst, ran bool
	exclusiveDone := make(chan error, 1)
	go func() {
		exclusiveDone <- engine.Exclusive(e, context.Background(), func(tx *bolt.Tx) error {
			ran = true
			sawFirst = tx.Bucket(engine.BucketLog).Get(binary.BigEndian.AppendUint64(nil, 1)) != nil
			return nil
		})
	}()
	for engine.Queued(e) == 0 {
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

// openTest opens a log that is verified when the test ends.
func openTest(t *testing.T) *engine.Engine {
	t.Helper()
	return enginetest.Open(t, filepath.Join(t.TempDir(), "log.db"), engine.Options{NoSync: true})
}

// The writer's state cache stays within MaxCache however many streams
// are written, and a state read after the cache was emptied is still the
// committed one.
func TestStateCacheIsBounded(t *testing.T) {
	e := openTest(t)
	ctx := context.Background()
	first := events.StreamID{Kind: events.KindJob, ID: "cache-000000"}
	for i := range engine.MaxCache + 10 {
		sid := events.StreamID{Kind: events.KindJob, ID: fmt.Sprintf("cache-%06d", i)}
		if _, err := e.Append(ctx, engine.Meta{Actor: events.ActorCLI}, sid, 0, &events.JobSubmitted{TargetKind: "cli", SourceThreadID: "t", TaskKind: "ci"}); err != nil {
			t.Fatal(err)
		}
		if engine.CacheLen(e) > engine.MaxCache {
			t.Fatalf("after %d streams the cache holds %d states, over %d", i+1, engine.CacheLen(e), engine.MaxCache)
		}
	}
	if engine.Cached(e, first) {
		t.Fatalf("the first stream is still cached after %d more; the cache was never emptied", engine.MaxCache)
	}
	// Version 1 is only accepted if the writer loads the stream's state.
	if _, err := e.Append(ctx, engine.Meta{Actor: events.ActorCLI}, first, 1, &events.JobCancelled{Reason: "test"}); err != nil {
		t.Fatalf("append to an evicted stream at its committed version: %v", err)
	}
}
