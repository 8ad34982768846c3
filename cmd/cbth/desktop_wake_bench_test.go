package main_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

var desktopWakes = flag.Int("desktop.bench", 0, "TestDesktopWakeMCPAgainstRelay: how many wakes to measure on each path (0: skip)")

// TestDesktopWakeMCPAgainstRelay measures one result's way through
// Desktop's heartbeats on the two sandbox-safe writeback paths, in the same
// run, on real pinned-Codex threads (read-only, approvals never): the
// heartbeat turns it takes and the wall time from the bridge's wake to the
// continuation recorded (spec/desktop.md, "Benchmarks"). It only reports:
//
//	go test -run TestDesktopWakeMCPAgainstRelay -v ./cmd/cbth -args -desktop.bench=5
//
// On the mcp path the bridge's one turn claims, notes arm-pending and
// arms, and the caller's turn crosses. On the relay path the bridge's
// first turn prints the arm-pending line, the scanner applies it, its
// second turn (the lease is the daemon's: the sandboxed bridge learns of
// the pending arm from the next snapshot) prints the arm-accepted line,
// the scanner applies it; the caller's turn then cannot cross at all: its
// shell cannot reach the daemon and the crossing has no relay.
func TestDesktopWakeMCPAgainstRelay(t *testing.T) {
	t.Parallel()
	if *desktopWakes == 0 {
		t.Skip("a measurement: -args -desktop.bench=N")
	}
	var mcpTimes, relayArmed []time.Duration
	var mcpTurns, relayTurns int

	m := newDesktopMCPRig(t)
	bridgeM := m.thread()
	m.validateMCP()
	for i := 0; i < *desktopWakes; i++ {
		s := m.source(fmt.Sprintf("[mark:bench-mcp-%d]", i))
		t0 := time.Now()
		_, tok := m.bridgeWake(bridgeM, nil)
		if _, code := m.callerWake(s, tok); code != "" {
			t.Fatalf("mcp wake %d: %s", i, code)
		}
		mcpTimes = append(mcpTimes, time.Since(t0))
		mcpTurns = 2
	}

	r := newDesktopMCPRig(t)
	r.repair("--read-transport", "direct_file_read", "--read-transport-capability", "validated", "--writeback-capability", "validated")
	bridgeR := r.thread()
	r.ok(nil, "desktop", "bridge-preflight", "--bridge-thread-id", bridgeR)
	r.ok(nil, "desktop", "relay", "scanner", "bind", "--bridge-thread-id", bridgeR, "--rollout-path", r.rollout(bridgeR))
	cbth := cbthBin + " --home " + r.root + " desktop "
	exec := func(cmd string) fakeprovider.Step {
		b, _ := json.Marshal(map[string]string{"cmd": cmd})
		return fakeprovider.Step{Name: "exec_command", Args: string(b)}
	}
	printFrom := func(kind string, field func(out string) string) fakeprovider.Step {
		return fakeprovider.Step{Name: "exec_command", ArgsFrom: func(outs []string) string {
			marker := field(outs[len(outs)-1])
			if marker == "" {
				return ""
			}
			b, _ := json.Marshal(map[string]string{"cmd": cbth + "relay print --bridge-thread-id " + bridgeR + " --kind " + kind + " --marker " + marker})
			return string(b)
		}}
	}
	for i := 0; i < *desktopWakes; i++ {
		s := r.source(fmt.Sprintf("[mark:bench-relay-%d]", i))
		t0 := time.Now()
		wake1 := fmt.Sprintf("relay bridge wake #%d-1.", i)
		r.model.Script(wake1, exec(cbth+"bridge-preflight --bridge-thread-id "+bridgeR+" --json"),
			exec(cbth+"claim-next-ready --bridge-thread-id "+bridgeR+" --json"),
			printFrom("arm-pending", func(out string) string {
				var c struct {
					Ready *struct {
						Marker string `json:"relay_marker"`
					}
				}
				answer(out, &c)
				if c.Ready == nil {
					return ""
				}
				return c.Ready.Marker
			}))
		r.turn(bridgeR, wake1)
		waitFor(t, "the scanner to apply the arm-pending line", codextest.Guard, func() bool { return len(r.armPending()) == 1 })
		wake2 := fmt.Sprintf("relay bridge wake #%d-2.", i)
		r.model.Script(wake2, exec(cbth+"list-arm-pending --bridge-thread-id "+bridgeR+" --json"),
			printFrom("arm-accepted", func(out string) string {
				var l struct {
					Entries []struct {
						Marker string `json:"relay_marker"`
					}
				}
				answer(out, &l)
				if len(l.Entries) != 1 {
					return ""
				}
				return l.Entries[0].Marker
			}))
		r.turn(bridgeR, wake2)
		waitFor(t, "the scanner to apply the arm-accepted line", codextest.Guard, func() bool { return len(r.armPending()) == 0 })
		relayArmed = append(relayArmed, time.Since(t0))
		// The caller's crossing: its shell cannot reach the daemon.
		b, _ := r.batchOfThread(s)
		outs := r.turn(s, fakeprovider.MarkRun+" "+cbth+"note-boundary-crossed --source-thread-id "+s+" --batch-id "+b+" --attempt-id x --generation 1 --expected-snapshot-revision 1 --json")
		if len(outs) != 1 || !strings.Contains(outs[0], "ESANDBOX") && !strings.Contains(outs[0], "transient_not_ready") {
			t.Fatalf("the relay caller's crossing: %q", outs)
		}
		if reason := r.closeReason(s); reason != "" {
			t.Fatalf("the relay path closed the batch %s", reason)
		}
		relayTurns = 3
	}
	med := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	t.Logf("mcp path:   %d heartbeat turns, bridge wake to continuation recorded p50 %s (n=%d)", mcpTurns, med(mcpTimes).Round(time.Millisecond), len(mcpTimes))
	t.Logf("relay path: %d heartbeat turns, bridge wake to armed p50 %s (n=%d; two bridge wakes, each line applied by the scanner, relay_scan_interval 2s); the continuation is never recorded: the caller cannot cross from its sandbox",
		relayTurns, med(relayArmed).Round(time.Millisecond), len(relayArmed))
	t.Logf("in Desktop a bridge wakes once a minute: the relay path needs a second bridge wake, so a minute more before the caller is armed")
}

// rollout is the path of thread's rollout file.
func (r *desktopMCPRig) rollout(thread string) string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), codextest.Guard)
	defer cancel()
	var res struct {
		Thread appserver.Thread `json:"thread"`
	}
	if err := r.client.Call(ctx, "thread/read", map[string]any{"threadId": thread}, &res); err != nil {
		r.t.Fatalf("thread/read: %v", err)
	}
	if res.Thread.Path == nil {
		r.t.Fatalf("thread %s has no rollout path", thread)
	}
	return *res.Thread.Path
}

func (r *desktopMCPRig) armPending() []any {
	r.t.Helper()
	var l struct {
		Entries []any `json:"entries"`
	}
	r.ok(&l, "desktop", "list-arm-pending", "--bridge-thread-id", r.installationBridge())
	return l.Entries
}

func (r *desktopMCPRig) installationBridge() string {
	var v struct {
		Bridge string `json:"bridge_thread_id"`
	}
	r.ok(&v, "desktop", "installation-state")
	return v.Bridge
}

func (r *desktopMCPRig) batchOfThread(thread string) (string, error) {
	bs := r.batches(thread)
	if len(bs) != 1 {
		return "", fmt.Errorf("%d batches", len(bs))
	}
	return bs[0].ID, nil
}
