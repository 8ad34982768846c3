package target

import (
	"context"
	"reflect"
	"testing"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The ctx target's reconcile hook reads the session's log: a message
// never recorded is a proven reject, a recorded one is accepted with its
// run as the turn and the run's end (none, or interrupted: cut off with
// the daemon) as turn events; a thread the log cannot answer for is left
// unproven.
func TestCtxReconcile(t *testing.T) {
	log := map[string]CtxTurn{
		"agent/a/s|m-absent":   {},
		"agent/a/s|m-ok":       {Found: true, RunID: "run-1", Status: "ok"},
		"agent/a/s|m-cut":      {Found: true, RunID: "run-2"},
		"agent/a/s|m-failed":   {Found: true, RunID: "run-3", Status: "error"},
		"agent/a/s|m-tracked":  {Found: true, RunID: "run-4", Status: "cancelled"},
		"agent/a/s|m-othertrn": {Found: true, RunID: "run-5", Status: "ok"},
		"agent/a/s|m-ended":    {Found: true, RunID: "run-6", Status: "interrupted"},
	}
	tg := &CtxTarget{Turns: func(_ context.Context, thread, msgID string) (CtxTurn, error) {
		if thread == "agent/a/two-trees" {
			return CtxTurn{}, errs.New(errs.EINVAL, "two trees")
		}
		return log[thread+"|"+msgID], nil
	}}
	in := func(id, thread, state, msg, turn string) InFlight {
		return InFlight{AttemptID: id, ThreadID: thread, State: fsm.AttemptState(state), RPCRequestID: msg, TurnID: turn, ManagedSessionID: "ctx:" + thread, SessionEpoch: 1}
	}
	got := tg.Reconcile(context.Background(), []InFlight{
		in("1", "agent/a/s", "accept_pending", "m-absent", ""),
		in("2", "agent/a/s", "accept_pending", "m-ok", ""),
		in("3", "agent/a/s", "accept_pending", "m-cut", ""),
		in("4", "agent/a/s", "accept_pending", "m-failed", ""),
		in("5", "agent/a/s", "cooldown", "m-tracked", "run-4"),
		in("6", "agent/a/s", "cooldown", "m-othertrn", "run-x"),
		in("7", "agent/a/two-trees", "accept_pending", "m", ""),
		in("8", "not-a-ctx-thread", "accept_pending", "m", ""),
		in("9", "agent/a/s", "accept_pending", "m-ended", ""),
	})
	p := func(id, msg string, outcome engine.Outcome, turn string, tracks bool, events ...string) Proof {
		return Proof{AttemptID: id, RPCRequestID: msg, ManagedSessionID: "ctx:agent/a/s", SessionEpoch: 1, Outcome: outcome, TurnID: turn, Tracks: tracks, Turn: events}
	}
	rejected := p("1", "m-absent", command.RejectedBefore, "", false)
	rejected.Reason = "the daemon stopped before the turn's message was recorded in the session"
	want := []Proof{
		rejected,
		p("2", "m-ok", command.Accepted, "run-1", true, "turn_started", "turn_completed"),
		p("3", "m-cut", command.Accepted, "run-2", true, "turn_started", "turn_interrupted"),
		p("4", "m-failed", command.Accepted, "run-3", true, "turn_started", "turn_failed"),
		p("5", "m-tracked", "", "run-4", false, "turn_interrupted"),
		// A cut run a start already ended reads as cut, not failed.
		p("9", "m-ended", command.Accepted, "run-6", true, "turn_started", "turn_interrupted"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("proofs:\n got %+v\nwant %+v", got, want)
	}
	if (&CtxTarget{}).Reconcile(context.Background(), []InFlight{in("1", "agent/a/s", "accept_pending", "m", "")}) != nil {
		t.Fatal("a ctx target without a log proved something")
	}
}
