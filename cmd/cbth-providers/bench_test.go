package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/provider"
)

// BenchmarkHelperStart builds, static as `just build` does, an empty Go
// program, cbth-providers and each SDK helper, and spawns each with
// --list (every package initializer runs, then a few lines are printed)
// in interleaved rounds. It reports each one's median start and its
// ratio to the empty program's in the same run (x_empty; the bound is 2):
// a helper starts for every model call.
func BenchmarkHelperStart(b *testing.B) {
	dir := b.TempDir()
	build := func(out string, args ...string) {
		b.Helper()
		cmd := exec.Command("go", append([]string{"build", "-o", out}, args...)...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if o, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("go build %v: %v\n%s", args, err, o)
		}
	}
	src := filepath.Join(dir, "empty.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	build(empty, src)
	names := append([]string{provider.HelperName}, slices.Sorted(func(yield func(string) bool) {
		for h := range provider.SDKHelpers {
			if !yield(h) {
				return
			}
		}
	})...)
	bins := map[string]string{"empty": empty}
	for _, n := range names {
		bins[n] = filepath.Join(dir, n)
		build(bins[n], "github.com/cbth-dev/cbth/cmd/"+n)
		if n == provider.HelperName {
			continue
		}
		out, err := exec.Command(bins[n], "--list").Output()
		if got := strings.Fields(string(out)); err != nil || !slices.Equal(got, provider.SDKHelpers[n]) {
			b.Fatalf("%s --list: %q %v, want %v", n, got, err, provider.SDKHelpers[n])
		}
	}
	order := append([]string{"empty"}, names...)
	took := map[string][]time.Duration{}
	b.ResetTimer()
	for range b.N {
		for range 20 { // rounds
			for _, n := range order {
				for range 10 {
					t0 := time.Now()
					if err := exec.Command(bins[n], "--list").Run(); err != nil {
						b.Fatalf("%s --list: %v", n, err)
					}
					took[n] = append(took[n], time.Since(t0))
				}
			}
		}
	}
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	floor := med(took["empty"])
	b.ReportMetric(floor, "empty_ms")
	for _, n := range names {
		short := strings.TrimPrefix(strings.TrimPrefix(n, provider.HelperName), "-")
		if short == "" {
			short = "all"
		}
		b.ReportMetric(med(took[n]), short+"_ms")
		b.ReportMetric(med(took[n])/floor, fmt.Sprintf("%s_x_empty", short))
	}
}
