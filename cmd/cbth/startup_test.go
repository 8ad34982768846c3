package main_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/projections"
	bolt "go.etcd.io/bbolt"
)

var (
	startupEvents = flag.Int("startup.events", 0, "events in the log of TestStartupWithALargeLog (0 skips it; just bench-startup uses 1000000)")
	startupOpen   = flag.Int("startup.open", 100000, "open batches among them")
)

// TestStartupWithALargeLog measures the daemon's start on a home whose log
// holds -startup.events events, -startup.open of them in open batches:
// the time from exec until the daemon answers, and its peak resident set
// (VmHWM), against the floor of the same log read by a bare bbolt scan in
// a process of its own. It also measures a start that must rebuild the
// projections. A report, not in go test's default run.
func TestStartupWithALargeLog(t *testing.T) {
	t.Parallel()
	if *startupEvents == 0 {
		t.Skip("a benchmark: run with -startup.events=1000000 (just bench-startup)")
	}
	if runtime.GOOS != "linux" {
		t.Skip("peak RSS is read from /proc/<pid>/status (VmHWM)")
	}
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	db := filepath.Join(home, "cbth.db")
	t0 := time.Now()
	buildLog(t, db, *startupEvents, *startupOpen)
	fi, _ := os.Stat(db)
	t.Logf("log: %d events, %d open batches, %.0f MiB file, written in %s", *startupEvents, *startupOpen, float64(fi.Size())/(1<<20), time.Since(t0).Round(time.Second))

	scan := filepath.Join(dir, "scanlog")
	if out, err := exec.Command("go", "build", "-o", scan, "./testdata/scanlog").CombinedOutput(); err != nil {
		t.Fatalf("build scanlog: %v\n%s", err, out)
	}
	var scanTimes, scanRSS []float64
	for i := 0; i < 4; i++ {
		out, err := exec.Command(scan, db).Output()
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(out))
		ns, _ := strconv.ParseFloat(f[0], 64)
		kb, _ := strconv.ParseFloat(f[3], 64)
		if i > 0 { // the first run warms the page cache for both
			scanTimes, scanRSS = append(scanTimes, ns/1e6), append(scanRSS, kb/1024)
		}
	}
	var startTimes, startRSS, steadyRSS []float64
	for i := 0; i < 3; i++ {
		ms, rss, steady := startDaemon(t, home)
		startTimes, startRSS, steadyRSS = append(startTimes, ms), append(startRSS, rss), append(steadyRSS, steady)
	}
	t.Logf("bare bbolt scan of the log: %.0f ms, VmHWM %.1f MiB (medians of 3)", med(scanTimes), med(scanRSS))
	t.Logf("daemon start until it answers: %.0f ms, VmHWM %.1f MiB at that point, %.1f MiB two seconds later (medians of 3); %.2fx the scan's time, %.2fx its memory",
		med(startTimes), med(startRSS), med(steadyRSS), med(startTimes)/med(scanTimes), med(steadyRSS)/med(scanRSS))
	if r := med(steadyRSS); r > 100 {
		t.Errorf("daemon peak RSS %.1f MiB, over the 100 MiB target", r)
	}

	// A start that finds the projections of another version rebuilds them
	// from the whole log before it serves.
	stale(t, db)
	ms, rss, steady := startDaemon(t, home)
	t.Logf("daemon start with a projection rebuild: %.0f ms, VmHWM %.1f MiB (%.1f MiB two seconds later)", ms, rss, steady)
}

