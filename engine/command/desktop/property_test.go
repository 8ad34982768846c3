package desktop_test

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
	"github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

var (
	seedFlag         = flag.Uint64("seed", 0, "seed for the Desktop writeback run (0 picks one)")
	desktopStepsFlag = flag.Int("desktop-steps", 300, "steps of the seeded Desktop writeback run (1000 for the full run: just desktop-random)")
)

var armCfg = desktop.ArmConfig{Delivery: cfg, Desktop: desktop.DesktopConfig{ArmLease: 5 * time.Minute,
	PauseAfter: 90 * time.Second, PauseWindow: 90 * time.Second, RecoveryInlineBytes: 256, RecoveryLease: 15 * time.Minute, MarkerTTL: 6 * time.Hour}}

// A seeded random run of the whole Desktop writeback: jobs, the
// scheduler's preparation, bridges that arm with their own request ids
// and crash between any two steps (forgetting their lease), callers that
// wake with current or stale tokens, pause proofs for current and old
// generations, degrades and repairs, and the clock crossing every
// deadline. After every step: no continuation handed out twice, and
// every batch's delivery_attempt_count is the number of arms that
// succeeded for it. At the end the log replays to the same projections.
func TestDesktopWritebackRandomized(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed: %d (rerun with -seed=%d)", seed, seed)
	rnd := rand.New(rand.NewPCG(seed, seed>>2))
	clock := engine.NewManualClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	e := enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{Clock: clock, NoSync: true})
	ctx := context.Background()
	fps := map[string]string{desktop.TransportDirect: "fp1-test"}
	// allow passes on the errors a random run expects and fails on any
	// other.
	allow := func(d engine.Decider, err error) error {
		t.Helper()
		switch errs.CodeOf(err) {
		case "", errs.ESTALE, errs.EBUSY, errs.EAGAIN, errs.ESTATE, errs.ENOENT,
			errs.TransientNotReady, errs.StaleOrSuperseded, errs.AlreadyCrossed, errs.BindingOrCapabilityInvalid:
			return err
		}
		t.Fatalf("seed %d: %T: %v", seed, d, err)
		return err
	}
	meta := engine.Meta{Actor: events.ActorBridge}
	exec := func(d engine.Decider) (engine.Result, error) {
		t.Helper()
		res, err := e.Execute(ctx, meta, d)
		return res, allow(d, err)
	}
	must := func(d engine.Decider) {
		if _, err := exec(d); err != nil {
			t.Fatalf("seed %d: %T: %v", seed, d, err)
		}
	}
	must(desktop.RepairInstallation{ReadTransport: desktop.TransportDirect, ReadCap: events.CapValidated, WritebackCap: events.CapValidated, Fingerprint: fps[desktop.TransportDirect]})
	must(desktop.SelectBridge{BridgeThreadID: "bridge"})
	threads := []string{"d0", "d1", "d2"}
	for _, th := range threads {
		must(desktop.RepairBinding{ThreadID: th, AutomationID: "auto-" + th})
	}
	type token struct {
		thread, batch, attempt string
		gen, rev               uint64
	}
	// What bridges and callers remember: every token ever offered (old
	// ones make stale wakes) and the leases bridges got. A crash forgets
	// a bridge's leases.
	var seen []token
	leases := map[string]string{} // request id + attempt -> lease
	handed := map[string]int{}    // batch -> fresh crossings
	armedFor := map[string]int{}  // batch -> successful arms
	var jobs []string
	steps := *desktopStepsFlag
	if testing.Short() && steps > 300 {
		steps = 300
	}
	crossings, arms := 0, 0
	// The relay: a marker issued for a kind and token, and its envelope
	// printed one to three times (a heartbeat re-emits), now and then
	// with a conflicting copy or in another bridge's rollout (never
	// applied); an arm it applies counts like a direct one.
	markers, relayed := 0, 0
	issue := func(kind string, at desktop.ArmToken) (string, bool) {
		markers++
		c := desktop.IssueRelayMarker{Kind: kind, BridgeThreadID: "bridge", ArmToken: at,
			Marker: fmt.Sprintf("m1-%040d", markers), TTL: armCfg.Desktop.MarkerTTL}
		m, _, err := engine.Exec[desktop.IssuedMarker](ctx, e, meta, c)
		if allow(c, err) != nil {
			return "", false
		}
		return m.Marker, true
	}
	relay := func(kind, marker string, at desktop.ArmToken, batch string) {
		for n := 1 + rnd.IntN(3); n > 0; n-- {
			sha := "sha-" + marker
			if rnd.IntN(6) == 0 {
				sha += "-conflicting"
			}
			from := "bridge"
			if rnd.IntN(8) == 0 {
				from = "another-bridge"
			}
			c := desktop.ConsumeRelay{Config: armCfg, BridgeThreadID: from, Marker: marker, Kind: kind, ThreadID: at.ThreadID,
				AttemptID: at.AttemptID, Generation: at.Generation, RequestID: at.BridgeRequestID, SHA256: sha, Fingerprints: fps}
			v, res, err := engine.Exec[desktop.Consumed](ctx, e, meta, c)
			err = allow(c, err)
			if err == nil && from != "bridge" && res.Outcome != "wrong_bridge" {
				t.Fatalf("an envelope in another bridge's rollout: %s %+v", res.Outcome, v)
			}
			if err == nil && res.Outcome == "consumed" {
				relayed++
				if v.Applied == "armed" {
					armedFor[batch]++
					arms++
				}
			}
		}
	}
	for step := 0; step < steps; step++ {
		th := threads[rnd.IntN(len(threads))]
		req := fmt.Sprintf("wake-%d", rnd.IntN(3))
		pick := func() (token, bool) {
			if len(seen) == 0 {
				return token{}, false
			}
			if rnd.IntN(3) > 0 {
				return seen[len(seen)-1-rnd.IntN(min(2, len(seen)))], true
			}
			return seen[rnd.IntN(len(seen))], true
		}
		switch op := rnd.IntN(100); {
		case op < 12:
			c := command.SubmitJob{Target: command.TargetDesktop, ThreadID: th, TaskKind: "k", Summary: fmt.Sprintf("job %d", step),
				Policy: events.DeliveryPolicy{ReadOnly: true}}
			if id, _, err := engine.Exec[string](ctx, e, meta, c); allow(c, err) == nil && id != "" {
				jobs = append(jobs, id)
			}
		case op < 24 && len(jobs) > 0:
			exec(command.CompleteJob{Config: cfg, JobID: jobs[rnd.IntN(len(jobs))], Summary: "ok"})
		case op < 36: // the scheduler prepares what the gate lets through
			var ok bool
			e.Read(func(s engine.Snapshot) error {
				el, err := cfg.Eligible(s, clock.Now(), th)
				if err == nil && el.OK {
					g, _ := desktop.DesktopGate(s, clock.Now(), el.Batch, fps[desktop.TransportDirect])
					ok = g.OK
				}
				return nil
			})
			if !ok {
				continue
			}
			res, _ := exec(command.PrepareAttempt{Config: cfg, ThreadID: th, DeliveryMode: command.ModeDesktop})
			if res.Outcome == "prepared" {
				e.Read(func(s engine.Snapshot) error {
					a, _ := command.LiveAttempt(s, th)
					seen = append(seen, token{th, a.BatchID, a.ID, a.Generation, a.SnapshotRevision})
					return nil
				})
			}
		case op < 50: // a bridge: note-arm-pending, then (unless it crashes) note-arm
			tok, ok := pick()
			if !ok {
				continue
			}
			at := desktop.ArmToken{ThreadID: tok.thread, AttemptID: tok.attempt, Generation: tok.gen, BridgeRequestID: req}
			if rnd.IntN(2) == 0 { // the same two steps through the transcript relay
				if m, ok := issue(aggregate.RelayArmPending, at); ok {
					relay(aggregate.RelayArmPending, m, at, tok.batch)
				}
				if rnd.IntN(4) == 0 {
					continue // the bridge crashed before the second wake
				}
				if m, ok := issue(aggregate.RelayArmAccepted, at); ok {
					relay(aggregate.RelayArmAccepted, m, at, tok.batch)
				}
				continue
			}
			c := desktop.NoteArmPending{Config: armCfg, ArmToken: at, Fingerprints: fps}
			if l, _, err := engine.Exec[desktop.ArmLease](ctx, e, meta, c); allow(c, err) == nil {
				leases[req+tok.attempt] = l.LeaseID
			}
			if rnd.IntN(4) == 0 {
				delete(leases, req+tok.attempt) // the bridge crashed before note-arm
				continue
			}
			lease, known := leases[req+tok.attempt]
			if !known {
				lease = "forgotten"
			}
			r, err := exec(desktop.NoteArm{Config: armCfg, ArmToken: at, LeaseID: lease})
			if err == nil && r.Outcome == "armed" {
				armedFor[tok.batch]++
				arms++
			}
		case op < 66: // a caller wakes with some token
			tok, ok := pick()
			if !ok {
				continue
			}
			_, err := exec(desktop.NoteBoundaryCrossed{Config: armCfg, ThreadID: tok.thread, BatchID: tok.batch, AttemptID: tok.attempt,
				Generation: tok.gen, ExpectedRevision: tok.rev, Fingerprints: fps})
			if err == nil {
				handed[tok.batch]++
				crossings++
				if handed[tok.batch] > 1 {
					t.Fatalf("seed %d step %d: batch %s handed out %d continuations", seed, step, tok.batch, handed[tok.batch])
				}
			}
		case op < 84: // a pause proof, for the armed generation or an older one
			var gen uint64
			e.Read(func(s engine.Snapshot) error {
				if b, _ := command.BindingOf(s, th); b != nil {
					gen = b.ArmedGeneration
				}
				return nil
			})
			if gen > 1 && rnd.IntN(3) == 0 {
				gen--
			}
			if rnd.IntN(2) == 0 { // through the relay
				at := desktop.ArmToken{ThreadID: th, Generation: gen, BridgeRequestID: req}
				if m, ok := issue(aggregate.RelayPaused, at); ok {
					relay(aggregate.RelayPaused, m, at, "")
				}
				continue
			}
			exec(desktop.NotePaused{ThreadID: th, Generation: gen, BridgeRequestID: req})
		case op < 88: // the operator repairs a degraded binding
			exec(desktop.RepairBinding{ThreadID: th, AutomationID: "auto-" + th})
		default: // time passes; the sweep runs until it has nothing left
			clock.Advance(time.Duration(5+rnd.IntN(60)) * time.Second)
			for range 100 {
				res, err := e.Execute(ctx, engine.Meta{Actor: events.ActorSweep}, command.Sweep{Config: cfg})
				if err != nil {
					t.Fatalf("seed %d: sweep: %v", seed, err)
				}
				if len(res.Events) == 0 {
					break
				}
			}
		}
		checkDesktop(t, e, seed, step, handed, armedFor)
	}
	t.Logf("%d steps: %d arms, %d continuations handed out, %d batches, %d relay envelopes consumed", steps, arms, crossings, len(handed), relayed)
	if steps >= 1000 && (arms == 0 || crossings == 0) {
		t.Fatalf("seed %d: the run exercised too little: %d arms, %d crossings", seed, arms, crossings)
	}
	if d := enginetest.ReplayDiff(t, e, 5); len(d) > 0 {
		t.Fatalf("seed %d: projections differ from a replay: %v", seed, d)
	}
}

// checkDesktop asserts, from the log's own state: every batch closed
// handoff_recorded was handed out exactly once, and no other batch ever
// was; each batch counted exactly the arms that succeeded.
func checkDesktop(t *testing.T, e *engine.Engine, seed uint64, step int, handed, armedFor map[string]int) {
	t.Helper()
	e.Read(func(s engine.Snapshot) error {
		ids := map[string]bool{}
		for id := range handed {
			ids[id] = true
		}
		for id := range armedFor {
			ids[id] = true
		}
		for id := range ids {
			st, err := s.State(events.KindBatch, id)
			if err != nil {
				t.Fatal(err)
			}
			b := st.(*aggregate.Batch)
			if (b.CloseReason == command.CloseHandoffRecorded) != (handed[id] == 1) {
				t.Fatalf("seed %d step %d: batch %s closed %q after %d crossings", seed, step, id, b.CloseReason, handed[id])
			}
			if b.DeliveryAttemptCount != armedFor[id] {
				t.Fatalf("seed %d step %d: batch %s counts %d attempts, %d arms succeeded", seed, step, id, b.DeliveryAttemptCount, armedFor[id])
			}
		}
		return nil
	})
}
