package main_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkMCP measures the agent's MCP path against the bare CLI in the
// same run, interleaved, on one daemon (spec/mcp.md):
//
//   - call_ms: a tools/call job_submit on a running `cbth mcp serve` (the
//     way Codex calls it), against submit_ms, a whole `cbth job submit`
//     process; x_submit is their ratio (the bound: 1.2).
//   - start_ms: `cbth mcp serve` spawned, initialized and its tools/list
//     answered, against version_ms, a bare `cbth version`; x_version.
func BenchmarkMCP(b *testing.B) {
	home := filepath.Join(b.TempDir(), "home")
	env := append(os.Environ(), "CBTH_HOME="+home)
	timedRun := timed(b, env)
	run := func(args ...string) time.Duration { return timedRun(cbthBin, args...) }
	run("job", "submit", "--target", "cli", "--thread-id", "warm", "--task-kind", "k", "--summary", "start the daemon")
	defer run("daemon", "stop")
	ctx := context.Background()
	connect := func() *sdk.ClientSession {
		cmd := exec.Command(cbthBin, "mcp", "serve")
		cmd.Env = env
		s, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "0"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	s := connect()
	defer s.Close()
	meta := sdk.Meta{"threadId": "bench-thread", "x-codex-turn-metadata": map[string]any{"thread_id": "bench-thread", "turn_id": "t"}}
	const n = 100
	b.ResetTimer()
	var call, submit, start, version []time.Duration
	for range b.N {
		for i := 0; i < n; i++ {
			t0 := time.Now()
			res, err := s.CallTool(ctx, &sdk.CallToolParams{Meta: meta, Name: "job_submit",
				Arguments: map[string]any{"task_kind": "k", "summary": fmt.Sprintf("mcp %d", i)}})
			if err != nil || res.IsError {
				b.Fatalf("job_submit: %v %+v", err, res)
			}
			call = append(call, time.Since(t0))
			submit = append(submit, run("job", "submit", "--target", "cli", "--thread-id", "bench-thread", "--task-kind", "k", "--summary", fmt.Sprintf("cli %d", i), "--json"))
			if i%5 == 0 {
				t0 = time.Now()
				c := connect()
				if _, err := c.ListTools(ctx, nil); err != nil {
					b.Fatal(err)
				}
				start = append(start, time.Since(t0))
				c.Close()
				version = append(version, run("version"))
			}
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	cm, sm, st, vm := median(call), median(submit), median(start), median(version)
	b.ReportMetric(ms(cm), "call_ms")
	b.ReportMetric(ms(sm), "submit_ms")
	b.ReportMetric(float64(cm)/float64(sm), "x_submit")
	b.ReportMetric(ms(st), "start_ms")
	b.ReportMetric(ms(vm), "version_ms")
	b.ReportMetric(float64(st)/float64(vm), "x_version")
}
