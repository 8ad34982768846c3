package target_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// sink records the turn events a target reports.
type sink struct {
	mu  sync.Mutex
	got []target.TurnEvent
}

func (s *sink) Observe(_ context.Context, ev target.TurnEvent) (engine.Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, ev)
	return command.OutcomeObserved, nil
}

func debugTarget(t *testing.T) (*target.DebugTarget, *sink) {
	t.Helper()
	d := &target.DebugTarget{Dir: t.TempDir(), Now: func() time.Time { return time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC) }}
	s := &sink{}
	if err := d.Start(context.Background(), target.Host{Sink: s}); err != nil {
		t.Fatal(err)
	}
	return d, s
}

// records are the deliveries written to a thread's file.
func records(t *testing.T, d *target.DebugTarget, thread string) []target.Record {
	t.Helper()
	f, err := os.Open(d.ThreadFile(thread))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []target.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r target.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// Each behaviour of the debug target answers as its name says, and every
// delivery that may have reached the thread is written down before the
// answer; only a proven refusal is not. A busy thread's gate holds it
// back; every other gate routes it on its session and the epoch.
func TestDebugBehaviours(t *testing.T) {
	for _, c := range []struct {
		behaviour string
		outcome   string
		turn      string // the turn id's prefix; "" none
		tracks    bool
		written   bool
		gateOK    bool
	}{
		{target.Deliver, string(command.Accepted), "turn-", true, true, true},
		{target.Accept, string(command.Accepted), "wake-", false, true, true},
		{target.Async, string(command.Accepted), "turn-", true, true, true},
		{target.Reject, string(command.RejectedBefore), "", false, false, true},
		{target.Unknown, string(command.AcceptanceUnknown), "", false, true, true},
		{target.TurnFailed, string(command.Accepted), "turn-", true, true, true},
		{target.Hang, string(command.AcceptanceUnknown), "", false, true, true},
		{target.Busy, string(command.RejectedBefore), "", false, false, false},
	} {
		t.Run(c.behaviour, func(t *testing.T) {
			d, _ := debugTarget(t)
			if err := d.SetBehaviour("T", c.behaviour); err != nil {
				t.Fatal(err)
			}
			g := d.Gate(context.Background(), target.Head{ThreadID: "T"})
			if g.OK != c.gateOK || (g.OK && (g.Route.ManagedSessionID != target.Session("T") || g.Route.SessionEpoch != 1)) {
				t.Fatalf("gate %+v", g)
			}
			ctx, cancel := context.WithCancel(context.Background())
			if c.behaviour == target.Hang {
				cancel() // a hang holds until the delivery is given up
			}
			r := d.Deliver(ctx, command.Delivery{ThreadID: "T", AttemptID: "a1"})
			cancel()
			if string(r.Outcome) != c.outcome || r.Tracks != c.tracks || !strings.HasPrefix(r.TurnID, c.turn) || (c.turn == "") != (r.TurnID == "") {
				t.Fatalf("deliver: %+v", r)
			}
			recs := records(t, d, "T")
			if (len(recs) == 1) != c.written || (c.written && (recs[0].Behaviour != c.behaviour || recs[0].AttemptID != "a1")) {
				t.Fatalf("written %+v, want written %v", recs, c.written)
			}
		})
	}
}

// Behaviours: one per thread, "*" for the rest, deliver by default; an
// unknown one is refused and changes nothing.
func TestDebugBehaviourSettings(t *testing.T) {
	d, _ := debugTarget(t)
	if err := d.SetBehaviour("T", "explode"); errs.CodeOf(err) != errs.EINVAL {
		t.Fatalf("an unknown behaviour: %v", err)
	}
	if r := d.Deliver(context.Background(), command.Delivery{ThreadID: "T", AttemptID: "a1"}); r.TurnID != "turn-a1" {
		t.Fatalf("the default: %+v", r)
	}
	d.SetBehaviour("*", target.Reject)
	d.SetBehaviour("U", target.Accept)
	if r := d.Deliver(context.Background(), command.Delivery{ThreadID: "T", AttemptID: "a2"}); string(r.Outcome) != string(command.RejectedBefore) {
		t.Fatalf("the default set to reject: %+v", r)
	}
	if r := d.Deliver(context.Background(), command.Delivery{ThreadID: "U", AttemptID: "a3"}); r.TurnID != "wake-a3" {
		t.Fatalf("a thread's own: %+v", r)
	}
	m, err := d.Behaviours()
	if err != nil || m["*"] != target.Reject || m["U"] != target.Accept || len(m) != 2 {
		t.Fatalf("behaviours %v, %v", m, err)
	}
}

// Each start is a new event stream: the epoch advances, kept across
// targets on the same directory.
func TestDebugEpochAdvancesPerStart(t *testing.T) {
	d, _ := debugTarget(t)
	again := &target.DebugTarget{Dir: d.Dir, Now: d.Now}
	if err := again.Start(context.Background(), target.Host{Sink: &sink{}}); err != nil {
		t.Fatal(err)
	}
	if g := again.Gate(context.Background(), target.Head{ThreadID: "T"}); g.Route.SessionEpoch != 2 {
		t.Fatalf("the second start's epoch %d", g.Route.SessionEpoch)
	}
}

// An async turn's events are reported to the sink with the attempt, the
// turn and the session it was accepted on (or another epoch when given);
// a terminal one closes the turn, and a thread with none open is ENOENT.
func TestDebugAsyncTurns(t *testing.T) {
	d, s := debugTarget(t)
	d.SetBehaviour("T", target.Async)
	d.Deliver(context.Background(), command.Delivery{ThreadID: "T", AttemptID: "a1", ManagedSessionID: target.Session("T"), SessionEpoch: 1})
	if _, err := d.Turn(context.Background(), "T", "turn_started", 0); err != nil {
		t.Fatal(err)
	}
	rep, err := d.Turn(context.Background(), "T", "turn_completed", 7)
	if err != nil || rep.Outcome != command.OutcomeObserved {
		t.Fatalf("the completion: %+v, %v", rep, err)
	}
	if len(s.got) != 2 || s.got[0].AttemptID != "a1" || s.got[0].TurnID != "turn-a1" || s.got[0].SessionEpoch != 1 || s.got[1].SessionEpoch != 7 {
		t.Fatalf("reported %+v", s.got)
	}
	if _, err := d.Turn(context.Background(), "T", "turn_completed", 0); errs.CodeOf(err) != errs.ENOENT {
		t.Fatalf("after the terminal event: %v", err)
	}
}

// agents is a fake agent server for the ctx target's gate.
type agents struct {
	acting  []string
	trusted bool
	busy    bool
}

func (a agents) Trust() ([]string, bool) { return a.acting, a.trusted }
func (a agents) Busy(string) bool        { return a.busy }
func (a agents) Deliver(context.Context, string, string, string) (string, <-chan struct{}, func() string, bool, error) {
	return "", nil, nil, false, errs.New(errs.EINTERNAL, "not in this test")
}

// The ctx target's gate: a thread that is no agent session, or a batch
// that needs its artifact read, is parked; an agent that can act takes
// only safe results unless trusted; a busy session waits; otherwise the
// route is the session's, epoch 1.
func TestCtxGate(t *testing.T) {
	safe := events.DeliveryPolicy{ReadOnly: true}
	risky := events.DeliveryPolicy{RequiresNetwork: true}
	for _, c := range []struct {
		name   string
		head   target.Head
		agent  agents
		ok     bool
		park   bool
		reason string
	}{
		{"a safe result", target.Head{ThreadID: "agent/coder/alpha", Policy: safe}, agents{acting: []string{"shell.exec"}}, true, false, ""},
		{"a risky result for a reader", target.Head{ThreadID: "agent/coder/alpha", Policy: risky}, agents{}, true, false, ""},
		{"a risky result for an actor", target.Head{ThreadID: "agent/coder/alpha", Policy: risky}, agents{acting: []string{"fs.write"}}, false, true, "--trusted-all"},
		{"a risky result, trusted", target.Head{ThreadID: "agent/coder/alpha", Policy: risky}, agents{acting: []string{"fs.write"}, trusted: true}, true, false, ""},
		{"a busy session", target.Head{ThreadID: "agent/coder/alpha", Policy: safe}, agents{busy: true}, false, false, "running a turn"},
		{"not an agent session", target.Head{ThreadID: "T"}, agents{}, false, true, "not agent/<name>/<session>"},
		{"a bad name", target.Head{ThreadID: "agent/../x"}, agents{}, false, true, "ctx thread"},
		{"an artifact to read", target.Head{ThreadID: "agent/coder/alpha", RequiresArtifactRead: true}, agents{}, false, true, "artifact read"},
	} {
		ct := &target.CtxTarget{Agents: func(string) (target.AgentSessions, error) { return c.agent, nil }}
		g := ct.Gate(context.Background(), c.head)
		if g.OK != c.ok || g.Park != c.park || !strings.Contains(g.Reason, c.reason) {
			t.Errorf("%s: %+v", c.name, g)
		}
		if g.OK && (g.Route.ManagedSessionID != "ctx:"+c.head.ThreadID || g.Route.SessionEpoch != target.CtxSessionEpoch) {
			t.Errorf("%s: route %+v", c.name, g.Route)
		}
	}
	missing := &target.CtxTarget{Agents: func(string) (target.AgentSessions, error) { return nil, errs.New(errs.ENOENT, "no agent") }}
	if g := missing.Gate(context.Background(), target.Head{ThreadID: "agent/gone/alpha"}); g.OK || g.Park {
		t.Errorf("an agent not served: %+v, want a wait", g)
	}
}
