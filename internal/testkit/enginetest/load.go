package enginetest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/events"
)

// LoadResult is the outcome of a concurrent append load.
type LoadResult struct {
	Rate float64       // events per second
	P50  time.Duration // median wait of one Append
	P99  time.Duration
}

// SubmitPayload is a job submission of about the reference event's size.
func SubmitPayload(i int) *events.JobSubmitted {
	return &events.JobSubmitted{
		TargetKind: "cli", SourceThreadID: fmt.Sprintf("thread-%04d", i%64), TaskKind: "ci",
		TaskSummary:    "wait for CI on pull request 1234 of the example repository; the reviewer asked for a rerun",
		DeliveryPolicy: events.FailClosedPolicy,
	}
}

// AppendLoad runs writers goroutines that each append one job submission
// per Append to a fresh stream, for d.
func AppendLoad(e *engine.Engine, writers int, d time.Duration) (LoadResult, error) {
	var (
		wg    sync.WaitGroup
		n     atomic.Int64
		mu    sync.Mutex
		waits []time.Duration
		first error
	)
	// Real aggregate ids are UUIDv7s, ordered by time; a shared counter
	// gives the same key locality. The log head at the start keeps the ids
	// of repeated loads on one engine apart, and still in order.
	var ids atomic.Int64
	run := e.Head()
	deadline := time.Now().Add(d)
	start := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var local []time.Duration
			for i := 0; time.Now().Before(deadline); i++ {
				sid := events.StreamID{Kind: events.KindJob, ID: fmt.Sprintf("load-%012d-%012d", run, ids.Add(1))}
				t0 := time.Now()
				if _, err := e.Append(context.Background(), engine.Meta{Actor: events.ActorCLI}, sid, 0, SubmitPayload(i)); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				local = append(local, time.Since(t0))
				n.Add(1)
			}
			mu.Lock()
			waits = append(waits, local...)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return LoadResult{}, first
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	r := LoadResult{Rate: float64(n.Load()) / elapsed.Seconds()}
	if len(waits) > 0 {
		r.P50 = waits[len(waits)/2]
		r.P99 = waits[len(waits)*99/100]
	}
	return r, nil
}
