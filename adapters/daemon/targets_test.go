package daemon_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/daemon/codexmod"
	"github.com/cbth-dev/cbth/adapters/daemon/cortexmod"
	"github.com/cbth-dev/cbth/adapters/daemon/desktopmod"
	"github.com/cbth-dev/cbth/adapters/daemon/gatewaymod"
	"github.com/cbth-dev/cbth/adapters/daemon/inspectmod"
	"github.com/cbth-dev/cbth/adapters/daemon/mcpmod"
	"github.com/cbth-dev/cbth/adapters/daemon/pluginmod"
	"github.com/cbth-dev/cbth/adapters/daemon/tasksmod"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/testkit/daemontest"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/projections"
)

// The target API through a real daemon (in this process, on the real
// socket and log, on a manual clock) with a fake push target registered
// as cli and a fake pull target registered as desktop.

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

type fakePush struct {
	mu        sync.Mutex
	host      target.Host
	proofs    []target.Proof
	open      []target.InFlight
	delivered []command.Delivery
}

func (f *fakePush) Spec() target.Spec {
	return target.Spec{Name: "cli", Kind: target.Push, RPCKind: command.RPCTurnStart, DeliveryMode: command.ModeCLIStart}
}

func (f *fakePush) Gate(ctx context.Context, h target.Head) target.Gate {
	if strings.HasPrefix(h.ThreadID, "busy") {
		return target.Gate{Reason: "cli: the thread has an active turn", Retry: t0.Add(time.Hour)}
	}
	return target.Gate{OK: true, Route: command.Route{ManagedSessionID: "s-" + h.ThreadID, SessionEpoch: 3}}
}

func (f *fakePush) Deliver(ctx context.Context, d command.Delivery) target.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delivered = append(f.delivered, d)
	return target.Result{Outcome: command.Accepted, TurnID: "turn-" + d.AttemptID, Tracks: true}
}

func (f *fakePush) Start(ctx context.Context, h target.Host) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.host = h
	return nil
}

func (f *fakePush) Reconcile(ctx context.Context, open []target.InFlight) []target.Proof {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.open = open
	return f.proofs
}

func (f *fakePush) KeepAlive(time.Time) []string {
	return []string{"cli: a foreground client is attached"}
}

type fakePull struct{}

func (fakePull) Spec() target.Spec {
	return target.Spec{Name: "desktop", Kind: target.Pull, DeliveryMode: command.ModeDesktop}
}
func (fakePull) Gate(context.Context, target.Head) target.Gate { return target.Gate{OK: true} }

type running struct {
	t    *testing.T
	root string
	c    *ipc.Client
}

func config() home.Config { return daemontest.Config() }

// modules are the daemon's features as cmd/cbth composes them
// (daemonModules there).
func modules() []daemon.Module {
	tasks, codex := tasksmod.New(), codexmod.New()
	return []daemon.Module{tasks, codex, pluginmod.New(), cortexmod.New(), desktopmod.New(), gatewaymod.New(), mcpmod.New(tasks, codex), inspectmod.New()}
}

// start runs a daemon on root until the test ends.
func start(t *testing.T, root string, targets ...target.Target) *running {
	t.Helper()
	return startWith(t, root, nil, targets...)
}

// startWith is start with the options changed by adjust first.
func startWith(t *testing.T, root string, adjust func(*daemon.Options), targets ...target.Target) *running {
	t.Helper()
	opt := daemon.Options{Home: home.Home{Root: root}, Config: config(), Clock: engine.NewManualClock(t0),
		Manual: true, Version: "test", Log: slog.New(slog.DiscardHandler), Targets: targets, Modules: modules()}
	if adjust != nil {
		adjust(&opt)
	}
	return &running{t: t, root: root, c: daemontest.Run(t, opt).Client}
}

func call[Req, Rep any](r *running, op api.Op[Req, Rep], req Req) Rep {
	r.t.Helper()
	rep, err := op.Call(r.c, req)
	if err != nil {
		r.t.Fatalf("%s: %v", op.Name, err)
	}
	return rep
}

