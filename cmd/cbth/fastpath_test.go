package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/desktop"
	"github.com/cbth-dev/cbth/adapters/desktop/inbox"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/enginetest"
	"github.com/cbth-dev/cbth/events"
)

// The reader fast path answers exactly as kong's parse of the same line
// does, and leaves to kong every line it does not take.
func TestReaderFastPathMatchesKong(t *testing.T) {
	root := filepath.Join(t.TempDir(), "home")
	publishOne(t, root)
	getenv := func(k string) string {
		if k == "CBTH_HOME" {
			return root
		}
		return ""
	}
	lines := [][]string{
		{"desktop", "claim-next-ready", "--bridge-thread-id", "B", "--json"},
		{"--json", "desktop", "claim-next-ready", "--bridge-thread-id=B"},
		{"desktop", "list-arm-pending", "--bridge-thread-id", "B", "--json=true"},
		{"desktop", "list-pause-due", "--bridge-thread-id", "B"},
		{"--home", root, "desktop", "claim-next-ready", "--bridge-thread-id", "B"},
		{"desktop", "claim-next-ready", "--bridge-thread-id", "other", "--json"},
		{"desktop", "claim-next-ready", "--bridge-thread-id", "B", "--json=false"},
	}
	for _, args := range lines {
		var fo, fe, ko, ke bytes.Buffer
		fcode, ok := readerFastPath(args, &Env{Stdout: &fo, Stderr: &fe, Getenv: getenv})
		if !ok {
			t.Fatalf("%v: not taken by the fast path", args)
		}
		kcode := runKong(append([]string{"cbth"}, args...), &Env{Stdout: &ko, Stderr: &ke, Getenv: getenv})
		if fcode != kcode || fo.String() != ko.String() || fe.String() != ke.String() {
			t.Fatalf("%v: fast path exit %d\n%s%s\nkong exit %d\n%s%s", args, fcode, fo.String(), fe.String(), kcode, ko.String(), ke.String())
		}
	}
	for _, args := range [][]string{
		{"desktop", "claim-next-ready", "--bridge-thread-id", "B", "--help"},
		{"desktop", "claim-next-ready", "--bridge-thread-id"},
		{"desktop", "claim-next-ready", "--bridge-thread-id", "-B"},
		{"desktop", "claim-next-ready", "--json"},
		{"desktop", "claim-next-ready", "--bridge-thread-id", "B", "--verbose"},
		{"desktop", "claim-next-ready", "extra", "--bridge-thread-id", "B"},
		{"desktop", "installation-state", "--bridge-thread-id", "B"},
		{"job", "list", "--bridge-thread-id", "B"},
		{"desktop", "claim-next-ready", "--bridge-thread-id", "B", "--json=maybe"},
	} {
		if _, ok := readerFastPath(args, &Env{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Getenv: getenv}); ok {
			t.Fatalf("%v: taken by the fast path", args)
		}
	}
}

// publishOne publishes a snapshot with one ready thread for bridge B into
// root's inbox, validated for this test binary.
func publishOne(t *testing.T, root string) {
	t.Helper()
	clock := engine.NewManualClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	e := enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{Clock: clock, NoSync: true})
	fp, err := inbox.Observe(Version, command.TransportDirect)
	if err != nil {
		t.Fatal(err)
	}
	cfg := command.DeliveryConfig{MaxJobsPerBatch: 8, MaxTotalBytes: 1 << 20, RedeliveryWindow: time.Hour, MaxDeliveryAttempts: 5, InlinePayloadLimit: 1 << 10}
	exec := func(d engine.Decider) engine.Result {
		res, err := e.Execute(context.Background(), engine.Meta{Actor: events.ActorOperator}, d)
		if err != nil {
			t.Fatalf("%T: %v", d, err)
		}
		return res
	}
	exec(command.RepairInstallation{ReadTransport: command.TransportDirect, ReadCap: command.CapValidated, WritebackCap: command.CapValidated, Fingerprint: fp})
	exec(command.SelectBridge{BridgeThreadID: "B"})
	exec(command.RepairBinding{ThreadID: "S", AutomationID: "A"})
	j := exec(command.SubmitJob{Target: command.TargetDesktop, ThreadID: "S", TaskKind: "ci", Summary: "s", Policy: events.DeliveryPolicy{ReadOnly: true}})
	exec(command.CompleteJob{Config: cfg, JobID: j.Value.(string), Summary: "done"})
	exec(command.PrepareAttempt{Config: cfg, ThreadID: "S", DeliveryMode: command.ModeDesktop})
	var c desktop.Content
	if err := e.Read(func(s engine.Snapshot) error {
		var err error
		c, _, err = desktop.Build(s, cfg, clock.Now(), desktop.Fingerprints{command.TransportDirect: fp})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(c.Ready) != 1 {
		t.Fatalf("%d ready", len(c.Ready))
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	p := &desktop.Publisher{Dir: filepath.Join(root, "inbox"), MaxAge: time.Minute, Interval: time.Minute, Retention: time.Minute, Log: slog.New(slog.DiscardHandler)}
	if _, err := p.Publish(c, e.Head(), clock.Now(), false); err != nil {
		t.Fatal(err)
	}
}
