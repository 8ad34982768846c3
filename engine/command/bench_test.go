package command_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/projections"
)

var benchNow = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// openBatches fills a log with open head batches, each on its own thread;
// due of them have a redelivery window that ended before benchNow. With
// spread unset the due ones are the oldest, as with a fixed window (a
// batch's window ends a constant time after it opened, and ids are
// time-ordered); with spread set they are scattered evenly over the key
// space, the worst case for page locality.
func openBatches(b *testing.B, e *engine.Engine, total, due int, spread bool) {
	b.Helper()
	for start := 0; start < total; start += 5000 {
		var emits []engine.Emit
		for i := start; i < start+5000 && i < total; i++ {
			end := benchNow.Add(24 * time.Hour)
			if (spread && i%(total/due) == 0) || (!spread && i < due) {
				end = benchNow.Add(-time.Minute)
			}
			emits = append(emits, engine.Emit{Stream: events.StreamID{Kind: events.KindBatch, ID: fmt.Sprintf("b%07d", i)},
				Payload: &events.BatchOpened{SourceThreadID: fmt.Sprintf("t%07d", i), TargetKind: "debug", JobIDs: []string{fmt.Sprintf("j%07d", i)},
					Summary: "s", FirstReadyAt: benchNow.Add(-time.Hour), LastReadyAt: benchNow.Add(-time.Hour), MaxDeliveryAttempts: 3,
					RedeliveryWindowEndsAt: end, Head: true}})
		}
		d := engine.DeciderFunc(func(engine.View, time.Time) (engine.Decision, error) { return engine.Decision{Emits: emits}, nil })
		if _, err := e.ExecuteAt(context.Background(), engine.Meta{Actor: events.ActorCLI}, benchNow.Add(-time.Hour), d); err != nil {
			b.Fatal(err)
		}
	}
}

// sweepOnce runs the sweep at benchNow until it settles and returns how
// long that took and how many batches it closed.
func sweepOnce(b *testing.B, e *engine.Engine) (time.Duration, int) {
	closed := 0
	t0 := time.Now()
	for {
		sr, res, err := engine.ExecAt[command.SweepResult](context.Background(), e, engine.Meta{Actor: events.ActorSweep}, benchNow, command.Sweep{Config: cfg})
		if err != nil {
			b.Fatal(err)
		}
		closed += len(sr.Closed)
		if len(res.Events) == 0 {
			return time.Since(t0), closed
		}
	}
}

// BenchmarkSweep: a sweep with 1,000 batches due among 100,000 open ones
// against 1,000 due among 1,000. The deadline index makes the cost follow
// what is due, so x_small should stay near 1.
func BenchmarkSweep(b *testing.B) {
	for _, spread := range []bool{false, true} {
		b.Run(fmt.Sprintf("spread=%t", spread), func(b *testing.B) { benchSweep(b, spread) })
	}
}

func benchSweep(b *testing.B, spread bool) {
	var small, big time.Duration
	for range b.N {
		for _, total := range []int{1000, 100_000} {
			b.StopTimer()
			path := filepath.Join(b.TempDir(), fmt.Sprintf("cbth-%d.db", total))
			e, err := engine.Open(path, engine.Options{Projections: projections.Store{}, NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			openBatches(b, e, total, 1000, spread)
			// Sweep as a freshly started daemon does: cold writer cache,
			// durable commit.
			e.Close()
			if e, err = engine.Open(path, engine.Options{Projections: projections.Store{}}); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			d, closed := sweepOnce(b, e)
			if closed != 1000 {
				b.Fatalf("closed %d of 1000 due among %d", closed, total)
			}
			if total == 1000 {
				small = d
			} else {
				big = d
			}
			e.Close()
		}
	}
	b.ReportMetric(float64(small.Microseconds())/1000, "ms_1k_of_1k")
	b.ReportMetric(float64(big.Microseconds())/1000, "ms_1k_of_100k")
	b.ReportMetric(float64(big)/float64(small), "x_small")
}

// BenchmarkMaterialize measures durable delivery starts (attempt,
// materialization and accept_pending barrier in one append) per second,
// each on an eligible head.
func BenchmarkMaterialize(b *testing.B) {
	e, err := engine.Open(filepath.Join(b.TempDir(), "cbth.db"), engine.Options{Projections: projections.Store{}})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	const n = 2000
	openBatches(b, e, n, 1, false)
	c := cfg
	c.MaxWaitWindow = 0
	b.ResetTimer()
	var rate float64
	for range b.N {
		t0 := time.Now()
		started := 0
		for i := 0; i < n; i++ {
			res, err := e.ExecuteAt(context.Background(), engine.Meta{Actor: events.ActorAdapter}, benchNow.Add(-30*time.Minute),
				command.StartDelivery{Config: c, ThreadID: fmt.Sprintf("t%07d", i), Route: command.Route{RPCKind: command.DebugDeliver, DeliveryMode: command.DebugDeliver}})
			if err != nil {
				b.Fatal(err)
			}
			if res.Outcome == "started" {
				started++
			}
		}
		if started == 0 {
			b.Fatal("nothing was eligible")
		}
		rate = float64(started) / time.Since(t0).Seconds()
	}
	b.ReportMetric(rate, "starts/s")
}