func (r *running) ready(targetKind command.Target, thread string) string {
	r.t.Helper()
	j := call(r, api.JobSubmit, api.SubmitArgs{TargetKind: targetKind, SourceThreadID: thread, TaskKind: "ci", TaskSummary: "work"})
	call(r, api.JobComplete, api.CompleteArgs{JobID: j.JobID, ResultSummary: "done"})
	return j.JobID
}

func (r *running) head(thread string) query.BatchInspection {
	r.t.Helper()
	return call(r, api.BatchInspectHead, api.ThreadArgs{SourceThreadID: thread})
}

// A push target's gate routes the delivery: the barrier records its rpc
// kind and its session and epoch, the batch its delivery mode. Turn
// events that come later through the sink count only from that session
// and epoch. Its keep-alive reasons show in the daemon's.
func TestPushTarget_RouteSinkGateAndKeepAlive(t *testing.T) {
	push := &fakePush{}
	r := start(t, filepath.Join(t.TempDir(), "home"), push, fakePull{})
	r.ready("cli", "P")
	in := r.head("P")
	a := in.HeadAttempt
	if a == nil || a.State != fsm.AttemptCooldown || a.RPCKind != command.RPCTurnStart || a.ManagedSessionID != "s-P" || a.SessionEpoch != 3 ||
		a.ObservationState != "tracking" || in.Batch.DeliveryMode != command.ModeCLIStart {
		t.Fatalf("after delivery: batch mode %q, attempt %+v", in.Batch.DeliveryMode, a)
	}
	if len(push.delivered) != 1 || push.delivered[0].ManagedSessionID != "s-P" || push.delivered[0].SessionEpoch != 3 ||
		push.delivered[0].RPCKind != command.RPCTurnStart || push.delivered[0].Marker == "" {
		t.Fatalf("the target got %+v", push.delivered)
	}
	st := call(r, api.DaemonStatus, api.Empty{})
	if !contains(st.BusyReasons, "cli: a foreground client is attached") || !contains(st.BusyReasons, "observing 1 accepted turn until") {
		t.Fatalf("busy reasons %v", st.BusyReasons)
	}
	ev := target.TurnEvent{AttemptID: a.AttemptID, TurnID: a.TurnID, Event: "turn_completed", ManagedSessionID: "s-P", SessionEpoch: 2}
	if out, err := push.host.Sink.Observe(context.Background(), ev); err != nil || out != command.SessionMismatch {
		t.Fatalf("an event from epoch 2: %q %v", out, err)
	}
	ev.SessionEpoch, ev.ManagedSessionID = 3, "s-Q"
	if out, err := push.host.Sink.Observe(context.Background(), ev); err != nil || out != command.SessionMismatch {
		t.Fatalf("an event from another session: %q %v", out, err)
	}
	ev.ManagedSessionID = "s-P"
	if out, err := push.host.Sink.Observe(context.Background(), ev); err != nil || out != command.CloseDelivered {
		t.Fatalf("the event from the barrier's stream: %q %v", out, err)
	}
	b := call(r, api.BatchInspect, api.BatchArgs{BatchID: in.Batch.BatchID})
	if b.Batch.State != fsm.BatchClosed || b.Batch.CloseReason != command.CloseDelivered {
		t.Fatalf("batch %+v", b.Batch)
	}

	// A gate that says no: nothing is delivered and inspect says why.
	r.ready("cli", "busy-1")
	in = r.head("busy-1")
	if in.HeadAttempt != nil || !strings.Contains(in.Gate, "active turn") || len(push.delivered) != 1 {
		t.Fatalf("gated head: gate %q attempt %+v deliveries %d", in.Gate, in.HeadAttempt, len(push.delivered))
	}
}

// A pull target's head only gets its attempt prepared: no barrier, no
// call, no count; further passes leave it waiting for its target.
func TestPullTarget_OnlyPrepares(t *testing.T) {
	r := start(t, filepath.Join(t.TempDir(), "home"), &fakePush{}, fakePull{})
	r.ready("desktop", "D")
	r.ready("debug", "other") // another pass
	in := r.head("D")
	a := in.HeadAttempt
	if a == nil || a.State != fsm.AttemptPrepared || a.RPCRequestID != "" || a.Generation != 1 || len(in.Attempts) != 1 ||
		in.Batch.State != fsm.BatchMaterialized || in.Batch.DeliveryMode != command.ModeDesktop || in.Batch.DeliveryAttemptCount != 0 {
		t.Fatalf("pull head: batch %+v attempts %+v", in.Batch, in.Attempts)
	}
}