func med(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// buildLog writes the benchmark's log with the engine itself: open
// batches (a job submitted then completed on each of `open` threads of
// target cli, which has no target in the daemon, so they stay queued) and,
// to reach `total` events, jobs submitted then failed.
func buildLog(t *testing.T, path string, total, open int) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(path, engine.Options{Projections: projections.Store{}, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cfg := command.DeliveryConfig{MaxJobsPerBatch: 8, MaxTotalBytes: 256 << 10, MaxWaitWindow: 2 * time.Second, RedeliveryWindow: 24 * time.Hour,
		MaxDeliveryAttempts: 5, InlinePayloadLimit: 16 << 10, MinArtifactTTL: 24 * time.Hour, PostCloseTTL: 72 * time.Hour}
	filler := (total - 3*open) / 2
	ctx := context.Background()
	meta := engine.Meta{Actor: events.ActorCLI}
	run := func(d engine.Decider) (engine.Result, error) { return e.Execute(ctx, meta, d) }
	inParallel(t, open+filler, func(i int) error {
		thread := fmt.Sprintf("t%07d", i)
		id, _, err := engine.Exec[string](ctx, e, meta, command.SubmitJob{Target: "cli", ThreadID: thread, TaskKind: "ci",
			Summary: "wait for CI on pull request " + strconv.Itoa(i), Policy: events.FailClosedPolicy})
		if err != nil {
			return err
		}
		if i < open {
			_, err = run(command.CompleteJob{Config: cfg, JobID: id, Summary: "CI is green"})
		} else {
			_, err = run(command.FailJob{JobID: id, Reason: "runner lost"})
		}
		return err
	})
}

// inParallel calls do for each i below n on eight goroutines, writers
// sharing one engine as a busy daemon's clients would, and fails t with
// the first error.
func inParallel(t *testing.T, n int, do func(i int) error) {
	t.Helper()
	const workers = 8
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				if err := do(i); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

// stale marks the projections as of version 1, so the next start rebuilds.
func stale(t *testing.T, path string) {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("p.meta")).Put([]byte("version"), binary.BigEndian.AppendUint64(nil, 1))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// startDaemon runs `cbth daemon run` on home and returns how long it took
// to answer a ping, its VmHWM then and two seconds later (MiB), and stops
// it.
func startDaemon(t *testing.T, home string) (ms, rss, steady float64) {
	t.Helper()
	cmd := exec.Command(cbthBin, "--home", home, "daemon", "run", "--quiet")
	cmd.Env = append(os.Environ(), "CBTH_HOME="+home)
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	sock := filepath.Join(home, "run", "cbth.sock")
	for {
		if c, err := ipc.Dial(sock, "bench"); err == nil {
			_, err = api.Ping.Call(c, api.Empty{})
			c.Close()
			if err == nil {
				break
			}
		}
		if time.Since(t0) > 5*time.Minute {
			t.Fatal("the daemon did not answer within 5 minutes")
		}
		time.Sleep(2 * time.Millisecond)
	}
	ms = float64(time.Since(t0).Microseconds()) / 1000
	rss = vmHWM(t, cmd.Process.Pid)
	time.Sleep(2 * time.Second)
	return ms, rss, vmHWM(t, cmd.Process.Pid)
}

func vmHWM(t *testing.T, pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
			return kb / 1024
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// daemon.log and the Codex app-server logs are rotated at start once
// past [log] max_bytes, keeping [log] keep older copies; the daemon goes
// on logging in a new daemon.log.
func TestLogsRotateAtStart(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.config("[log]\nmax_bytes = 200\nkeep = 2\n")
	logDir := filepath.Join(h.root, "log")
	os.MkdirAll(logDir, 0o700)
	old := strings.Repeat("MARKER-OLD\n", 50)
	for _, name := range []string{"daemon.log", "codex-app-server.log"} {
		if err := os.WriteFile(filepath.Join(logDir, name), []byte(old), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string { b, _ := os.ReadFile(filepath.Join(logDir, name)); return string(b) }
	h.ok(nil, "daemon", "status")
	if !strings.Contains(read("daemon.log.1"), "MARKER-OLD") || strings.Contains(read("daemon.log"), "MARKER-OLD") ||
		!strings.Contains(read("daemon.log"), "serving") {
		t.Fatalf("daemon.log was not rotated: .1 %d bytes, current %q", len(read("daemon.log.1")), read("daemon.log"))
	}
	if read("codex-app-server.log.1") != old || read("codex-app-server.log") != "" {
		t.Errorf("codex-app-server.log was not rotated")
	}
	// Each start writes past 200 bytes: two more starts fill .2, a third
	// drops the oldest.
	for i := 0; i < 3; i++ {
		h.ok(nil, "daemon", "stop")
		h.ok(nil, "daemon", "status")
	}
	if _, err := os.Stat(filepath.Join(logDir, "daemon.log.3")); !os.IsNotExist(err) {
		t.Errorf("more than keep=2 copies: %v", err)
	}
	if read("daemon.log.2") == "" || strings.Contains(read("daemon.log.2")+read("daemon.log.1"), "MARKER-OLD") {
		t.Errorf("the oldest copy was not dropped")
	}
}
