package pluginmod_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/daemon/pluginmod"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/daemontest"
)

// The host-plugin target's operations on a daemon of its own (the host
// and this module). Nothing here starts a Codex: the refusals come
// first, and a delivery-owned enqueue starts nothing until its batch is
// delivered (cmd/cbth's plugin tests run the real Codex).

func head(d *daemontest.Daemon) uint64 {
	d.T.Helper()
	return daemontest.Call(d, api.DaemonStatus, api.Empty{}).LogHeadSeq
}

// A handshake names the plugin and, for an instance, a process of the
// client's own; it answers what the daemon offers.
func TestHandshake(t *testing.T) {
	d := daemontest.Start(t, nil, pluginmod.New())
	rep := daemontest.Call(d, api.PluginHandshake, api.HandshakeArgs{PluginID: "plug", PluginInstanceID: "i1", PluginPID: os.Getpid()})
	if rep.PluginID != "plug" || len(rep.ServiceCapabilities) == 0 || rep.Version != "test" || rep.PID != os.Getpid() {
		t.Fatalf("handshake: %+v", rep)
	}
	for _, c := range []struct {
		name string
		args api.HandshakeArgs
		code errs.Code
	}{
		{"no plugin", api.HandshakeArgs{}, errs.EINVAL},
		{"a control character", api.HandshakeArgs{PluginID: "pl\nug"}, errs.EINVAL},
		{"a plugin id over 256 bytes", api.HandshakeArgs{PluginID: strings.Repeat("p", 257)}, errs.EINVAL},
		{"a negative pid", api.HandshakeArgs{PluginID: "plug", PluginPID: -1}, errs.EINVAL},
		{"an instance of init", api.HandshakeArgs{PluginID: "plug", PluginInstanceID: "i2", PluginPID: 1}, errs.EINVAL},
		{"the instance as another plugin", api.HandshakeArgs{PluginID: "other", PluginInstanceID: "i1", PluginPID: os.Getpid()}, errs.EACCES},
	} {
		if _, err := api.PluginHandshake.Call(d.Client, c.args); errs.CodeOf(err) != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
}

// delivery.enqueue refuses what it cannot resolve, appending nothing;
// a delivery-owned enqueue submits a codex_app_server job with its
// target derived from the plugin, the thread and the key, and the same
// key again returns the same job.
func TestEnqueue(t *testing.T) {
	d := daemontest.Start(t, nil, pluginmod.New())
	ok := api.EnqueueArgs{PluginID: "plug", SourceThreadID: "T", IdempotencyKey: "k1", TaskKind: "ci", TaskSummary: "work",
		Target: api.EnqueueTarget{CodexBinary: "codex"}}
	for _, c := range []struct {
		name   string
		change func(*api.EnqueueArgs)
		code   errs.Code
	}{
		{"no plugin", func(a *api.EnqueueArgs) { a.PluginID = "" }, errs.EINVAL},
		{"no thread", func(a *api.EnqueueArgs) { a.SourceThreadID = "" }, errs.EINVAL},
		{"an instance with no handshake", func(a *api.EnqueueArgs) { a.PluginInstanceID = "never" }, errs.ESTATE},
		{"a lease not held", func(a *api.EnqueueArgs) { a.Target.AppServerLeaseID = "asl-nope" }, errs.ENOENT},
		{"a relative codex", func(a *api.EnqueueArgs) { a.Target.CodexBinary = "bin/codex" }, errs.EINVAL},
		{"delivery-owned without a key", func(a *api.EnqueueArgs) { a.IdempotencyKey = "" }, errs.EINVAL},
		{"another session asserted", func(a *api.EnqueueArgs) { a.Target.ManagedSessionID = "ams-other" }, errs.ESTALE},
		{"another epoch asserted", func(a *api.EnqueueArgs) { a.Target.SessionEpoch = 99 }, errs.ESTALE},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := ok
			c.change(&a)
			before := head(d)
			if _, err := api.DeliveryEnqueue.Call(d.Client, a); errs.CodeOf(err) != c.code {
				t.Fatalf("%v, want %s", err, c.code)
			}
			if after := head(d); after != before {
				t.Fatalf("a refusal appended: head %d -> %d", before, after)
			}
		})
	}
	first := daemontest.Call(d, api.DeliveryEnqueue, ok)
	dt := first.DeliveryTarget
	if first.JobID == "" || first.State != fsm.JobRunning || first.Deduplicated || dt == nil ||
		dt.Ownership != command.OwnershipDeliveryOwned || dt.CodexBinary != "codex" || dt.ManagedSessionID == "" {
		t.Fatalf("enqueue: %+v target %+v", first, dt)
	}
	again := daemontest.Call(d, api.DeliveryEnqueue, ok)
	if again.JobID != first.JobID || !again.Deduplicated || *again.DeliveryTarget != *dt {
		t.Fatalf("the same key again: %+v, want job %s deduplicated", again, first.JobID)
	}
	// The caller may assert the derived target: it matches.
	asserted := ok
	asserted.Target.ManagedSessionID, asserted.Target.SessionEpoch = dt.ManagedSessionID, dt.SessionEpoch
	if r := daemontest.Call(d, api.DeliveryEnqueue, asserted); r.JobID != first.JobID {
		t.Fatalf("an enqueue asserting the derived target: %+v", r)
	}
	// Another thread or key is another target, another job.
	other := ok
	other.IdempotencyKey = "k2"
	if r := daemontest.Call(d, api.DeliveryEnqueue, other); r.JobID == first.JobID || r.DeliveryTarget.ManagedSessionID == dt.ManagedSessionID {
		t.Fatalf("another key: %+v", r)
	}
	if _, err := os.Stat(d.Home.RunDir() + "/plugin"); err == nil {
		if ents, _ := os.ReadDir(d.Home.RunDir() + "/plugin"); len(ents) != 0 {
			t.Fatalf("an enqueue started something: %v", ents)
		}
	}

	// delivery.inspect of the job: not ready, nothing to reconcile.
	in := daemontest.Call(d, api.DeliveryInspect, api.DeliveryInspectArgs{JobID: first.JobID})
	if in.Job.JobID != first.JobID || in.Batch != nil || in.Reconcile.Outcome != "not_needed" || (in.Job.Metadata != nil && string(in.Job.Metadata) != "null") {
		t.Fatalf("inspect: %+v", in)
	}
	for _, c := range []struct {
		name string
		args api.DeliveryInspectArgs
		code errs.Code
	}{
		{"nothing named", api.DeliveryInspectArgs{}, errs.EINVAL},
		{"no such job", api.DeliveryInspectArgs{JobID: "01a00000-0000-7000-8000-000000000000"}, errs.ENOENT},
	} {
		if _, err := api.DeliveryInspect.Call(d.Client, c.args); errs.CodeOf(err) != c.code {
			t.Errorf("inspect, %s: %v, want %s", c.name, err, c.code)
		}
	}
	debugJob := daemontest.Call(d, api.JobSubmit, api.SubmitArgs{TargetKind: command.TargetDebug, SourceThreadID: "T", TaskKind: "ci", TaskSummary: "x"})
	if _, err := api.DeliveryInspect.Call(d.Client, api.DeliveryInspectArgs{JobID: debugJob.JobID}); errs.CodeOf(err) != errs.EINVAL ||
		!strings.Contains(err.Error(), "not a codex_app_server delivery") {
		t.Errorf("inspect of a debug job: %v", err)
	}
}

