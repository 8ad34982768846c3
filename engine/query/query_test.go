package query_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/enginetest"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
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
		res, err := e.Execute(ctx, engine.Meta{Actor: events.ActorCLI}, command.SubmitJob{Target: "cli", ThreadID: thread, TaskKind: "k", Summary: "s", Policy: events.FailClosedPolicy})
		if err != nil {
			t.Fatal(err)
		}
		return res.Value.(string)
	}
	for i := 0; i < 200; i++ {
		submit(fmt.Sprintf("other-%d", i))
	}
	mine := []string{submit("t"), submit("t")}
	submit("t2")
	err := e.Read(func(s engine.Snapshot) error {
		cr := &countingReader{Reader: s}
		res, err := query.Wait(cr, nil, "t")
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
