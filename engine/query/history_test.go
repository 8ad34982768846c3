package query_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

// changed returns the entry's change of field, if it lists one.
func changed(e query.HistoryEntry, field string) (query.Change, bool) {
	i := slices.IndexFunc(e.Changes, func(c query.Change) bool { return c.Field == field })
	if i < 0 {
		return query.Change{}, false
	}
	return e.Changes[i], true
}

// A job's story is its own stream, its artifact's and nothing else, in
// log order; each entry names the fields of the view it changed (a first
// event only those it set, and never version or updated_at), and pages
// by seq without losing or repeating an entry; until stops the story at
// a moment.
func TestHistoryTellsAStoryPageByPage(t *testing.T) {
	e, _, j2, _, _ := jobs(t)
	j1 := submit(t, e, "H")
	complete(t, e, j1, "art-1")
	var streams []events.StreamID
	err := e.Read(func(s engine.Snapshot) error {
		var err error
		streams, err = query.JobStreams(s, j1)
		if _, nerr := query.JobStreams(s, "nope"); errs.CodeOf(nerr) != errs.ENOENT {
			t.Errorf("an unknown job's streams: %v", nerr)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(streams) != 2 || streams[0] != (events.StreamID{Kind: events.KindJob, ID: j1}) || streams[1].Kind != events.KindArtifact {
		t.Fatalf("the completed job's streams %v, want the job and its artifact", streams)
	}
	all, err := query.History(e, streams, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if all.Next != 0 || len(all.Entries) < 3 {
		t.Fatalf("the whole story: %+v", all)
	}
	for i, en := range all.Entries {
		if en.Stream != streams[0] && en.Stream != streams[1] {
			t.Errorf("entry %d is of %v, which is not in the story", i, en.Stream)
		}
		if i > 0 && en.Seq <= all.Entries[i-1].Seq {
			t.Errorf("entry %d at seq %d after seq %d", i, en.Seq, all.Entries[i-1].Seq)
		}
		for _, c := range en.Changes {
			if c.Field == "version" || c.Field == "updated_at" || string(c.Before) == string(c.After) {
				t.Errorf("entry %d (%s) lists %s: %s -> %s", i, en.Type, c.Field, c.Before, c.After)
			}
		}
	}
	first := all.Entries[0]
	if first.Type != "job.submitted" || first.State != string(fsm.JobRunning) {
		t.Fatalf("the story starts with %s in %s", first.Type, first.State)
	}
	if c, ok := changed(first, "task_summary"); !ok || string(c.Before) != "null" || string(c.After) != `"work"` {
		t.Errorf("the submit's summary change: %+v %v", c, ok)
	}
	if _, ok := changed(first, "result_summary"); ok {
		t.Errorf("the submit lists a field it left empty: %+v", first.Changes)
	}
	var ready *query.HistoryEntry
	for i := range all.Entries {
		if all.Entries[i].Stream == streams[0] && all.Entries[i].State == string(fsm.JobReady) {
			ready = &all.Entries[i]
			break
		}
	}
	if ready == nil {
		t.Fatalf("no entry moves the job to ready: %+v", all.Entries)
	}
	if c, ok := changed(*ready, "status"); !ok || string(c.Before) != `"running"` || string(c.After) != `"ready"` {
		t.Errorf("the completion's state change: %+v %v", c, ok)
	}

	// Page by page, one entry each: the same story.
	var paged []uint64
	for after, n := uint64(0), 0; ; n++ {
		pg, err := query.History(e, streams, 0, after, 1)
		if err != nil || len(pg.Entries) != 1 || n > len(all.Entries) {
			t.Fatalf("page %d after seq %d: %+v %v", n, after, pg, err)
		}
		paged = append(paged, pg.Entries[0].Seq)
		if pg.Next == 0 {
			break
		}
		after = pg.Next
	}
	var whole []uint64
	for _, en := range all.Entries {
		whole = append(whole, en.Seq)
	}
	if !slices.Equal(paged, whole) {
		t.Errorf("paged %v, whole %v", paged, whole)
	}

	// As of the submit, the story is the submit alone, and a change is
	// the same whether the story was cut there or not.
	cut, err := query.History(e, streams, first.Seq, 0, 0)
	if err != nil || len(cut.Entries) != 1 || cut.Entries[0].Seq != first.Seq {
		t.Fatalf("the story until seq %d: %+v %v", first.Seq, cut, err)
	}
	a, _ := json.Marshal(cut.Entries[0])
	b, _ := json.Marshal(first)
	if string(a) != string(b) {
		t.Errorf("the submit cut short %s, in the whole story %s", a, b)
	}

	// A failed job's story has no artifact in it.
	err = e.Read(func(s engine.Snapshot) error {
		st, err := query.JobStreams(s, j2)
		if err != nil || len(st) != 1 {
			t.Errorf("the failed job's streams %v %v", st, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A thread's history lists every batch it had in the order they joined
// its FIFO, closed ones with how they closed, and only that thread's (a
// thread whose id extends another's is another thread); it pages by
// batch id, and refuses an empty thread and a cursor it does not hold.
func TestThreadHistoryListsEveryBatchInOrder(t *testing.T) {
	e, j1, j2, _, _ := jobs(t)
	first, _ := enginetest.Answer[string](t, e, engine.Meta{Actor: events.ActorCLI}, command.CloseHead{Config: enginetest.DeliveryConfig(), ThreadID: "T", Reason: command.CloseCancelled})
	if first == "" {
		t.Fatal("no head was closed")
	}
	again := submit(t, e, "T")
	complete(t, e, again, "")
	complete(t, e, submit(t, e, "T2"), "")
	err := e.Read(func(s engine.Snapshot) error {
		pg, err := query.ThreadHistory(s, "T", "", 0)
		if err != nil || pg.SourceThreadID != "T" || len(pg.Batches) != 2 || pg.Next != "" {
			t.Fatalf("thread T: %+v %v", pg, err)
		}
		closed, open := pg.Batches[0], pg.Batches[1]
		if closed.BatchID != first || closed.State != fsm.BatchClosed || closed.CloseReason != command.CloseCancelled || closed.ClosedAt == nil || closed.Head {
			t.Errorf("the closed batch: %+v", closed)
		}
		if !slices.Equal(closed.JobIDs, []string{j1}) || slices.Contains(closed.JobIDs, j2) {
			t.Errorf("the closed batch's jobs %v, want only %s", closed.JobIDs, j1)
		}
		if !open.Head || open.ClosedAt != nil || !slices.Equal(open.JobIDs, []string{again}) || open.OpenedSeq <= closed.OpenedSeq {
			t.Errorf("the open batch: %+v after %+v", open, closed)
		}
		one, err := query.ThreadHistory(s, "T", "", 1)
		if err != nil || len(one.Batches) != 1 || one.Batches[0].BatchID != first || one.Next != first {
			t.Errorf("a page of one: %+v %v", one, err)
		}
		rest, err := query.ThreadHistory(s, "T", one.Next, 1)
		if err != nil || len(rest.Batches) != 1 || rest.Batches[0].BatchID != open.BatchID || rest.Next != "" {
			t.Errorf("the page after %s: %+v %v", one.Next, rest, err)
		}
		if other, _ := query.ThreadHistory(s, "T2", "", 0); len(other.Batches) != 1 || other.Batches[0].BatchID == first {
			t.Errorf("thread T2: %+v", other)
		}
		if _, err := query.ThreadHistory(s, "", "", 0); errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("an empty thread: %v", err)
		}
		if _, err := query.ThreadHistory(s, "T", "no-such-batch", 0); errs.CodeOf(err) != errs.ENOENT {
			t.Errorf("a cursor thread T never had: %v", err)
		}
		streams, err := query.BatchStreams(s, first)
		if err != nil || !slices.Contains(streams, events.StreamID{Kind: events.KindJob, ID: j1}) || streams[0] != (events.StreamID{Kind: events.KindBatch, ID: first}) {
			t.Errorf("the closed batch's streams %v %v", streams, err)
		}
		if _, err := query.BatchStreams(s, j1); errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("a job's id as a batch's: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
