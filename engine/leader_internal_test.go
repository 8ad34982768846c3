package engine

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// A submitter that leads the group commit must return once its own
// request is committed, even when more is queued: the rest is handed to
// a new leader. Without the hand-off, a caller could wait on other
// callers' commits for as long as load lasts.
func TestLeaderReturnsOnceItsOwnRequestIsCommitted(t *testing.T) {
	e, err := Open(filepath.Join(t.TempDir(), "log.db"), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	release1, release2 := make(chan struct{}), make(chan struct{})
	started1, started2 := make(chan struct{}), make(chan struct{})
	blocking := func(started, release chan struct{}) DeciderFunc {
		return func(View, time.Time) (Decision, error) {
			close(started)
			<-release
			return Decision{Outcome: "ok"}, nil
		}
	}

	// The first request makes its caller the leader and holds the commit.
	leaderDone := make(chan error, 1)
	go func() {
		_, err := e.Execute(context.Background(), Meta{}, blocking(started1, release1))
		leaderDone <- err
	}()
	<-started1

	// A second request queues behind it.
	secondDone := make(chan error, 1)
	go func() {
		_, err := e.Execute(context.Background(), Meta{}, blocking(started2, release2))
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
