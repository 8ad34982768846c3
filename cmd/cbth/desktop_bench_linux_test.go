package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/projections"
)

// BenchmarkClaimNextReadyInSandbox times `cbth desktop claim-next-ready`
// (static, as installed) on a snapshot of 1,000 ready threads, inside the
// emulated heartbeat sandbox (the home read-only in a private mount
// namespace, run/ hidden; no strace, which would slow both), against the
// static process floor: a static Go binary with an empty main, started
// the same way in the same sandbox. Reported: the median of each and
// their ratio (target <= 2).
func BenchmarkClaimNextReadyInSandbox(b *testing.B) {
	dir := b.TempDir()
	static := filepath.Join(dir, "cbth")
	floor := filepath.Join(dir, "floor")
	runner := filepath.Join(dir, "spawnbench")
	os.MkdirAll(filepath.Join(dir, "floorsrc"), 0o700)
	os.WriteFile(filepath.Join(dir, "floorsrc", "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "floorsrc", "go.mod"), []byte("module floor\n\ngo 1.22\n"), 0o600)
	buildStatic(b, "", static, ".", "-ldflags=-s -w")
	buildStatic(b, "", runner, "./testdata/spawnbench", "-ldflags=-s -w")
	buildStatic(b, filepath.Join(dir, "floorsrc"), floor, ".", "-ldflags=-s -w")
	root := filepath.Join(dir, "home")
	run := func(args ...string) {
		cmd := exec.Command(static, append([]string{"--home", root}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("cbth %v: %v\n%s", args, err, out)
		}
	}
	// The installation validated for the static binary, then 1,000 bound
	// threads with a ready job each written straight into the log.
	run("desktop", "installation-state", "repair", "--read-transport", "direct_file_read",
		"--read-transport-capability", "validated", "--writeback-capability", "validated")
	run("daemon", "stop")
	e, err := engine.Open(home.Home{Root: root}.DB(), engine.Options{Projections: projections.Store{}, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	cfg := command.DeliveryConfig{MaxJobsPerBatch: 8, MaxTotalBytes: 1 << 20, RedeliveryWindow: 1 << 62, MaxDeliveryAttempts: 5, InlinePayloadLimit: 1 << 10}
	exec1 := func(d engine.Decider) engine.Result {
		res, err := e.Execute(context.Background(), engine.Meta{Actor: events.ActorOperator}, d)
		if err != nil {
			b.Fatalf("%T: %v", d, err)
		}
		return res
	}
	exec1(desktop.SelectBridge{BridgeThreadID: bridge})
	for i := range 1000 {
		th := fmt.Sprintf("T%04d", i)
		exec1(desktop.RepairBinding{ThreadID: th, AutomationID: "A" + th})
		j, _, err := engine.Exec[string](context.Background(), e, engine.Meta{Actor: events.ActorOperator}, command.SubmitJob{Target: command.TargetDesktop, ThreadID: th, TaskKind: "ci", Summary: "s", Policy: events.DeliveryPolicy{ReadOnly: true}})
		if err != nil {
			b.Fatal(err)
		}
		exec1(command.CompleteJob{Config: cfg, JobID: j, Summary: "done"})
		exec1(command.PrepareAttempt{Config: cfg, ThreadID: th, DeliveryMode: command.ModeDesktop})
	}
	e.Close()
	run("daemon", "status") // starts the daemon, which publishes
	run("daemon", "stop")
	claim := []string{static, "--home", root, "desktop", "claim-next-ready", "--bridge-thread-id", bridge, "--json"}
	if out, err := exec.Command(claim[0], claim[1:]...).Output(); err != nil || !json.Valid(out) {
		b.Fatalf("claim: %v %s", err, out)
	}
	const script = `set -eu
home=$1; shift
mount --bind "$home" "$home"
mount -o remount,bind,ro "$home"
mount -t tmpfs -o ro,mode=0700 cbth-sandbox "$home/run"
exec "$@"`
	var res map[string]float64
	b.ResetTimer()
	for range b.N {
		args := append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sandbox", root, runner, "300"}, claim...)
		out, err := exec.Command("unshare", append(append(args, "--"), floor)...).Output()
		if err != nil {
			b.Fatalf("sandboxed run: %v %s", err, out)
		}
		if err := json.Unmarshal(out, &res); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(res["a_ms"], "claim_ms")
	b.ReportMetric(res["b_ms"], "floor_ms")
	b.ReportMetric(res["a_ms"]/res["b_ms"], "x_floor")
}
