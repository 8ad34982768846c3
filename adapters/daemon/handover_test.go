package daemon_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/internal/errs"
)

// slowPush is a cli push target whose delivery answers only when the test
// releases it; cancelled before that, it cannot know what happened.
type slowPush struct {
	started, release chan struct{}
}

func (s *slowPush) Spec() target.Spec {
	return target.Spec{Name: "cli", Kind: target.Push, RPCKind: command.RPCTurnStart, DeliveryMode: command.ModeCLIStart}
}
func (s *slowPush) Gate(context.Context, target.Head) target.Gate { return target.Gate{OK: true} }
func (s *slowPush) Deliver(ctx context.Context, d command.Delivery) target.Result {
	close(s.started)
	select {
	case <-s.release:
		return target.Result{Outcome: command.Accepted, TurnID: "turn-" + d.AttemptID}
	case <-ctx.Done():
		return target.Result{Outcome: command.AcceptanceUnknown, Reason: "cancelled mid-call"}
	}
}

// A handover lets a delivery in flight finish and record its answer
// before the daemon stops: the upgrade leaves it accepted, not parked as
// unproven.
func TestHandoverLetsADeliveryInFlightFinish(t *testing.T) {
	root := filepath.Join(t.TempDir(), "home")
	h := home.Home{Root: root}
	slow := &slowPush{started: make(chan struct{}), release: make(chan struct{})}
	r := start(t, root, slow)
	j := call(r, api.JobSubmit, api.SubmitArgs{TargetKind: "cli", SourceThreadID: "P", TaskKind: "ci", TaskSummary: "work"})
	dial := func() *ipc.Client {
		c, err := ipc.Dial(h.Socket(), "test")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	completing := make(chan error, 1)
	go func() { // on a manual clock the delivery runs inside this request
		_, err := api.JobComplete.Call(dial(), api.CompleteArgs{JobID: j.JobID, ResultSummary: "done"})
		completing <- err
	}()
	<-slow.started
	handed := make(chan error, 1)
	go func() {
		_, err := api.DaemonHandover.Call(dial(), api.HandoverArgs{WaitMS: 1000})
		handed <- err
	}()
	for st := call(r, api.DaemonStatus, api.Empty{}); !st.HandingOver; st = call(r, api.DaemonStatus, api.Empty{}) {
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-handed:
		t.Fatalf("the handover ended while a delivery was in flight: %v", err)
	default:
	}
	close(slow.release)
	if err := <-handed; err != nil {
		t.Fatal(err)
	}
	if err := <-completing; err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); h.DaemonRunning(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not exit after the handover")
		}
	}
	next := start(t, root, &fakePush{})
	in := next.head("P")
	if a := in.HeadAttempt; a == nil || a.RPCState != "accepted" || in.Batch.ReplayPolicy != "automatic" {
		t.Fatalf("after the handover: batch %+v, attempt %+v", in.Batch, in.HeadAttempt)
	}
}

// A handover waits for attached clients (a cbth cli run foreground) to
// leave: the daemon stops the shared app-server when it exits. A wait
// that runs out changes nothing.
func TestHandoverWaitsForAttachedClients(t *testing.T) {
	root := filepath.Join(t.TempDir(), "home")
	h := home.Home{Root: root}
	r := start(t, root)
	fg, err := ipc.Dial(h.Socket(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := fg.CallAttached(api.Ping.Name, api.Empty{}, nil); err != nil {
		t.Fatal(err)
	}
	_, err = api.DaemonHandover.Call(r.c, api.HandoverArgs{WaitMS: 50})
	if code := errs.CodeOf(err); code != errs.ETIMEDOUT || !strings.Contains(err.Error(), "1 client attached") {
		t.Fatalf("handover with a foreground attached: %v", err)
	}
	if st := call(r, api.DaemonStatus, api.Empty{}); st.HandingOver || st.AttachedClients != 1 {
		t.Fatalf("after a handover that gave up: %+v", st)
	}
	fg.Close()
	if _, err := api.DaemonHandover.Call(r.c, api.HandoverArgs{WaitMS: 10_000}); err != nil {
		t.Fatalf("handover once the foreground left: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); h.DaemonRunning(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not exit after the handover")
		}
	}
}
