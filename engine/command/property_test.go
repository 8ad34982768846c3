package command_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "seed for the delivery property test (0 picks one)")
	stepsFlag = flag.Int("steps", 3000, "steps of the delivery property test")
)

var cfg = enginetest.DeliveryConfig()

// Seeded random interleavings of submits, completions, failures, cancels,
// deliveries with every outcome, operator closes and clock advances. After
// every step the delivery invariants must hold; at the end the log must
// replay to the same projections.
func TestDeliveryProperties(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed: %d (rerun with -seed=%d)", seed, seed)
	rnd := rand.New(rand.NewPCG(seed, seed>>1))
	clock := engine.NewManualClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	e := enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{Clock: clock, NoSync: true})
	ctx := context.Background()
	meta := engine.Meta{Actor: events.ActorCLI}
	threads := []string{"t0", "t1", "t2", "t3"}
	var jobs []string
	exec := func(d engine.Decider) engine.Result {
		t.Helper()
		res, err := e.Execute(ctx, meta, d)
		if err != nil && !expected(err) {
			t.Fatalf("seed %d: %T: %v", seed, d, err)
		}
		return res
	}
	// answer is exec for a command that answers with a V.
	answer := func(d engine.Decider) any {
		t.Helper()
		switch c := d.(type) {
		case command.SubmitJob:
			v, _, err := engine.Exec[string](ctx, e, meta, c)
			if err != nil && !expected(err) {
				t.Fatalf("seed %d: %T: %v", seed, d, err)
			}
			return v
		}
		return nil
	}
	// deliveredTo records, per batch, how many attempts the channel
	// accepted, to check delivery_attempt_count.
	accepted := map[string]int{}
	parkedAt := map[string]uint64{} // batch -> log head when first seen parked
	// The accepted turns the "channel" may still report on, in the order
	// they were accepted; turn events arrive at random later steps, from
	// the barrier's session and epoch or from a stale one.
	type turn struct {
		attempt, id, session string
		epoch                uint64
	}
	var turns []turn
	epoch := uint64(1) // the current stream; a restart starts a new one
	side := newSideEffects()
	steps := *stepsFlag
	if testing.Short() {
		steps = 500
	}
	for step := 0; step < steps; step++ {
		th := threads[rnd.IntN(len(threads))]
		switch op := rnd.IntN(100); {
		case op < 18:
			if id, _ := answer(command.SubmitJob{Target: "debug", ThreadID: th, TaskKind: "k", Summary: fmt.Sprintf("job %d", step), Policy: events.FailClosedPolicy}).(string); id != "" {
				jobs = append(jobs, id)
			}
		case op < 36 && len(jobs) > 0:
			exec(command.CompleteJob{Config: cfg, JobID: jobs[rnd.IntN(len(jobs))], Summary: "ok"})
		case op < 40 && len(jobs) > 0:
			exec(command.FailJob{JobID: jobs[rnd.IntN(len(jobs))], Reason: "boom"})
		case op < 43 && len(jobs) > 0:
			exec(command.CancelJob{Config: cfg, JobID: jobs[rnd.IntN(len(jobs))]})
		case op < 65:
			head := e.Head()
			route := command.Route{RPCKind: command.RPCTurnStart, DeliveryMode: command.ModeCLIStart, ManagedSessionID: "s-" + th, SessionEpoch: epoch}
			del, res, err := engine.Exec[command.Delivery](ctx, e, meta, command.StartDelivery{Config: cfg, ThreadID: th, Route: route})
			if err != nil && !expected(err) {
				t.Fatalf("seed %d: StartDelivery: %v", seed, err)
			}
			if res.Outcome != "started" {
				if e.Head() != head {
					t.Fatalf("seed %d step %d: a delivery that did not start appended events", seed, step)
				}
				continue
			}
			if at, ok := parkedAt[del.BatchID]; ok {
				t.Fatalf("seed %d step %d: batch %s parked at head %d got an automatic delivery", seed, step, del.BatchID, at)
			}
			checkHead(t, e, th, del.BatchID, seed, step)
			side.check(t, e, seed, step) // the barrier itself must be allowed
			outcome := []engine.Outcome{command.Accepted, command.Accepted, command.RejectedBefore, command.AcceptanceUnknown}[rnd.IntN(4)]
			if rnd.IntN(8) == 0 {
				continue // the answer never comes: a restart finds it in flight
			}
			tracks := rnd.IntN(3) > 0
			rec := exec(command.RecordOutcome{Config: cfg, AttemptID: del.AttemptID, RPCRequestID: del.RPCRequestID,
				ManagedSessionID: del.ManagedSessionID, SessionEpoch: del.SessionEpoch, Outcome: outcome, TurnID: "turn-" + del.AttemptID, Tracks: tracks})
			if rec.Outcome == command.Accepted {
				accepted[del.BatchID]++
				if tracks {
					turns = append(turns, turn{del.AttemptID, "turn-" + del.AttemptID, del.ManagedSessionID, del.SessionEpoch})
				}
			}
		case op < 80 && len(turns) > 0:
			// An asynchronous turn event, for any turn ever accepted:
			// current or stale, from its own stream or another epoch.
			tn := turns[len(turns)-1] // mostly the latest, so some turns complete in time
			if rnd.IntN(3) == 0 {
				tn = turns[rnd.IntN(len(turns))]
			}
			ev := []string{"turn_started", "turn_completed", "turn_completed", "turn_completed", "turn_failed", "turn_interrupted", "turn_replaced"}[rnd.IntN(7)]
			ep := tn.epoch
			if rnd.IntN(5) == 0 {
				ep++
			}
			head := e.Head()
			res := exec(command.ObserveTurn{Config: cfg, AttemptID: tn.attempt, TurnID: tn.id, Event: ev, ManagedSessionID: tn.session, SessionEpoch: ep})
			if ep != tn.epoch && (res.Outcome != command.SessionMismatch || e.Head() != head) {
				t.Fatalf("seed %d step %d: an event from epoch %d on a turn of epoch %d: outcome %q, head %d -> %d", seed, step, ep, tn.epoch, res.Outcome, head, e.Head())
			}
			if res.Outcome == command.CloseDelivered && ev != "turn_completed" {
				t.Fatalf("seed %d step %d: %s closed a batch delivered", seed, step, ev)
			}
		case op < 83:
			// A restart: the new daemon's stream is a new epoch, and
			// whatever was in flight is reconciled.
			epoch++
			exec(command.ReconcileInFlight{Config: cfg})
		case op < 88:
			reason := command.OperatorReasons[rnd.IntN(len(command.OperatorReasons))]
			exec(command.CloseHead{Config: cfg, ThreadID: th, Reason: reason})
		default:
			clock.Advance(time.Duration(rnd.IntN(90)) * time.Second)
			now := clock.Now()
			for i := 0; ; i++ {
				res, err := e.ExecuteAt(ctx, engine.Meta{Actor: events.ActorSweep}, now, command.Sweep{Config: cfg})
				if err != nil {
					t.Fatalf("seed %d step %d: sweep: %v", seed, step, err)
				}
				if len(res.Events) == 0 {
					break
				}
				if i > 100 {
					t.Fatalf("seed %d step %d: the sweep does not settle", seed, step)
				}
			}
		}
		checkInvariants(t, e, threads, accepted, parkedAt, seed, step)
		side.check(t, e, seed, step)
	}
	var counted int
	e.Read(func(sn engine.Snapshot) error { counted = query.Undelivered(sn); return nil })
	if counted != side.undelivered {
		t.Fatalf("seed %d: %d batches closed undelivered, counted %d", seed, side.undelivered, counted)
	}
	if steps >= 1000 && (side.marked == 0 || side.delivered == 0 || side.undelivered == 0) {
		t.Fatalf("seed %d: the run exercised too little: %d batches with a possible side effect, %d delivered", seed, side.marked, side.delivered)
	}
	t.Logf("%d batches had a possible side effect and were never delivered automatically again; %d closed delivered; %d closed undelivered",
		side.marked, side.delivered, side.undelivered)
	if d := enginetest.ReplayDiff(t, e, 5); len(d) > 0 {
		t.Fatalf("seed %d: projections differ from a replay: %v", seed, d)
	}
	rep, err := e.Verify(ctx)
	if err != nil || !rep.OK() {
		t.Fatalf("seed %d: verify: %v %+v", seed, err, rep.Problems)
	}
	closed := 0
	for _, n := range accepted {
		closed += n
	}
	if closed == 0 || e.Head() < uint64(steps/2) {
		t.Fatalf("seed %d: the run exercised too little: %d accepted deliveries, %d events", seed, closed, e.Head())
	}
	t.Logf("%d steps, %d events, %d accepted deliveries", steps, e.Head(), closed)
}

