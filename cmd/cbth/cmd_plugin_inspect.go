package main

import (
	"fmt"
	"io"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
)

// PluginInspectCmd is `cbth plugin inspect` (delivery.inspect).
type PluginInspectCmd struct {
	JobID   string `help:"The delivery's job." name:"job-id" xor:"which" required:""`
	BatchID string `help:"The delivery's batch." name:"batch-id" xor:"which" required:""`
	LeaseID string `help:"Explicit lease mode: the lease to reconcile the target with (delivery-owned targets need none)." name:"lease-id"`
}

// Run inspects the delivery.
func (c *PluginInspectCmd) Run(env *Env) error {
	res, err := call(env, api.DeliveryInspect, api.DeliveryInspectArgs{JobID: c.JobID, BatchID: c.BatchID, AppServerLeaseID: c.LeaseID})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		t := res.DeliveryTarget
		fmt.Fprintf(w, "job %s %s on thread %s\n", res.Job.JobID, res.Job.State, res.Job.SourceThreadID)
		fmt.Fprintf(w, "target: %s lease %s, managed session %s, epoch %d, codex %s\n", t.Ownership, t.AppServerLeaseID,
			t.ManagedSessionID, t.SessionEpoch, t.CodexBinary)
		if res.Lease != nil {
			fmt.Fprintf(w, "lease held: app-server %s, epoch %d\n", res.Lease.AppServerInstance, res.Lease.SessionEpoch)
		} else {
			fmt.Fprintln(w, "lease not held")
		}
		if b := res.Batch; b != nil {
			fmt.Fprintf(w, "batch %s %s (%s)", b.Batch.BatchID, b.Batch.State, b.Batch.ReplayPolicy)
			if b.Batch.CloseReason != "" {
				fmt.Fprintf(w, ", closed %s", b.Batch.CloseReason)
			}
			fmt.Fprintln(w)
		}
		r := res.Reconcile
		fmt.Fprintf(w, "reconcile: %s", r.Outcome)
		if r.TurnStatus != "" {
			fmt.Fprintf(w, " (turn %s %s)", r.TurnID, r.TurnStatus)
		}
		if r.Detail != "" {
			fmt.Fprintf(w, ": %s", r.Detail)
		}
		fmt.Fprintln(w)
	})
}
