package desktopmod_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/desktop/relay"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/daemontest"
)

// The transcript relay's operator side: a marker issued for the ready
// head prints a relay line with no lease in it; a scanner binds only a
// private rollout (again: unchanged); a consume names its bridge, never
// reads another bridge's bound rollout as its own, and reports a marker
// the rollout does not hold as not found. (cmd/cbth's relay tests run
// the real Codex writing the rollouts.)
func TestRelayMarkersScannersAndConsume(t *testing.T) {
	r := start(t)
	e := r.readyThread("S")
	m := daemontest.Call(r.Daemon, api.DesktopRelayMarkerIssue, api.MarkerIssueArgs{BridgeThreadID: bridge, Kind: relay.KindArmPending,
		SourceThreadID: e.SourceThreadID, AttemptID: e.AttemptID, Generation: e.Generation, BridgeRequestID: "wake-1"})
	if m.Outcome != "issued" || m.Marker == "" || !strings.HasPrefix(m.Line, "CBTH-RELAY/1 {") || strings.Contains(m.Line, "lease") ||
		!m.ExpiresAt.After(r.Clock.Now()) {
		t.Fatalf("marker: %+v", m)
	}

	dir := t.TempDir()
	rollout := filepath.Join(dir, "rollout.jsonl")
	os.WriteFile(rollout, []byte("{\"type\":\"session_meta\"}\n{\"type\":\"event_msg\"}\n"), 0o600)
	b := daemontest.Call(r.Daemon, api.DesktopRelayScannerBind, api.ScannerBindArgs{BridgeThreadID: bridge, RolloutPath: rollout})
	if b.Outcome != "bound" || b.RolloutPath != rollout || b.Inode == 0 {
		t.Fatalf("bind: %+v", b)
	}
	if again := daemontest.Call(r.Daemon, api.DesktopRelayScannerBind, api.ScannerBindArgs{BridgeThreadID: bridge, RolloutPath: rollout}); again.Outcome != "unchanged" {
		t.Fatalf("bind again: %+v", again)
	}
	shared := filepath.Join(dir, "shared.jsonl")
	os.WriteFile(shared, nil, 0o600)
	os.Chmod(shared, 0o660)
	r.refused("a rollout its group can write", errs.EACCES, "mode 0660", func() error {
		_, err := api.DesktopRelayScannerBind.Call(r.Client, api.ScannerBindArgs{BridgeThreadID: bridge, RolloutPath: shared})
		return err
	})
	r.refused("a rollout that is not there", errs.ENOENT, "", func() error {
		_, err := api.DesktopRelayScannerBind.Call(r.Client, api.ScannerBindArgs{BridgeThreadID: bridge, RolloutPath: filepath.Join(dir, "nope")})
		return err
	})

	got := daemontest.Call(r.Daemon, api.DesktopRelayConsume, api.ConsumeArgs{BridgeThreadID: bridge, RolloutPath: rollout, Marker: m.Marker})
	if got.Outcome != "not_found" || got.LinesRead != 2 || len(got.Results) != 0 {
		t.Fatalf("a marker the rollout does not hold: %+v", got)
	}
	r.refused("a consume naming no bridge", errs.EINVAL, "bridge thread id is empty", func() error {
		_, err := api.DesktopRelayConsume.Call(r.Client, api.ConsumeArgs{RolloutPath: rollout, Marker: m.Marker})
		return err
	})
	r.refused("another bridge's bound rollout", errs.EINVAL, "bound to bridge thread "+bridge, func() error {
		_, err := api.DesktopRelayConsume.Call(r.Client, api.ConsumeArgs{BridgeThreadID: "other-bridge", RolloutPath: rollout, Marker: m.Marker})
		return err
	})
}
