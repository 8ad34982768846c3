package engine_test

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/projections"
	bolt "go.etcd.io/bbolt"
)

var asOfCount = flag.Int("bench.asof", 1_000_000, "events in the as-of benchmark's log")

// story is one batch's life as its events: a job and its artifact, the
// batch, two attempts (the first rejected and superseded, the second
// accepted) and the close.
func story(i int, at time.Time) []engine.Emit {
	job := events.StreamID{Kind: events.KindJob, ID: fmt.Sprintf("story-job-%03d", i)}
	art := events.StreamID{Kind: events.KindArtifact, ID: fmt.Sprintf("story-art-%03d", i)}
	batch := events.StreamID{Kind: events.KindBatch, ID: fmt.Sprintf("story-batch-%03d", i)}
	a1 := events.StreamID{Kind: events.KindAttempt, ID: fmt.Sprintf("story-att1-%03d", i)}
	a2 := events.StreamID{Kind: events.KindAttempt, ID: fmt.Sprintf("story-att2-%03d", i)}
	thread := fmt.Sprintf("story-thread-%03d", i)
	e := func(s events.StreamID, p events.Payload) engine.Emit { return engine.Emit{Stream: s, Payload: p} }
	return []engine.Emit{
		e(job, enginetest.SubmitPayload(i)),
		e(art, &events.ArtifactIngested{SourceJobID: job.ID, ManagedPath: "/x/payload", ManifestPath: "/x/manifest.json", ContentType: "application/json", SizeBytes: 14, SHA256: "00"}),
		e(job, &events.JobCompleted{ResultSummary: "CI is green", ArtifactID: art.ID, BatchID: batch.ID}),
		e(batch, &events.BatchOpened{SourceThreadID: thread, TargetKind: "cli", JobIDs: []string{job.ID}, ArtifactIDs: []string{art.ID},
			Summary: "ci: CI is green", FirstReadyAt: at, LastReadyAt: at, Policy: events.FailClosedPolicy, MaxDeliveryAttempts: 5,
			RedeliveryWindowEndsAt: at.Add(24 * time.Hour), Head: true}),
		e(a1, &events.AttemptPrepared{SourceThreadID: thread, BatchID: batch.ID, Generation: 1, SnapshotRevision: 1}),
		e(batch, &events.BatchMaterialized{AttemptID: a1.ID, Generation: 1, SnapshotRevision: 1, DeliveryMode: "cli_turn_start"}),
		e(a1, &events.AttemptAcceptPending{RPCRequestID: "r1", RPCKind: "turn_start", CorrelationMarker: "m1"}),
		e(a1, &events.AttemptSuperseded{Reason: "fresh delivery"}),
		e(a2, &events.AttemptPrepared{SourceThreadID: thread, BatchID: batch.ID, Generation: 2, SnapshotRevision: 2}),
		e(batch, &events.BatchMaterialized{AttemptID: a2.ID, Generation: 2, SnapshotRevision: 2, DeliveryMode: "cli_turn_start"}),
		e(a2, &events.AttemptAcceptPending{RPCRequestID: "r2", RPCKind: "turn_start", CorrelationMarker: "m2"}),
		e(a2, &events.AttemptAccepted{TurnID: "turn-2", ObservationDeadline: at.Add(time.Hour), CooldownUntil: at.Add(time.Minute)}),
		e(batch, &events.BatchDeliveryAccepted{AttemptID: a2.ID, Generation: 2, CooldownUntil: at.Add(time.Minute), NextDeliveryNotBefore: at.Add(time.Minute)}),
		e(a2, &events.AttemptClosed{Reason: "delivered"}),
		e(batch, &events.BatchClosed{CloseReason: "delivered"}),
	}
}

