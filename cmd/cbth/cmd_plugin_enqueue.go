package main

import (
	"fmt"
	"io"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
)

// PluginEnqueueCmd is `cbth plugin enqueue` (delivery.enqueue).
type PluginEnqueueCmd struct {
	PluginID         string `help:"The plugin's stable identity." required:"" name:"plugin-id"`
	PluginInstanceID string `help:"The running plugin instance, checked against its handshake when given." name:"plugin-instance-id"`
	ThreadID         string `help:"The Codex thread the result goes back to." required:"" name:"thread-id"`
	IdempotencyKey   string `help:"Enqueueing the same key again returns the original job; required in delivery-owned mode, where it derives the target." name:"idempotency-key"`
	TaskKind         string `help:"What kind of task this is (free-form)." required:"" name:"task-kind"`
	Summary          string `help:"One line that says what the job is." required:""`
	CodexBinary      string `help:"Delivery-owned mode (the default): the codex executable the daemon's app-server runs." name:"codex-binary"`
	LeaseID          string `help:"Explicit lease mode: the lease plugin ensure returned." name:"lease-id"`
	ManagedSessionID string `help:"Assert the target's managed session (checked, never used to find it)." name:"managed-session-id"`
	SessionEpoch     uint64 `help:"Assert the target's session epoch (checked, never used to find it)." name:"session-epoch"`
	policyFlags
}

// Run enqueues the delivery.
func (c *PluginEnqueueCmd) Run(env *Env) error {
	bin, err := absCodex(c.CodexBinary)
	if err != nil {
		return err
	}
	a := api.EnqueueArgs{PluginID: c.PluginID, PluginInstanceID: c.PluginInstanceID, SourceThreadID: c.ThreadID, IdempotencyKey: c.IdempotencyKey, TaskKind: c.TaskKind,
		TaskSummary: c.Summary, Target: api.EnqueueTarget{AppServerLeaseID: c.LeaseID, CodexBinary: bin,
			ManagedSessionID: c.ManagedSessionID, SessionEpoch: c.SessionEpoch}}
	if a.Policy, a.Metadata, err = c.policyFlags.read(); err != nil {
		return err
	}
	res, err := call(env, api.DeliveryEnqueue, a)
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		note := ""
		if res.Deduplicated {
			note = " (already enqueued)"
		}
		t := res.DeliveryTarget
		fmt.Fprintf(w, "job %s %s%s\ntarget: %s lease %s, managed session %s, epoch %d, codex %s\n", res.JobID, res.State, note,
			t.Ownership, t.AppServerLeaseID, t.ManagedSessionID, t.SessionEpoch, t.CodexBinary)
	})
}
