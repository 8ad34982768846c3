package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/projections"
)

// The acknowledged head follows every commit, and a write torn by a crash
// spoils one slot only: the other still holds the head before it.
func TestAckFollowsCommitsAndSurvivesATornSlot(t *testing.T) {
	e := openTest(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		sid := events.StreamID{Kind: events.KindJob, ID: string(rune('a' + i))}
		if _, err := e.Append(ctx, engine.Meta{Actor: events.ActorCLI}, sid, 0, &events.JobSubmitted{}); err != nil {
			t.Fatal(err)
		}
		a, _, ok, err := engine.ReadAck(engine.LogPath(e))
		if err != nil || !ok || a.Seq != e.Head() || a.Hash != engine.LastHash(e) {
			t.Fatalf("after commit %d: ack %+v %v %v, head %d", i, a, ok, err, e.Head())
		}
	}
	_, slot, _, _ := engine.ReadAck(engine.LogPath(e))
	f, err := os.OpenFile(engine.AckPath(engine.LogPath(e)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("torn"), int64(slot*engine.AckSlot+20))
	f.Close()
	a, _, _, err := engine.ReadAck(engine.LogPath(e))
	if err != nil || a.Seq != e.Head()-1 {
		t.Fatalf("with the newest slot torn: %+v %v, want seq %d", a, err, e.Head()-1)
	}
	os.WriteFile(engine.AckPath(engine.LogPath(e)), make([]byte, 2*engine.AckSlot), 0o600)
	if _, _, _, err := engine.ReadAck(engine.LogPath(e)); errs.CodeOf(err) != errs.ECORRUPT {
		t.Fatalf("with no valid slot: %v, want ECORRUPT", err)
	}
	os.WriteFile(engine.AckPath(engine.LogPath(e)), engine.EncodeAck(engine.Ack{Seq: e.Head(), Hash: engine.LastHash(e)}), 0o600) // for the end-of-test verify
}

// A log without the file (a home from before it) gets one from its head;
// a log older than the file is refused, and so is a missing one.
func TestOpenChecksTheAcknowledgedHead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cbth.db")
	e, err := engine.Open(path, engine.Options{Projections: projections.Store{}, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	sid := events.StreamID{Kind: events.KindJob, ID: "j"}
	if _, err := e.Append(context.Background(), engine.Meta{Actor: events.ActorCLI}, sid, 0, &events.JobSubmitted{}); err != nil {
		t.Fatal(err)
	}
	head, hash := e.Head(), engine.LastHash(e)
	e.Close()
	os.Remove(engine.AckPath(path))
	if e, err = engine.Open(path, engine.Options{Projections: projections.Store{}}); err != nil {
		t.Fatalf("a log without its ack file: %v", err)
	}
	e.Close()
	if a, _, ok, err := engine.ReadAck(path); !ok || err != nil || a.Seq != head || a.Hash != hash {
		t.Fatalf("recreated ack %+v %v %v", a, ok, err)
	}
	ahead := engine.Ack{Seq: head + 1, Hash: hash}
	os.WriteFile(engine.AckPath(path), engine.EncodeAck(ahead), 0o600)
	if _, err := engine.Open(path, engine.Options{Projections: projections.Store{}}); errs.CodeOf(err) != errs.ECORRUPT {
		t.Fatalf("a log behind its ack: %v, want ECORRUPT", err)
	}
	os.Remove(path)
	if _, err := engine.Open(path, engine.Options{Projections: projections.Store{}}); errs.CodeOf(err) != errs.ECORRUPT {
		t.Fatalf("a missing log beside its ack: %v, want ECORRUPT", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open created a new log where one was: %v", err)
	}
}