func expected(err error) bool {
	switch c := errCode(err); c {
	case "ESTATE", "ENOENT":
		return true
	}
	return false
}

// checkHead asserts a delivery went to the thread's head: the oldest open
// batch. FIFO never reorders.
func checkHead(t *testing.T, e *engine.Engine, thread, batch string, seed uint64, step int) {
	t.Helper()
	e.View(func(v engine.ProjectionTx) error {
		for _, r := range v.Scan(index.ThreadOpen, index.ThreadPrefix(thread)) {
			if _, ok := index.ThreadOpenSeq(r.Key, thread); !ok {
				continue
			}
			if r.ID != batch {
				t.Fatalf("seed %d step %d: delivered batch %s but the head of %s is %s", seed, step, batch, thread, r.ID)
			}
			return nil
		}
		return nil
	})
}

func checkInvariants(t *testing.T, e *engine.Engine, threads []string, accepted map[string]int, parkedAt map[string]uint64, seed uint64, step int) {
	t.Helper()
	e.View(func(v engine.ProjectionTx) error {
		for _, th := range threads {
			if n := len(v.Lookup(index.ThreadLive, th)); n > 1 {
				t.Fatalf("seed %d step %d: thread %s has %d non-terminal attempts", seed, step, th, n)
			}
			heads := 0
			for _, r := range v.Scan(index.ThreadOpen, index.ThreadPrefix(th)) {
				if _, ok := index.ThreadOpenSeq(r.Key, th); !ok {
					continue
				}
				s, _ := v.State(events.KindBatch, r.ID)
				if s.(*aggregate.Batch).IsHead {
					heads++
				}
			}
			if heads > 1 {
				t.Fatalf("seed %d step %d: thread %s has %d head batches", seed, step, th, heads)
			}
		}
		return v.ForEach(events.KindBatch, func(s aggregate.State) error {
			b := s.(*aggregate.Batch)
			if b.DeliveryAttemptCount != accepted[b.ID] {
				t.Fatalf("seed %d step %d: batch %s counts %d attempts, the channel accepted %d", seed, step, b.ID, b.DeliveryAttemptCount, accepted[b.ID])
			}
			if b.ReplayPolicy == aggregate.ReplayManual {
				if _, ok := parkedAt[b.ID]; !ok {
					parkedAt[b.ID] = e.Head()
				}
			}
			if b.Open() && b.IsHead {
				// The head is the oldest open batch of its thread.
				first := ""
				for _, r := range v.Scan(index.ThreadOpen, index.ThreadPrefix(b.SourceThreadID)) {
					if _, ok := index.ThreadOpenSeq(r.Key, b.SourceThreadID); first == "" && ok {
						first = r.ID
					}
				}
				if first != b.ID {
					t.Fatalf("seed %d step %d: head %s is behind open batch %s", seed, step, b.ID, first)
				}
			}
			return nil
		})
	})
}

