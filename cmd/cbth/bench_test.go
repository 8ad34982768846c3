package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/internal/execfile"
)

// BenchmarkSubmitRoundTrip compares a full `cbth job submit --json` (spawn,
// parse, connect, durable append, print) with the floor: a static Go
// binary that sends the very same request line to the same daemon and
// reads the reply. Both are built static, and both pay the same durable
// commit, so the ratio is the CLI's own overhead. Both are put in place as
// installers do (execfile.Rewrite).
func BenchmarkSubmitRoundTrip(b *testing.B) {
	dir := b.TempDir()
	floor := filepath.Join(dir, "floor")
	static := filepath.Join(dir, "cbth")
	buildStatic(b, "", floor, "./testdata/floor", "-ldflags=-s -w")
	buildStatic(b, "", static, ".", "-ldflags=-s -w")
	home := filepath.Join(dir, "home")
	run := timed(b, append(os.Environ(), "CBTH_HOME="+home))
	run(static, "job", "submit", "--target", "cli", "--thread-id", "warm", "--task-kind", "k", "--summary", "start the daemon")
	defer run(static, "daemon", "stop")
	sock := filepath.Join(home, "run", "cbth.sock")
	const n = 200
	b.ResetTimer()
	var floorMed, cliMed time.Duration
	for range b.N {
		var fl, cl []time.Duration
		for i := 0; i < n; i++ {
			line := fmt.Sprintf(`{"proto":%d,"client":"bench","id":1,"op":"job.submit","args":{"target_kind":"cli","source_thread_id":"t","task_kind":"k","task_summary":"floor %d"}}`, ipc.Proto, i)
			fl = append(fl, run(floor, sock, line))
			cl = append(cl, run(static, "job", "submit", "--target", "cli", "--thread-id", "t", "--task-kind", "k", "--summary", fmt.Sprintf("cli %d", i), "--json"))
		}
		floorMed, cliMed = median(fl), median(cl)
	}
	b.ReportMetric(float64(floorMed.Microseconds())/1000, "floor_ms")
	b.ReportMetric(float64(cliMed.Microseconds())/1000, "cbth_ms")
	b.ReportMetric(float64(cliMed)/float64(floorMed), "x_floor")
}

// buildStatic builds pkg (in the module at dir, "" for this one) to out
// with CGO off, so static, and puts it in place as installers do
// (execfile.Rewrite).
func buildStatic(b *testing.B, dir, out, pkg string, flags ...string) {
	b.Helper()
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", out, pkg)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build %s: %v\n%s", out, err, msg)
	}
	if err := execfile.Rewrite(out); err != nil {
		b.Fatal(err)
	}
}

// timed returns a runner of commands with env that fails b when one fails
// and says how long each took.
func timed(b *testing.B, env []string) func(name string, args ...string) time.Duration {
	return func(name string, args ...string) time.Duration {
		c := exec.Command(name, args...)
		c.Env = env
		t0 := time.Now()
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return time.Since(t0)
	}
}

func median(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

// BenchmarkStartup measures what a user feels of cbth's start, against
// same-run references (issue 26), interleaved, medians:
//
//   - version_ms: `cbth version`, against empty_ms, a static empty Go
//     binary; x_empty is their ratio (the bound: 3).
//   - submit_ms: `cbth job submit` to a running daemon (durable,
//     hash-chained, FSM-checked), against sqlite_ms, the sqlite3 CLI
//     inserting one row in WAL mode with synchronous=FULL, the store the
//     original of this design used; x_sqlite is their ratio (the bound:
//     1.2). x_sqlite_paired is the median of each round's own ratio: the
//     two run back to back, so a change of the machine's load between
//     rounds moves both. Without sqlite3 on PATH that half is skipped
//     and said so.
func BenchmarkStartup(b *testing.B) {
	dir := b.TempDir()
	empty, static := filepath.Join(dir, "empty"), filepath.Join(dir, "cbth")
	buildStatic(b, "", empty, "./testdata/empty")
	buildStatic(b, "", static, ".")
	run := timed(b, append(os.Environ(), "CBTH_HOME="+filepath.Join(dir, "home")))
	run(static, "job", "submit", "--target", "cli", "--thread-id", "warm", "--task-kind", "k", "--summary", "start the daemon")
	defer run(static, "daemon", "stop")
	sqlite, _ := exec.LookPath("sqlite3")
	db := filepath.Join(dir, "jobs.db")
	if sqlite != "" {
		run(sqlite, db, "PRAGMA journal_mode=WAL; CREATE TABLE jobs(id INTEGER PRIMARY KEY, thread TEXT, kind TEXT, summary TEXT, state TEXT, at TEXT);")
	} else {
		b.Log("sqlite3 is not on PATH: no submit reference")
	}
	const n = 200
	b.ResetTimer()
	var em, ve, su, sq []time.Duration
	var paired []float64
	for range b.N {
		for i := 0; i < n; i++ {
			em = append(em, run(empty))
			ve = append(ve, run(static, "version"))
			su = append(su, run(static, "job", "submit", "--target", "cli", "--thread-id", "t", "--task-kind", "k", "--summary", fmt.Sprintf("s %d", i), "--json"))
			if sqlite != "" {
				sq = append(sq, run(sqlite, db, fmt.Sprintf("PRAGMA synchronous=FULL; INSERT INTO jobs(thread, kind, summary, state, at) VALUES('t', 'k', 's %d', 'running', datetime('now'));", i)))
				paired = append(paired, float64(su[len(su)-1])/float64(sq[len(sq)-1]))
			}
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(median(em)), "empty_ms")
	b.ReportMetric(ms(median(ve)), "version_ms")
	b.ReportMetric(float64(median(ve))/float64(median(em)), "x_empty")
	b.ReportMetric(ms(median(su)), "submit_ms")
	if sqlite != "" {
		b.ReportMetric(ms(median(sq)), "sqlite_ms")
		b.ReportMetric(float64(median(su))/float64(median(sq)), "x_sqlite")
		slices.Sort(paired)
		b.ReportMetric(paired[len(paired)/2], "x_sqlite_paired")
	}
}
