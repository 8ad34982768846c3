package inspectmod_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/internal/testkit/daemontest"
)

// watch.next asked for what comes after the head waits on the log's
// commit subscription and answers with the commit that woke it: a view
// of a later seq, not the one it was asked past.
func TestWatchWaitsForTheNextCommit(t *testing.T) {
	r := start(t)
	head := r.head()
	c, err := ipc.Dial(r.Home.Socket(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make(chan api.WatchView, 1)
	errc := make(chan error, 1)
	go func() {
		v, err := api.WatchNext.Call(c, api.WatchArgs{After: head, WaitMS: 60_000})
		errc <- err
		got <- v
	}()
	r.submit("T")
	select {
	case err := <-errc:
		v := <-got
		if err != nil || v.Seq <= head {
			t.Fatalf("watch after seq %d: seq %d, %v; want a later seq", head, v.Seq, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watch did not wake on the commit within 30 s")
	}
	// Asked past a seq the log already passed, it answers at once.
	v := daemontest.Call(r.Daemon, api.WatchNext, api.WatchArgs{After: head, WaitMS: 60_000})
	if v.Seq <= head {
		t.Fatalf("watch past an old seq: %d", v.Seq)
	}
}

// The view: each thread's head batch once, the attempts in flight, the
// parked heads, and the lists empty (never null) where nothing is.
func TestWatchViewOfHeadsInFlightAndParked(t *testing.T) {
	r := start(t)
	empty := daemontest.Call(r.Daemon, api.WatchNext, api.WatchArgs{})
	if empty.Heads == nil || empty.InFlight == nil || empty.Parked == nil || empty.Tasks == nil || empty.BusyReasons == nil {
		t.Fatalf("an empty view has null lists: %+v", empty)
	}
	for thread, b := range map[string]string{"open": target.Accept, "flying": target.Async, "parked": target.Unknown, "done": target.Deliver} {
		r.behave(thread, b)
		r.complete(r.submit(thread))
	}
	r.submit("open") // a second job of a thread with a head: still one head
	v := daemontest.Call(r.Daemon, api.WatchNext, api.WatchArgs{})
	heads := map[string]api.WatchHead{}
	for _, h := range v.Heads {
		if _, dup := heads[h.SourceThreadID]; dup {
			t.Errorf("thread %s has two heads", h.SourceThreadID)
		}
		heads[h.SourceThreadID] = h
	}
	if len(heads) != 3 || v.HeadCount != 3 || heads["done"].BatchID != "" || heads["open"].State != fsm.BatchCooldown {
		t.Errorf("heads %+v (count %d), want open, flying and parked", v.Heads, v.HeadCount)
	}
	if len(v.Parked) != 1 || v.ParkedCount != 1 || v.Parked[0].SourceThreadID != "parked" || v.Parked[0].ReplayPolicy != "manual_resolution_only" {
		t.Errorf("parked %+v (count %d)", v.Parked, v.ParkedCount)
	}
	if len(v.InFlight) != 1 || v.InFlight[0].SourceThreadID != "flying" || v.InFlight[0].AttemptID == "" {
		t.Errorf("in flight %+v", v.InFlight)
	}
	if v.Seq != r.head() {
		t.Errorf("the view is of seq %d, the head is %d", v.Seq, r.head())
	}
}

// Each list holds at most 100; the count says how many there are.
func TestWatchListsAreBounded(t *testing.T) {
	r := start(t)
	r.behave("*", target.Unknown) // every head parks: it counts among heads and parked
	for i := range 101 {
		r.complete(r.submit(fmt.Sprintf("t%03d", i)))
	}
	v := daemontest.Call(r.Daemon, api.WatchNext, api.WatchArgs{})
	if len(v.Heads) != 100 || v.HeadCount != 101 || len(v.Parked) != 100 || v.ParkedCount != 101 {
		t.Fatalf("%d heads (count %d), %d parked (count %d); want 100 of 101 each", len(v.Heads), v.HeadCount, len(v.Parked), v.ParkedCount)
	}
}