func errCode(err error) string { return string(errs.CodeOf(err)) }

// sideEffects follows the log, independently of the commands' own
// reasoning, for the rule the seed puts first: once a delivery may have
// had a side effect that nothing proved (its acceptance unknown, or its
// accepted turn failed, was interrupted or replaced, expired, or lost its
// stream), the batch is never delivered automatically again. It marks a
// batch at the event that abandons such an attempt, and fails the test
// if any later barrier (attempt.accept_pending) belongs to a marked
// batch. It also checks that a thread never has two deliveries in flight
// or a delivery in flight beside a turn still tracked.
type sideEffects struct {
	next      uint64
	batchOf   map[string]string // attempt -> batch
	threadOf  map[string]string // attempt -> thread
	marked    int
	markedAt  map[string]uint64 // batch -> seq of the marking event
	inFlight  map[string]string // thread -> attempt accept_pending or tracking
	delivered int
	// rejects counts each attempt's proven rejects; rejected is the
	// attempt of the reject just read, whose back-off follows it.
	rejects     map[string]int
	rejected    string
	undelivered int // batches closed undelivered
}

func newSideEffects() *sideEffects {
	return &sideEffects{next: 1, batchOf: map[string]string{}, threadOf: map[string]string{}, markedAt: map[string]uint64{}, inFlight: map[string]string{}, rejects: map[string]int{}}
}

