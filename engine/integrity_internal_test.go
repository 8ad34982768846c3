package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The acknowledged head follows every commit, and a write torn by a crash
// spoils one slot only: the other still holds the head before it.
func TestAckFollowsCommitsAndSurvivesATornSlot(t *testing.T) {
	e := openTest(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		sid := events.StreamID{Kind: events.KindJob, ID: string(rune('a' + i))}
		if _, err := e.Append(ctx, Meta{Actor: events.ActorCLI}, sid, 0, &events.JobSubmitted{}); err != nil {
			t.Fatal(err)
		}
		a, _, ok, err := ReadAck(e.path)
		if err != nil || !ok || a.Seq != e.Head() || a.Hash != e.lastHash {
			t.Fatalf("after commit %d: ack %+v %v %v, head %d", i, a, ok, err, e.Head())
		}
	}
	_, slot, _, _ := ReadAck(e.path)
	f, err := os.OpenFile(AckPath(e.path), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("torn"), int64(slot*ackSlot+20))
	f.Close()
	a, _, _, err := ReadAck(e.path)
	if err != nil || a.Seq != e.Head()-1 {
		t.Fatalf("with the newest slot torn: %+v %v, want seq %d", a, err, e.Head()-1)
	}
	os.WriteFile(AckPath(e.path), make([]byte, 2*ackSlot), 0o600)
	if _, _, _, err := ReadAck(e.path); errs.CodeOf(err) != errs.ECORRUPT {
		t.Fatalf("with no valid slot: %v, want ECORRUPT", err)
	}
	os.WriteFile(AckPath(e.path), Ack{Seq: e.Head(), Hash: e.lastHash}.encode(), 0o600) // for the end-of-test verify
}

// A log without the file (a home from before it) gets one from its head;
// a log older than the file is refused, and so is a missing one.
func TestOpenChecksTheAcknowledgedHead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cbth.db")
	e, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	sid := events.StreamID{Kind: events.KindJob, ID: "j"}
	if _, err := e.Append(context.Background(), Meta{Actor: events.ActorCLI}, sid, 0, &events.JobSubmitted{}); err != nil {
		t.Fatal(err)
	}
	head, hash := e.Head(), e.lastHash
	e.Close()
	os.Remove(AckPath(path))
	if e, err = Open(path, Options{}); err != nil {
		t.Fatalf("a log without its ack file: %v", err)
	}
	e.Close()
	if a, _, ok, err := ReadAck(path); !ok || err != nil || a.Seq != head || a.Hash != hash {
		t.Fatalf("recreated ack %+v %v %v", a, ok, err)
	}
	ahead := Ack{Seq: head + 1, Hash: hash}
	os.WriteFile(AckPath(path), ahead.encode(), 0o600)
	if _, err := Open(path, Options{}); errs.CodeOf(err) != errs.ECORRUPT {
		t.Fatalf("a log behind its ack: %v, want ECORRUPT", err)
	}
	os.Remove(path)
	if _, err := Open(path, Options{}); errs.CodeOf(err) != errs.ECORRUPT {
		t.Fatalf("a missing log beside its ack: %v, want ECORRUPT", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open created a new log where one was: %v", err)
	}
}

// A panic or a fault inside the boundary is a value, not a crash.
func TestCatchTurnsFaultsIntoValues(t *testing.T) {
	if p := catch(func() { panic("invalid page type") }); p == nil {
		t.Fatal("a panic was not caught")
	}
	if p := catch(func() {
		var s []int
		_ = s[len(s)] // index out of range, as bbolt's page arithmetic can be
	}); p == nil {
		t.Fatal("a runtime error was not caught")
	}
	if p := catch(func() {}); p != nil {
		t.Fatalf("caught %v from nothing", p)
	}
}