// BenchmarkAsOf measures a batch inspection as of a past seq on a log of
// bench.asof events (spec/engine.md, "Reading the past"): the stories'
// events are spread across the whole log, one step of every story after
// each stretch of random events, so that walking the log between a
// batch's first and last event would read most of it. The reference is
// the same run's bare read of exactly the events the inspection folds: a
// bbolt lookup of each seq and a decode of its record and payload. The
// median ratio of interleaved rounds is reported as x_bare; above 2 it
// fails. Like BenchmarkAppend, it runs with the daemon's GC settings
// (daemon.TuneGC): the figure is the engine as cbth runs it.
func BenchmarkAsOf(b *testing.B) {
	prevGC, prevLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	debug.SetGCPercent(prevGC)
	daemon.TuneGC(os.Getenv)
	defer func() { debug.SetGCPercent(prevGC); debug.SetMemoryLimit(prevLimit) }()
	dir := b.TempDir()
	e := open(b, dir, engine.Options{NoSync: true})
	ctx := context.Background()
	const stories = 10
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	var plans [][]engine.Emit
	for i := range stories {
		plans = append(plans, story(i, at))
	}
	steps := len(plans[0])
	g := enginetest.NewGenerator(1, "")
	var midSeq uint64
	for step := range steps {
		if err := enginetest.Bulk(ctx, e, g, *asOfCount/steps); err != nil {
			b.Fatal(err)
		}
		for _, p := range plans {
			if _, err := e.Append(ctx, engine.Meta{Actor: events.ActorCLI}, p[step].Stream, engine.AnyVersion, p[step].Payload); err != nil {
				b.Fatal(err)
			}
		}
		if step == steps-3 { // accepted, cooling down, not yet closed
			midSeq = e.Head()
		}
	}
	b.Logf("log of %d events; inspecting %d batches as of seq %d", e.Head(), stories, midSeq)

	inspect := func() (int, error) {
		folded := 0
		for i := range stories {
			err := e.ReadAsOf(midSeq, func(r *engine.AsOf) error {
				in, err := query.Inspect(r, fmt.Sprintf("story-batch-%03d", i))
				if err == nil && (len(in.Attempts) != 2 || in.Batch.State != fsm.BatchCooldown || len(in.Jobs) != 1 || len(in.Artifacts) != 1) {
					err = fmt.Errorf("inspection as of %d: %+v", midSeq, in)
				}
				folded += r.Events
				return err
			})
			if err != nil {
				return 0, err
			}
		}
		return folded, nil
	}
	// The streams each inspection folds.
	streams := make([][]events.StreamID, stories)
	for i, p := range plans {
		seen := map[events.StreamID]bool{}
		for _, em := range p {
			if !seen[em.Stream] {
				seen[em.Stream] = true
				streams[i] = append(streams[i], em.Stream)
			}
		}
	}
	// The bare scan of those streams' events up to the seq: in one read
	// transaction per batch, as each inspection has, each stream's seqs
	// walked in the stream index, each record looked up and decoded,
	// payload included. Nothing is folded, found or rendered.
	bare := func() (int, error) {
		n := 0
		for _, list := range streams {
			err := e.DB().View(func(tx *bolt.Tx) error {
				log, v := tx.Bucket([]byte("log")), projections.Wrap(tx)
				var err error
				for _, sid := range list {
					v.StreamSeqs(sid, midSeq, func(seq uint64) bool {
						var env events.Envelope
						if env, err = events.Decode(log.Get(binary.BigEndian.AppendUint64(nil, seq))); err == nil {
							_, err = events.DecodePayload(&env)
						}
						n++
						return err == nil
					})
				}
				return err
			})
			if err != nil {
				return 0, err
			}
		}
		return n, nil
	}
	total, err := bare()
	if err != nil {
		b.Fatal(err)
	}
	folded, err := inspect()
	if err != nil {
		b.Fatal(err)
	}
	if folded != total {
		b.Fatalf("the inspection folded %d events, the reference reads %d", folded, total)
	}
	const reps = 200 // each timing covers reps inspections of every story
	var ratios, asofs, bares []float64
	b.ResetTimer()
	for range b.N {
		for range max(1, *benchRounds) {
			t0 := time.Now()
			for range reps {
				if _, err := bare(); err != nil {
					b.Fatal(err)
				}
			}
			tb := time.Since(t0)
			t0 = time.Now()
			for range reps {
				if _, err := inspect(); err != nil {
					b.Fatal(err)
				}
			}
			ta := time.Since(t0)
			ratios = append(ratios, ta.Seconds()/tb.Seconds())
			asofs = append(asofs, float64(ta.Microseconds())/float64(reps*stories))
			bares = append(bares, float64(tb.Microseconds())/float64(reps*stories))
		}
	}
	b.ReportMetric(float64(total/stories), "events/inspection")
	b.ReportMetric(median(asofs), "asof_us")
	b.ReportMetric(median(bares), "bare_us")
	b.ReportMetric(median(ratios), "x_bare")
	if r := median(ratios); r > 2 {
		b.Errorf("an inspection as of a seq took %.2fx the bare read of its events; the bound is 2x", r)
	}
}