func (s *sideEffects) check(t *testing.T, e *engine.Engine, seed uint64, step int) {
	t.Helper()
	err := e.ReadFrom(s.next, func(env events.Envelope) error {
		s.next = env.Seq + 1
		p, err := events.DecodePayload(&env)
		if err != nil {
			return err
		}
		id := env.Stream.ID
		release := func() {
			if s.inFlight[s.threadOf[id]] == id {
				delete(s.inFlight, s.threadOf[id])
			}
		}
		switch p := p.(type) {
		case *events.AttemptPrepared:
			s.batchOf[id], s.threadOf[id] = p.BatchID, p.SourceThreadID
		case *events.AttemptAcceptPending:
			b, th := s.batchOf[id], s.threadOf[id]
			if at, ok := s.markedAt[b]; ok {
				t.Fatalf("seed %d step %d: seq %d: batch %s got a delivery after a possible side effect at seq %d", seed, step, env.Seq, b, at)
			}
			if other, ok := s.inFlight[th]; ok {
				t.Fatalf("seed %d step %d: seq %d: thread %s got a delivery while attempt %s was in flight or tracked", seed, step, env.Seq, th, other)
			}
			s.inFlight[th] = id
		case *events.AttemptAccepted:
			if p.ObservationDeadline.IsZero() {
				release() // a wake-up: nothing left to observe
			}
		case *events.AttemptRejectedBeforeAccept:
			release()
			s.rejects[id]++
			s.rejected = id
		case *events.BatchEligibleAfterSet:
			// The back-off grows with the attempt's rejects as the log
			// counts them, up to the cap.
			n := s.rejects[s.rejected]
			if want := env.RecordedAt.Add(cfg.Backoff().Delay(s.rejected, n)); !p.EligibleAfter.Equal(want) || s.rejected == "" {
				t.Fatalf("seed %d step %d: seq %d: eligible_after %v after reject %d of attempt %q, want %v", seed, step, env.Seq, p.EligibleAfter, n, s.rejected, want)
			}
			if wait := p.EligibleAfter.Sub(env.RecordedAt); wait <= 0 || wait > cfg.EligibleBackoffMax {
				t.Fatalf("seed %d step %d: seq %d: a back-off of %v, outside (0, %v]", seed, step, env.Seq, wait, cfg.EligibleBackoffMax)
			}
			s.rejected = ""
		case *events.AttemptClosed, *events.AttemptSuperseded:
			release()
		case *events.AttemptAbandoned:
			release()
			if p.RPCState == string(command.AcceptanceUnknown) || p.ObservationState != "" {
				if b := s.batchOf[id]; s.markedAt[b] == 0 {
					s.markedAt[b] = env.Seq
					s.marked++
				}
			}
		case *events.BatchClosed:
			if p.CloseReason == command.CloseDelivered {
				s.delivered++
			}
			if p.Undelivered != command.Undelivered(p.CloseReason) {
				t.Fatalf("seed %d step %d: seq %d: batch closed %s with undelivered=%t", seed, step, env.Seq, p.CloseReason, p.Undelivered)
			}
			if p.Undelivered {
				s.undelivered++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("seed %d step %d: read the log: %v", seed, step, err)
	}
}