// app_server.ensure refuses before it starts anything: an instance with
// no handshake, a relative codex.
func TestEnsureRefusals(t *testing.T) {
	d := daemontest.Start(t, nil, pluginmod.New())
	daemontest.Call(d, api.PluginHandshake, api.HandshakeArgs{PluginID: "plug", PluginInstanceID: "i1", PluginPID: os.Getpid()})
	for _, c := range []struct {
		name string
		args api.EnsureArgs
		code errs.Code
	}{
		{"no thread", api.EnsureArgs{PluginID: "plug", PluginInstanceID: "i1", CodexBinary: "codex"}, errs.EINVAL},
		{"no instance", api.EnsureArgs{PluginID: "plug", SourceThreadID: "T", CodexBinary: "codex"}, errs.EINVAL},
		{"a relative codex", api.EnsureArgs{PluginID: "plug", PluginInstanceID: "i1", SourceThreadID: "T", CodexBinary: "./codex"}, errs.EINVAL},
		{"no handshake", api.EnsureArgs{PluginID: "plug", PluginInstanceID: "i9", SourceThreadID: "T", CodexBinary: "codex"}, errs.ESTATE},
		{"another plugin's instance", api.EnsureArgs{PluginID: "other", PluginInstanceID: "i1", SourceThreadID: "T", CodexBinary: "codex"}, errs.EACCES},
	} {
		if _, err := api.AppServerEnsure.Call(d.Client, c.args); errs.CodeOf(err) != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
}

// codexTarget stands in for another codex_app_server target.
type codexTarget struct{}

func (codexTarget) Spec() target.Spec {
	return target.Spec{Name: string(command.TargetCodexAppServer), Kind: target.Pull, DeliveryMode: command.ModeDesktop}
}
func (codexTarget) Gate(context.Context, target.Head) target.Gate { return target.Gate{} }

// When the daemon runs another codex_app_server target, the host-plugin
// operations say so (ENOTSUP) instead of acting.
func TestReplacedTargetIsNotServed(t *testing.T) {
	d := daemontest.Start(t, func(o *daemon.Options) { o.Targets = []target.Target{codexTarget{}} }, pluginmod.New())
	if _, err := api.DeliveryEnqueue.Call(d.Client, api.EnqueueArgs{PluginID: "p", SourceThreadID: "T", IdempotencyKey: "k",
		Target: api.EnqueueTarget{CodexBinary: "codex"}}); errs.CodeOf(err) != errs.ENOTSUP {
		t.Errorf("enqueue: %v, want ENOTSUP", err)
	}
	if _, err := api.DeliveryInspect.Call(d.Client, api.DeliveryInspectArgs{JobID: "j"}); errs.CodeOf(err) != errs.ENOTSUP {
		t.Errorf("inspect: %v, want ENOTSUP", err)
	}
	if _, err := api.AppServerEnsure.Call(d.Client, api.EnsureArgs{PluginID: "p"}); errs.CodeOf(err) != errs.ENOTSUP {
		t.Errorf("ensure: %v, want ENOTSUP", err)
	}
}
