package query_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

// countingReader counts the job states a query reads.
type countingReader struct {
	engine.Reader
	jobs int
}

func (c *countingReader) State(k events.Kind, id string) (aggregate.State, error) {
	if k == events.KindJob {
		c.jobs++
	}
	return c.Reader.State(k, id)
}

// Waiting on a thread reads that thread's jobs through the job.thread
// index, not every job in the log; a thread whose id extends another's
// is another thread.
func TestWaitOnAThreadReadsOnlyItsJobs(t *testing.T) {
	clock := engine.NewManualClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	e := enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{Clock: clock, NoSync: true})
	ctx := context.Background()
	submit := func(thread string) string {
		id, _, err := engine.Exec[string](ctx, e, engine.Meta{Actor: events.ActorCLI}, command.SubmitJob{Target: "cli", ThreadID: thread, TaskKind: "k", Summary: "s", Policy: events.FailClosedPolicy})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	for i := 0; i < 200; i++ {
		submit(fmt.Sprintf("other-%d", i))
	}
	mine := []string{submit("t"), submit("t")}
	submit("t2")
	err := e.Read(func(s engine.Snapshot) error {
		cr := &countingReader{Reader: s}
		res, err := query.Wait(cr, nil, "t", "", 0)
		if err != nil {
			return err
		}
		if len(res.Jobs) != 2 || res.Jobs[0].JobID != mine[0] || res.Jobs[1].JobID != mine[1] || res.Done {
			t.Fatalf("wait on t: %+v", res)
		}
		if cr.jobs != 2 {
			t.Fatalf("wait on t read %d jobs, want its 2", cr.jobs)
		}
		page, err := query.Jobs(s, query.JobFilter{ThreadID: "t"})
		if err != nil {
			return err
		}
		if len(page.Jobs) != 2 {
			t.Fatalf("job list of t: %d jobs", len(page.Jobs))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Every listing pages by count and by size: a page holds at most its
// limit and, past its first item, at most query.PageBytes of encoded
// items; following next from page to page lists each item once, in
// order.
func TestListingsPageByCountAndSize(t *testing.T) {
	clock := engine.NewManualClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	e := enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{Clock: clock, NoSync: true})
	ctx := context.Background()
	cfg := command.DeliveryConfig{MaxJobsPerBatch: 1, MaxTotalBytes: 1 << 20, RedeliveryWindow: time.Hour, MaxDeliveryAttempts: 1}
	// Metadata near its limit (256 KiB) makes a page of a few jobs big.
	big := json.RawMessage(`{"log":"` + strings.Repeat("x", 200<<10) + `"}`)
	var ids []string
	for i := range 12 {
		meta := json.RawMessage(nil)
		if i%2 == 0 {
			meta = big
		}
		id, _, err := engine.Exec[string](ctx, e, engine.Meta{Actor: events.ActorCLI}, command.SubmitJob{Target: "debug", ThreadID: fmt.Sprintf("t%d", i%3),
			TaskKind: "k", Summary: "s", Metadata: meta, Policy: events.FailClosedPolicy})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if _, err := e.Execute(ctx, engine.Meta{Actor: events.ActorCLI}, command.CompleteJob{Config: cfg, JobID: id, Summary: "done"}); err != nil {
			t.Fatal(err)
		}
	}
	byID := slices.Sorted(slices.Values(ids)) // job list's order
	size := func(v any) int { b, _ := json.Marshal(v); return len(b) }
	check := func(what string, n, bytes, limit int) {
		t.Helper()
		if n == 0 || (limit > 0 && n > limit) || (n > 1 && bytes > query.PageBytes) {
			t.Fatalf("%s: a page of %d items, %d bytes (limit %d, %d bytes)", what, n, bytes, limit, query.PageBytes)
		}
	}
	err := e.Read(func(s engine.Snapshot) error {
		for _, limit := range []int{0, 1, 5} {
			var got []string
			pages := 0
			for after := ""; ; pages++ {
				page, err := query.Jobs(s, query.JobFilter{After: after, Limit: limit})
				if err != nil {
					return err
				}
				check("jobs", len(page.Jobs), size(page.Jobs), limit)
				for _, j := range page.Jobs {
					got = append(got, j.JobID)
				}
				if after = page.Next; after == "" {
					break
				}
			}
			if strings.Join(got, ",") != strings.Join(byID, ",") || pages < 2 {
				t.Fatalf("jobs, limit %d: %d pages listed %v, want %v", limit, pages+1, got, ids)
			}
			var batches []string
			for after := ""; ; {
				page, err := query.Batches(s, query.BatchFilter{After: after, Limit: limit})
				if err != nil {
					return err
				}
				check("batches", len(page.Batches), size(page.Batches), limit)
				for _, b := range page.Batches {
					batches = append(batches, b.JobIDs[0])
				}
				if after = page.Next; after == "" {
					break
				}
			}
			if strings.Join(batches, ",") != strings.Join(ids, ",") {
				t.Fatalf("batches, limit %d: their jobs %v, want %v", limit, batches, ids)
			}
			var waited []string
			for after := ""; ; {
				res, err := query.Wait(s, ids, "", after, limit)
				if err != nil {
					return err
				}
				check("wait", len(res.Jobs), size(res.Jobs), limit)
				if res.Done || res.OK {
					t.Fatalf("wait: done %t ok %t over jobs none of which was delivered", res.Done, res.OK)
				}
				for _, j := range res.Jobs {
					waited = append(waited, j.JobID)
				}
				if after = res.Next; after == "" {
					break
				}
			}
			if strings.Join(waited, ",") != strings.Join(ids, ",") {
				t.Fatalf("wait, limit %d: %v, want %v", limit, waited, ids)
			}
		}
		if _, err := query.Batches(s, query.BatchFilter{After: "no-such-batch"}); errs.CodeOf(err) != errs.ENOENT {
			t.Fatalf("a batch cursor that names no batch: %v, want ENOENT", err)
		}
		if _, err := query.Sessions(s, query.SessionFilter{After: "no-such-session"}); errs.CodeOf(err) != errs.ENOENT {
			t.Fatalf("a session cursor that names no session: %v, want ENOENT", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
