package desktopmod_test

import (
	"os"
	"testing"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/daemontest"
	"github.com/cbth-dev/cbth/projections/inbox"
)

// The operator's Desktop operations: the installation state repaired
// (once; the same repair again changes nothing; a capability dropped
// degrades the bound threads), bindings repaired, listed and unbound,
// each answering its outcome and the view after it.
func TestInstallationAndBindings(t *testing.T) {
	r := start(t)
	before := daemontest.Call(r.Daemon, api.DesktopInstallation, api.InstallationArgs{})
	if before.Configured || before.AutomaticContinuation {
		t.Fatalf("before any repair: %+v", before)
	}
	first := r.validate()
	if first.Outcome != "repaired" || !first.Configured || !first.FingerprintMatch || !first.AutomaticContinuation || first.ValidatedAt == nil {
		t.Fatalf("the first repair: %+v", first)
	}
	head := r.head()
	if again := r.validate(); again.Outcome != "unchanged" || r.head() != head {
		t.Fatalf("the same repair again: %+v (head %d -> %d)", again.Outcome, head, r.head())
	}
	b := r.bind("S")
	if b.Outcome != "bound" || b.BindingState != fsm.BindingBound || b.CallerAutomationID != "automation-S" || !b.MirrorMatches {
		t.Fatalf("binding repair: %+v", b)
	}
	if again := r.bind("S"); again.Outcome != "unchanged" {
		t.Fatalf("the same binding again: %+v", again.Outcome)
	}
	moved := daemontest.Call(r.Daemon, api.DesktopBindingRepair, api.BindingRepairArgs{SourceThreadID: "S", CallerAutomationID: "automation-S2"})
	if !moved.ReplacedAutomation || moved.PreviousAutomationID != "automation-S" || moved.CallerAutomationID != "automation-S2" {
		t.Fatalf("a new caller automation: %+v", moved)
	}
	r.bind("T")
	list := daemontest.Call(r.Daemon, api.DesktopBindingList, api.BindingListArgs{})
	if len(list.Bindings) != 2 {
		t.Fatalf("bindings %+v", list.Bindings)
	}

	// The read transport's capability dropped to unknown: the bound
	// threads are degraded, and automatic continuation stops.
	fp, _ := inbox.Observe("test", desktop.TransportDirect)
	dropped := daemontest.Call(r.Daemon, api.DesktopInstallationRepair, api.InstallationRepairArgs{ReadTransport: desktop.TransportDirect,
		ReadTransportCapability: events.CapUnknown, WritebackCapability: events.CapValidated, Fingerprint: fp})
	if dropped.Outcome != "repaired" || len(dropped.DegradedBindings) != 2 || dropped.AutomaticContinuation {
		t.Fatalf("a capability dropped: %+v", dropped)
	}
	if l := daemontest.Call(r.Daemon, api.DesktopBindingList, api.BindingListArgs{State: string(fsm.BindingDegraded)}); len(l.Bindings) != 2 {
		t.Fatalf("degraded bindings %+v", l.Bindings)
	}

	u := daemontest.Call(r.Daemon, api.DesktopBindingUnbind, api.BindingUnbindArgs{SourceThreadID: "T", DeleteAutomation: true})
	if u.Outcome != "unbound" || u.BindingState != fsm.BindingUnbound || !u.AutomationDeletedOnUnbind {
		t.Fatalf("unbind: %+v", u)
	}
	if again := daemontest.Call(r.Daemon, api.DesktopBindingUnbind, api.BindingUnbindArgs{SourceThreadID: "T"}); again.Outcome != "already_unbound" {
		t.Fatalf("unbind again: %+v", again.Outcome)
	}
	r.refused("an automation id with a control character", errs.EINVAL, "", func() error {
		_, err := api.DesktopBindingRepair.Call(r.Client, api.BindingRepairArgs{SourceThreadID: "U", CallerAutomationID: "a\x00b"})
		return err
	})
	// A binding may name no automation: it serves the queue transport.
	if q := daemontest.Call(r.Daemon, api.DesktopBindingRepair, api.BindingRepairArgs{SourceThreadID: "U"}); q.Outcome != "bound" || q.CallerAutomationID != "" {
		t.Fatalf("a binding with no automation: %+v", q)
	}
}

// bridge-preflight through the daemon selects the bridge thread, prepares
// the eligible heads and publishes a manifest it names; each preflight
// publishes a later revision.
func TestPreflightPublishes(t *testing.T) {
	r := start(t)
	r.validate()
	r.bind("S")
	p := r.preflight()
	if p.Source != "daemon" || p.BridgeThreadID != bridge || p.SnapshotRevision == 0 || p.SnapshotManifestPath == "" ||
		!p.FreshUntil.After(p.PublishedAt) || !p.AutomaticContinuation {
		t.Fatalf("preflight: %+v", p)
	}
	if _, err := os.Stat(p.SnapshotManifestPath); err != nil {
		t.Fatalf("the manifest it names: %v", err)
	}
	if in := daemontest.Call(r.Daemon, api.DesktopInstallation, api.InstallationArgs{}); in.BridgeThreadID != bridge {
		t.Fatalf("the installation's bridge thread: %q", in.BridgeThreadID)
	}
	r.job("S")
	e := r.ready()
	if e == nil || e.SourceThreadID != "S" || e.AttemptID == "" {
		t.Fatalf("the ready entry after a job: %+v", e)
	}
	again := r.preflight()
	if again.SnapshotRevision <= p.SnapshotRevision {
		t.Fatalf("a later preflight published revision %d after %d", again.SnapshotRevision, p.SnapshotRevision)
	}
}

// batch.skip_head moves the head of a thread past every other ready
// head of its scope in the fair order, leaving the batch open and as it
// was; a thread with no head has nothing to skip.
func TestSkipHead(t *testing.T) {
	r := start(t)
	r.validate()
	r.bind("S1")
	r.bind("S2")
	r.preflight()
	r.job("S1")
	r.job("S2")
	first := r.ready()
	if first == nil {
		t.Fatal("nothing ready")
	}
	skipped := first.SourceThreadID
	rep := daemontest.Call(r.Daemon, api.BatchSkipHead, api.ThreadArgs{SourceThreadID: skipped})
	if rep.Outcome != "skipped" || rep.BatchID != first.BatchID {
		t.Fatalf("skip-head: %+v, want batch %s skipped", rep, first.BatchID)
	}
	in := daemontest.Call(r.Daemon, api.BatchInspect, api.BatchArgs{BatchID: first.BatchID})
	if !in.Batch.State.Open() {
		t.Fatalf("the skipped batch is %s, want it open", in.Batch.State)
	}
	r.preflight()
	if next := r.ready(); next == nil || next.SourceThreadID == skipped {
		t.Fatalf("after skipping %s the first ready is %+v", skipped, next)
	}
	if rep := daemontest.Call(r.Daemon, api.BatchSkipHead, api.ThreadArgs{SourceThreadID: "nobody"}); rep.Outcome != "no_head" {
		t.Fatalf("skip-head of a thread with no head: %+v", rep)
	}
	r.refused("skip-head of no thread", errs.EINVAL, "", func() error {
		_, err := api.BatchSkipHead.Call(r.Client, api.ThreadArgs{})
		return err
	})
}
