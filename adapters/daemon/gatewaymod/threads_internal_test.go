package gatewaymod

import (
	"context"
	"testing"

	"github.com/cbth-dev/cbth/adapters/gateway"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/internal/testkit/daemontest"
)

// The job a routed message becomes is keyed by its stream and seq: the
// same message routed again (a re-route after a crash, before the
// gateway recorded it) finds the job it made, complete, and makes no
// second; another seq is another job.
func TestARerouteFindsTheSameJob(t *testing.T) {
	m := New()
	d := daemontest.Start(t, nil, m)
	ctx := context.Background()
	msg := gateway.Delivery{ThreadID: "T", TargetKind: "debug", StreamID: "st", Seq: 7, CorrelationID: "c", Text: "hi"}
	first, err := gatewayThreads{m}.Deliver(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	head := daemontest.Call(d, api.DaemonStatus, api.Empty{}).LogHeadSeq
	again, err := gatewayThreads{m}.Deliver(ctx, msg)
	if err != nil || again != first {
		t.Fatalf("the re-route: job %s, %v; want %s", again, err, first)
	}
	if now := daemontest.Call(d, api.DaemonStatus, api.Empty{}).LogHeadSeq; now != head {
		t.Fatalf("the re-route appended: head %d -> %d", head, now)
	}
	msg.Seq = 8
	if other, err := (gatewayThreads{m}).Deliver(ctx, msg); err != nil || other == first {
		t.Fatalf("the next seq: job %s, %v; want a job of its own", other, err)
	}
}