// pullSender is a pull target that prepares: for a thread named "q-…" it
// answers with a send (as Desktop's queue transport does), refused the
// first time and a hand-off after; any other head it only prepares.
type pullSender struct {
	fakePull
	mu    sync.Mutex
	sends int
}

func (p *pullSender) Gate(_ context.Context, h target.Head) target.Gate {
	if strings.HasPrefix(h.ThreadID, "q-") {
		return target.Gate{OK: true, Route: command.Route{RPCKind: command.RPCQueueAdd, DeliveryMode: command.ModeDesktopQueue}}
	}
	return target.Gate{OK: true}
}

func (p *pullSender) Prepare(_ context.Context, h target.Head, g target.Gate) target.Gate {
	if g.Route.DeliveryMode == command.ModeDesktopQueue {
		g.Send = func(context.Context, command.Delivery) target.Result {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.sends++; p.sends == 1 {
				return target.Result{Outcome: command.RejectedBefore, Reason: "codex queue refused"}
			}
			return target.Result{Outcome: command.Accepted, Handoff: "item-1", CodexHome: "/codex"}
		}
	}
	return g
}

// A pull target that prepares may answer a head with a send: that head
// goes as a push target's does (the barrier, then the send), and one the
// send refused is sent again once its back-off ends, not left waiting
// for the target's helpers; a head it answers with no send is only
// prepared.
func TestPullTarget_PreparerSends(t *testing.T) {
	p := &pullSender{}
	r := start(t, filepath.Join(t.TempDir(), "home"), &fakePush{}, p)
	r.ready("desktop", "D")
	if a := r.head("D").HeadAttempt; a == nil || a.State != fsm.AttemptPrepared || a.RPCKind != "" {
		t.Fatalf("a head with no send: %+v", a)
	}
	r.ready("desktop", "q-1")
	in := r.head("q-1")
	if a := in.HeadAttempt; a == nil || a.State != fsm.AttemptPrepared || a.RPCKind != command.RPCQueueAdd || len(a.RejectedRequestIDs) != 1 ||
		!strings.Contains(in.Gate, "backing off") {
		t.Fatalf("after the refused send: gate %q attempt %+v", in.Gate, a)
	}
	call(r, api.DebugClock, api.AdvanceArgs{By: "1h"})
	b := call(r, api.BatchInspect, api.BatchArgs{BatchID: in.Batch.BatchID})
	if b.Batch.State != fsm.BatchClosed || b.Batch.CloseReason != command.CloseHandoffRecorded || b.Batch.DeliveryMode != command.ModeDesktopQueue || p.sends != 2 {
		t.Fatalf("after the back-off: batch %+v, %d sends", b.Batch, p.sends)
	}
}

