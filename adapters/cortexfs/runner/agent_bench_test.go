package runner_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/internal/execfile"
)

// BenchmarkAgentTurnExec times one agent turn with one tool call, end to
// end through the kernel: `agent/coder '!tool fs.read {...}'` on the debug
// model (a model call that asks for fs.read, the read inside the agent's
// root, a second model call that answers with the file), next to the bare
// `model/debug/echo "hello"` measured in the same run. Reported: median
// ms of each and their ratio.
func BenchmarkAgentTurnExec(b *testing.B) {
	dir := b.TempDir()
	bin := buildRunner(b, dir, "CGO_ENABLED=0")
	if err := execfile.Rewrite(bin); err != nil {
		b.Fatal(err)
	}
	root := filepath.Join(dir, "ctx")
	set, err := tree.Init(root, bin)
	if err != nil {
		b.Fatal(err)
	}
	proj := filepath.Join(dir, "proj")
	os.MkdirAll(proj, 0o700)
	os.WriteFile(filepath.Join(proj, "README.md"), []byte("hello from the readme\n"), 0o600)
	set.Objects = append(set.Objects,
		object.Object{Kind: object.KindAgent, Path: "coder", Meta: object.Meta{ID: "coder", Name: "coder", Type: object.KindAgent},
			Session: object.SessionSocket, Status: "ready", Model: "debug/echo", Tools: []string{"fs.read"}, Root: proj},
		object.Object{Kind: object.KindTool, Path: "fs.read", Meta: object.Meta{ID: "fs.read", Name: "fs.read", Type: object.KindTool},
			Session: object.SessionNone, Status: "ready"})
	if err := tree.Materialize(root, set); err != nil {
		b.Fatal(err)
	}
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
	spawn := func(want, path string, args ...string) time.Duration {
		cmd := exec.Command(path, args...)
		cmd.Env = env
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			b.Fatalf("%s: %v\n%s", path, err, out)
		}
		return time.Since(t0)
	}
	echo, agent := filepath.Join(root, "model/debug/echo"), filepath.Join(root, "agent/coder")
	task := `!tool fs.read {"path":"README.md"}`
	for i := 0; i < 5; i++ {
		spawn("hello", echo, "hello")
		spawn(`"role":"tool"`, agent, task)
	}
	var e, a []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e = append(e, spawn("hello", echo, "hello"))
		a = append(a, spawn(`hello from the readme`, agent, task))
	}
	b.StopTimer()
	me, ma := median(e), median(a)
	b.ReportMetric(float64(ma.Microseconds())/1000, "agent-ms")
	b.ReportMetric(float64(me.Microseconds())/1000, "echo-ms")
	b.ReportMetric(float64(ma)/float64(me), "x-echo")
}
