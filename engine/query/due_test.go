package query_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

// The reads the daemon's sweep loop acts on: which park hooks are due
// (a parked batch, and one cbth closed undelivered, until a run of the
// hook is recorded as ok) and which artifacts still hold files.
func TestParkHooksDueAndStoredArtifacts(t *testing.T) {
	clock := engine.NewManualClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	e := enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{Clock: clock, NoSync: true})
	cfg := enginetest.DeliveryConfig()
	m := engine.Meta{Actor: events.ActorCLI}
	ready := func(thread, artifact string) (job, batch string) {
		job = submit(t, e, thread)
		return job, complete(t, e, job, artifact)
	}
	due := func(now time.Time) (out []query.ParkNotice) {
		t.Helper()
		err := e.Read(func(s engine.Snapshot) (err error) {
			out, err = query.ParkHooksDue(s, now)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	stored := func() []string {
		t.Helper()
		var ids []string
		err := e.Read(func(s engine.Snapshot) error {
			live, err := query.StoredArtifacts(s)
			for id := range live {
				ids = append(ids, id)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
		return ids
	}

	parkedJob, parked := ready("P", "art-p")
	_, window := ready("W", "art-w")
	if got := due(clock.Now()); len(got) != 0 {
		t.Fatalf("hooks due with nothing parked: %+v", got)
	}
	enginetest.Answer[string](t, e, m, command.ParkHead{ThreadID: "P", BatchID: parked, Reason: "the target cannot deliver it"})
	if got := due(clock.Now().Add(-time.Second)); len(got) != 0 {
		t.Errorf("a park hook due before the park: %+v", got)
	}
	got := due(clock.Now())
	if len(got) != 1 {
		t.Fatalf("hooks due after the park: %+v", got)
	}
	if n := got[0]; n.BatchID != parked || n.ThreadID != "P" || n.Notice != query.NoticeParked || n.Reason != "the target cannot deliver it" ||
		!slices.Equal(n.JobIDs, []string{parkedJob}) || n.Attempts != 0 || n.Version == 0 {
		t.Errorf("the parked batch's notice: %+v", n)
	}

	// A failed run keeps the hook due at its retry; an ok run ends it.
	retry := clock.Now().Add(time.Minute)
	notify := func(n query.ParkNotice, p *events.BatchParkNotified) {
		t.Helper()
		if _, err := e.Append(context.Background(), m, events.StreamID{Kind: events.KindBatch, ID: n.BatchID}, n.Version, p); err != nil {
			t.Fatal(err)
		}
	}
	notify(got[0], &events.BatchParkNotified{Attempt: 1, ExitCode: 1, Error: "exit 1", NextRetryAt: retry})
	if again := due(clock.Now()); len(again) != 0 {
		t.Errorf("due again before its retry: %+v", again)
	}
	again := due(retry)
	if len(again) != 1 || again[0].Attempts != 1 {
		t.Fatalf("at its retry: %+v", again)
	}
	notify(again[0], &events.BatchParkNotified{Attempt: 2, OK: true})
	if after := due(retry.Add(time.Hour)); len(after) != 0 {
		t.Errorf("due after an ok run: %+v", after)
	}

	// Both batches outlive their redelivery window: the sweep closes
	// them undelivered, and each one's notice is due (again, for the
	// parked one) with its close reason.
	if s := stored(); !slices.Equal(s, []string{"art-p", "art-w"}) {
		t.Fatalf("stored artifacts %v", s)
	}
	clock.Advance(cfg.RedeliveryWindow + time.Second)
	sweep := func() command.SweepResult {
		res, _ := enginetest.Answer[command.SweepResult](t, e, m, command.Sweep{Config: cfg})
		return res
	}
	if res := sweep(); !slices.Contains(res.Closed, window) || !slices.Contains(res.Closed, parked) {
		t.Fatalf("the sweep past the window closed %v, not %s and %s", res.Closed, window, parked)
	}
	want := map[string]string{window: command.CloseWindowExhausted, parked: command.CloseManualExpired}
	got = due(clock.Now())
	for _, n := range got {
		if n.Notice != query.NoticeUndelivered || n.Reason != want[n.BatchID] {
			t.Errorf("the notice of %s: %+v, want %s undelivered", n.BatchID, n, want[n.BatchID])
		}
	}
	if len(got) != 2 {
		t.Errorf("notices due after the window: %+v", got)
	}
	err := e.Read(func(s engine.Snapshot) error {
		if n := query.Undelivered(s); n != 2 {
			t.Errorf("undelivered count %d after the window closed two batches", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Once their retention passes, the closed batches' artifacts are
	// collected; a batch still open keeps its own.
	clock.Advance(cfg.MinArtifactTTL + cfg.PostCloseTTL)
	ready("K", "art-k")
	for n := 0; n < 10; n++ {
		if res := sweep(); len(res.Collected) == 0 {
			break
		}
	}
	if s := stored(); !slices.Equal(s, []string{"art-k"}) {
		t.Errorf("stored artifacts after the collection %v, want only art-k", s)
	}
}