// At start-up each target may prove what became of its attempts left in
// flight; ReconcileInFlight parks the rest. Proofs count only on the
// session and epoch the barrier recorded.
func TestReconcile_ProofsAndTheRest(t *testing.T) {
	root := filepath.Join(t.TempDir(), "home")
	h := home.Home{Root: root}
	if err := h.Ensure(); err != nil {
		t.Fatal(err)
	}
	cfg := command.DeliveryConfig{MaxJobsPerBatch: 8, MaxTotalBytes: 1 << 20, Cooldown: time.Minute, RedeliveryWindow: time.Hour,
		MaxDeliveryAttempts: 5, EligibleBackoff: time.Minute, InlinePayloadLimit: 1 << 10, ObservationWindow: time.Hour}
	e, err := engine.Open(h.DB(), engine.Options{Projections: projections.Store{}, Clock: engine.NewManualClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	exec := func(d engine.Decider) engine.Result {
		t.Helper()
		res, err := e.Execute(ctx, engine.Meta{Actor: events.ActorCLI}, d)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// One attempt in flight per thread, all on session s-<thread> epoch 1.
	inFlight := map[string]command.Delivery{}
	for _, th := range []string{"rejected", "accepted", "wrong-epoch", "pending", "continues", "lost", "turn-done", "turn-cut", "tracked-done"} {
		j, _ := enginetest.Answer[string](t, e, engine.Meta{Actor: events.ActorCLI}, command.SubmitJob{Target: "cli", ThreadID: th, TaskKind: "k", Summary: "s", Policy: events.FailClosedPolicy})
		exec(command.CompleteJob{Config: cfg, JobID: j, Summary: "ok"})
		d, _ := enginetest.Answer[command.Delivery](t, e, engine.Meta{Actor: events.ActorCLI}, command.StartDelivery{Config: cfg, ThreadID: th, Route: command.Route{RPCKind: command.RPCTurnStart,
			DeliveryMode: command.ModeCLIStart, ManagedSessionID: "s-" + th, SessionEpoch: 1}})
		inFlight[th] = d
		if th == "continues" || th == "lost" || th == "tracked-done" {
			exec(command.RecordOutcome{Config: cfg, AttemptID: d.AttemptID, RPCRequestID: d.RPCRequestID, ManagedSessionID: d.ManagedSessionID,
				SessionEpoch: 1, Outcome: command.Accepted, TurnID: "turn-" + th, Tracks: true})
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	proof := func(th string, outcome engine.Outcome) target.Proof {
		d := inFlight[th]
		return target.Proof{AttemptID: d.AttemptID, RPCRequestID: d.RPCRequestID, ManagedSessionID: d.ManagedSessionID, SessionEpoch: 1, Outcome: outcome, TurnID: "turn-" + th}
	}
	push := &fakePush{proofs: []target.Proof{
		proof("rejected", command.RejectedBefore),
		proof("accepted", command.Accepted), // a wake-up, no turn to track
		{AttemptID: inFlight["wrong-epoch"].AttemptID, RPCRequestID: inFlight["wrong-epoch"].RPCRequestID, ManagedSessionID: "s-wrong-epoch", SessionEpoch: 2, Outcome: command.Accepted},
		{AttemptID: inFlight["continues"].AttemptID, ManagedSessionID: "s-continues", SessionEpoch: 1, Continues: true},
	}}
	// Turn events a target found already happened: recorded after the
	// outcome, so a turn that ended while no daemon watched is closed or
	// parked by its real end.
	done := proof("turn-done", command.Accepted)
	done.Tracks, done.Turn = true, []string{"turn_started", "turn_completed"}
	cut := proof("turn-cut", command.Accepted)
	cut.Tracks, cut.Turn = true, []string{"turn_started", "turn_interrupted"}
	tracked := proof("tracked-done", "")
	tracked.Turn = []string{"turn_completed"}
	push.proofs = append(push.proofs, done, cut, tracked)
	r := start(t, root, push)
	if len(push.open) != 9 {
		t.Fatalf("the target was shown %d attempts in flight, want 9", len(push.open))
	}
	for _, th := range []string{"turn-done", "tracked-done"} {
		in := call(r, api.BatchInspect, api.BatchArgs{BatchID: inFlight[th].BatchID})
		if in.Batch.State != fsm.BatchClosed || in.Batch.CloseReason != command.CloseDelivered {
			t.Errorf("%s: batch %+v, want closed delivered", th, in.Batch)
		}
	}
	want := map[string]struct{ attempt, replay string }{
		"rejected":    {"prepared", "automatic"}, // proven: retried after the back-off
		"accepted":    {"cooldown", "automatic"},
		"wrong-epoch": {"abandoned", "manual_resolution_only"},
		"pending":     {"abandoned", "manual_resolution_only"},
		"continues":   {"cooldown", "automatic"},
		"lost":        {"abandoned", "manual_resolution_only"},
		"turn-cut":    {"abandoned", "manual_resolution_only"},
	}
	for th, w := range want {
		in := r.head(th)
		if in.HeadAttempt == nil || string(in.HeadAttempt.State) != w.attempt || in.Batch.ReplayPolicy != w.replay {
			t.Errorf("%s: attempt %+v, batch replay %s; want %s, %s", th, in.HeadAttempt, in.Batch.ReplayPolicy, w.attempt, w.replay)
		}
	}
	if in := r.head("continues"); in.HeadAttempt.ObservationState != "tracking" {
		t.Errorf("the continuing turn is %q, want still tracking", in.HeadAttempt.ObservationState)
	}
	if in := r.head("lost"); in.HeadAttempt.ObservationState != "lost" {
		t.Errorf("the unproven turn is %q, want lost", in.HeadAttempt.ObservationState)
	}
}

func contains(list []string, part string) bool {
	for _, s := range list {
		if strings.Contains(s, part) {
			return true
		}
	}
	return false
}

// The Desktop deadline kinds (arm_pending, the two pause deadlines, the
// recovery envelope's retention): before they fall due they are work due
// within the idle timeout; the sweep acts on each (the arm_pending
// attempt abandoned, the binding past its pause deadline degraded, the
// envelope collected; the attempt's own pause deadline is the binding's
// business), and once swept past they keep nothing up.
func TestDesktopDeadlinesSwept(t *testing.T) {
	root := filepath.Join(t.TempDir(), "home")
	h := home.Home{Root: root}
	if err := h.Ensure(); err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(h.DB(), engine.Options{Projections: projections.Store{}, Clock: engine.NewManualClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	meta := engine.Meta{Actor: events.ActorBridge}
	at := t0.Add(time.Minute)
	appends := []struct {
		stream   events.StreamID
		payloads []events.Payload
	}{
		{events.StreamID{Kind: events.KindAttempt, ID: "arming"}, []events.Payload{
			&events.AttemptPrepared{SourceThreadID: "d1", BatchID: "b1", Generation: 1},
			&events.AttemptArmPendingNoted{BridgeRequestID: "r1", LeaseID: "l1", LeaseDeadline: at, ArmPendingDeadline: at}}},
		{events.StreamID{Kind: events.KindAttempt, ID: "armed"}, []events.Payload{
			&events.AttemptPrepared{SourceThreadID: "d2", BatchID: "b2", Generation: 1},
			&events.AttemptArmPendingNoted{BridgeRequestID: "r2", LeaseID: "l2", LeaseDeadline: at, ArmPendingDeadline: at},
			&events.AttemptArmed{CooldownUntil: at, PauseNotBefore: at, PauseDeadline: at}}},
		{events.StreamID{Kind: events.KindBinding, ID: "binding"}, []events.Payload{
			&events.BindingBound{SourceThreadID: "d3", CallerAutomationID: "auto"},
			&events.BindingArmed{Generation: 1, PauseNotBefore: at, PauseDeadline: at}}},
		{events.StreamID{Kind: events.KindBatch, ID: "handed-off"}, []events.Payload{
			&events.BatchOpened{SourceThreadID: "d4", TargetKind: "desktop", JobIDs: []string{"j"}, Summary: "s", FirstReadyAt: t0, LastReadyAt: t0,
				MaxDeliveryAttempts: 5, RedeliveryWindowEndsAt: t0.Add(24 * time.Hour)},
			&events.BatchMaterialized{AttemptID: "a4", Generation: 1, SnapshotRevision: 1},
			&events.BatchDeliveryAccepted{AttemptID: "a4", Generation: 1, CooldownUntil: t0},
			&events.BatchHandoffRecorded{AttemptID: "a4", Generation: 1, SnapshotRevision: 1, Envelope: events.RecoveryEnvelope{RetentionUntil: at}}}},
	}
	for _, a := range appends {
		if _, err := e.Append(ctx, meta, a.stream, 0, a.payloads...); err != nil {
			t.Fatalf("%s: %v", a.stream, err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	r := start(t, root)
	st := call(r, api.DaemonStatus, api.Empty{})
	if !contains(st.BusyReasons, "work due at "+at.Format(time.RFC3339)) {
		t.Fatalf("before they fall due: busy reasons %v", st.BusyReasons)
	}
	head := st.LogHeadSeq
	call(r, api.DebugClock, api.AdvanceArgs{By: "2m"})
	st = call(r, api.DaemonStatus, api.Empty{})
	if len(st.BusyReasons) != 0 || st.LogHeadSeq != head+3 || st.LastSweep.Due != 4 {
		t.Fatalf("after the sweep: busy %v, head %d (was %d), last sweep %+v", st.BusyReasons, st.LogHeadSeq, head, st.LastSweep)
	}
}
