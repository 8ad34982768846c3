package runner_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/internal/execfile"
)

// BenchmarkEchoExec times `model/debug/echo "hello"` run by the kernel
// through the shebang, next to a static Go binary with an empty main (the
// Go spawn floor) measured in the same run. Reported: median ms of each
// and their ratio (target <= 1.5); the size of cbth (static, as measured)
// and of cbth-providers in MB; and the sum of cbth's package init times
// from one GODEBUG=inittrace=1 start (init-ms, runtime included). Both
// binaries are put in place as installers do (execfile.Rewrite).
func BenchmarkEchoExec(b *testing.B) {
	dir := b.TempDir()
	bin := buildRunner(b, dir, "CGO_ENABLED=0") // static, like the floor
	if err := execfile.Rewrite(bin); err != nil {
		b.Fatal(err)
	}
	root := filepath.Join(dir, "ctx")
	if _, err := tree.Init(root, bin); err != nil {
		b.Fatal(err)
	}
	floorSrc := filepath.Join(dir, "floor")
	if err := os.MkdirAll(floorSrc, 0o700); err != nil {
		b.Fatal(err)
	}
	os.WriteFile(filepath.Join(floorSrc, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o600)
	os.WriteFile(filepath.Join(floorSrc, "go.mod"), []byte("module floor\n\ngo 1.22\n"), 0o600)
	floor := filepath.Join(dir, "floor-bin")
	build := exec.Command("go", "build", "-ldflags=-s -w", "-o", floor, ".")
	build.Dir = floorSrc
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build floor: %v\n%s", err, out)
	}
	if err := execfile.Rewrite(floor); err != nil {
		b.Fatal(err)
	}
	echo := filepath.Join(root, "model/debug/echo")
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
	spawn := func(path string, args ...string) time.Duration {
		cmd := exec.Command(path, args...)
		cmd.Env = env
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", path, err, out)
		}
		return time.Since(t0)
	}
	for i := 0; i < 10; i++ { // warm the page cache
		spawn(echo, "hello")
		spawn(floor)
	}
	var e, f []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e = append(e, spawn(echo, "hello"))
		f = append(f, spawn(floor))
	}
	b.StopTimer()
	me, mf := median(e), median(f)
	b.ReportMetric(float64(me.Microseconds())/1000, "echo-ms")
	b.ReportMetric(float64(mf.Microseconds())/1000, "floor-ms")
	b.ReportMetric(float64(me)/float64(mf), "x-floor")
	_, helper := bins(b)
	for unit, p := range map[string]string{"cbth-MB": bin, "providers-MB": helper} {
		if st, err := os.Stat(p); err == nil {
			b.ReportMetric(float64(st.Size())/1e6, unit)
		}
	}
	b.ReportMetric(initMillis(b, bin), "init-ms")
}

// initMillis sums the "N ms clock" of every init line GODEBUG=inittrace=1
// prints for one start of bin (run with no arguments: usage, exit 2).
func initMillis(b *testing.B, bin string) float64 {
	cmd := exec.Command(bin)
	cmd.Env = []string{"GODEBUG=inittrace=1", "PATH=/usr/bin:/bin"}
	out, _ := cmd.CombinedOutput()
	total := 0.0
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		// init <pkg> @<t> ms, <clock> ms clock, ...
		if len(f) >= 7 && f[0] == "init" && f[6] == "clock," {
			if v, err := strconv.ParseFloat(f[4], 64); err == nil {
				total += v
			}
		}
	}
	return total
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
