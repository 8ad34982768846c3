package codex_test

import (
	"slices"
	"testing"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

func pluginTarget(thread, lease string) *events.DeliveryTarget {
	return &events.DeliveryTarget{Ownership: command.OwnershipDeliveryOwned, PluginID: "p", AppServerLeaseID: lease,
		ManagedSessionID: "dos-" + lease, BoundThreadID: thread, SessionEpoch: 1, CodexBinary: "/bin/codex"}
}

// pluginDeliver submits and completes a codex_app_server job and starts
// its delivery on its target's session: the attempt is accept_pending.
func (s *sessions) pluginDeliver(thread, lease string) command.Delivery {
	s.t.Helper()
	dt := pluginTarget(thread, lease)
	id, _ := sessAnswer[string](s, command.SubmitJob{Target: command.TargetCodexAppServer, ThreadID: thread, TaskKind: "k", Summary: "s",
		Policy: events.FailClosedPolicy, DeliveryTarget: dt})
	s.exec(command.CompleteJob{Config: immediate, JobID: id, Summary: "done"})
	del, res := sessAnswer[command.Delivery](s, command.StartDelivery{Config: immediate, ThreadID: thread, Route: command.Route{RPCKind: command.RPCTurnStart,
		DeliveryMode: command.ModePluginStart, ManagedSessionID: dt.ManagedSessionID, SessionEpoch: 1}})
	if res.Outcome != "started" {
		s.t.Fatalf("delivery: %s %s", res.Outcome, del.NotEligible)
	}
	return del
}

func (s *sessions) batch(id string) *aggregate.Batch {
	s.t.Helper()
	var out *aggregate.Batch
	_ = s.e.Read(func(r engine.Snapshot) error {
		st, err := r.State(events.KindBatch, id)
		if err != nil {
			s.t.Fatal(err)
		}
		out, _ = st.(*aggregate.Batch)
		return nil
	})
	return out
}

// A codex_app_server job needs a resolved target bound to its own thread;
// no other target takes one.
func TestPluginTarget_SubmitChecksTheTarget(t *testing.T) {
	for _, c := range []struct {
		name   string
		target command.Target
		dt     *events.DeliveryTarget
	}{
		{"no target", command.TargetCodexAppServer, nil},
		{"another thread", command.TargetCodexAppServer, pluginTarget("U", "l")},
		{"no epoch", command.TargetCodexAppServer, func() *events.DeliveryTarget { d := pluginTarget("T", "l"); d.SessionEpoch = 0; return d }()},
		{"unknown ownership", command.TargetCodexAppServer, func() *events.DeliveryTarget { d := pluginTarget("T", "l"); d.Ownership = "x"; return d }()},
		{"a target for the cli", command.TargetCodexCLI, pluginTarget("T", "l")},
	} {
		err := command.SubmitJob{Target: c.target, ThreadID: "T", TaskKind: "k", Summary: "s", DeliveryTarget: c.dt}.Validate()
		if errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("%s: %v, want EINVAL", c.name, err)
		}
	}
}

// A failure to acquire the target after the barrier rejects the attempt
// durably (the request is recorded rejected, nothing counts) and parks the
// batch in the same append; the resolved target is on the job's batch,
// and jobs of two targets never share a batch.
func TestPluginTarget_AcquisitionFailureRejectsAndParks(t *testing.T) {
	s := newSessions(t)
	del := s.pluginDeliver("T", "l1")
	res := s.exec(command.RecordOutcome{Config: immediate, AttemptID: del.AttemptID, RPCRequestID: del.RPCRequestID,
		ManagedSessionID: del.ManagedSessionID, SessionEpoch: 1, Outcome: command.AcquisitionFailed, Reason: "codex_binary not found"})
	if want := []string{"attempt.rejected_before_accept", "batch.replay_policy_changed"}; res.Outcome != command.AcquisitionFailed || !slices.Equal(types(res), want) {
		t.Fatalf("acquisition failure: %s %v, want %v", res.Outcome, types(res), want)
	}
	b := s.batch(del.BatchID)
	if b.ReplayPolicy != aggregate.ReplayManual || b.DeliveryAttemptCount != 0 || b.DeliveryTarget == nil || b.DeliveryTarget.AppServerLeaseID != "l1" {
		t.Fatalf("batch after the failure: %+v", b)
	}
	// Parked: nothing goes automatically any more.
	if again := s.exec(command.StartDelivery{Config: immediate, ThreadID: "T", Route: command.Route{RPCKind: command.RPCTurnStart,
		DeliveryMode: command.ModePluginStart, ManagedSessionID: del.ManagedSessionID, SessionEpoch: 1}}); again.Outcome != "not_eligible" {
		t.Fatalf("a parked batch was delivered again: %s", again.Outcome)
	}

	// Two jobs of one thread through two targets: two batches.
	slow := immediate
	slow.MaxWaitWindow = 1 << 40
	var batches []string
	for _, lease := range []string{"a", "b", "b"} {
		j, _ := sessAnswer[string](s, command.SubmitJob{Target: command.TargetCodexAppServer, ThreadID: "V", TaskKind: "k", Summary: "s",
			Policy: events.FailClosedPolicy, DeliveryTarget: pluginTarget("V", lease)})
		r := s.exec(command.CompleteJob{Config: slow, JobID: j, Summary: "done"})
		batches = append(batches, r.Events[len(r.Events)-1].Stream.ID)
	}
	if batches[0] == batches[1] || batches[1] != batches[2] {
		t.Fatalf("batches %v: want the two targets apart and the same target merged", batches)
	}
}

// The app-server instance that accepted a turn is gone: the tracked
// attempt of that session and epoch is abandoned and its batch parked;
// another session's is left alone.
func TestPluginTarget_LoseStreamParks(t *testing.T) {
	s := newSessions(t)
	lost := s.pluginDeliver("T", "l1")
	kept := s.pluginDeliver("U", "l2")
	for _, d := range []command.Delivery{lost, kept} {
		s.exec(command.RecordOutcome{Config: immediate, AttemptID: d.AttemptID, RPCRequestID: d.RPCRequestID,
			ManagedSessionID: d.ManagedSessionID, SessionEpoch: 1, Outcome: command.Accepted, TurnID: "turn-" + d.ThreadID, Tracks: true})
	}
	res := s.exec(command.LoseStream{ManagedSessionID: lost.ManagedSessionID, SessionEpoch: 1, Reason: "app-server exited"})
	if want := []string{"attempt.abandoned", "batch.replay_policy_changed"}; !slices.Equal(types(res), want) {
		t.Fatalf("lose stream: %v, want %v", types(res), want)
	}
	if s.batch(lost.BatchID).ReplayPolicy != aggregate.ReplayManual || s.batch(kept.BatchID).ReplayPolicy != aggregate.ReplayAutomatic {
		t.Fatal("the wrong batch was parked")
	}
	if again := s.exec(command.LoseStream{ManagedSessionID: lost.ManagedSessionID, SessionEpoch: 1}); len(again.Events) != 0 {
		t.Fatalf("a second loss appended %v", types(again))
	}
	late := s.exec(command.ObserveTurn{Config: immediate, AttemptID: lost.AttemptID, TurnID: "turn-T", Event: "turn_completed",
		ManagedSessionID: lost.ManagedSessionID, SessionEpoch: 1})
	if late.Outcome != command.LateIgnored {
		t.Fatalf("a completion after the loss: %s", late.Outcome)
	}
}
