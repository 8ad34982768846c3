package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cbth-dev/cbth/internal/testkit/proctest"
)

// submitLoad runs procs concurrent submitters, each running n `cbth job
// submit` processes in a row, and returns the job ids that were printed.
// onAck, if set, is called after each printed id.
func submitLoad(h *homeDir, procs, n int, onAck func(total int64)) (ids []string, failures int) {
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		total atomic.Int64
	)
	for p := 0; p < procs; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < n; i++ {
				r := h.run("job", "submit", "--target", "cli", "--thread-id", fmt.Sprintf("thread-%02d", p), "--task-kind", "load",
					"--summary", fmt.Sprintf("load %d/%d", p, i), "--json")
				var res struct {
					JobID string `json:"job_id"`
				}
				mu.Lock()
				if r.code == 0 && json.Unmarshal([]byte(r.stdout), &res) == nil && res.JobID != "" {
					ids = append(ids, res.JobID)
				} else {
					failures++
				}
				mu.Unlock()
				if res.JobID != "" && onAck != nil {
					onAck(total.Add(1))
				}
			}
		}(p)
	}
	wg.Wait()
	return ids, failures
}

// rssPeakKiB is the peak RSS of process pid (VmHWM) where /proc has it,
// else (macOS) its current RSS, the most ps can tell of another process.
func rssPeakKiB(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		kib, err := proctest.RSSKiB(pid)
		if err != nil {
			return -1
		}
		return kib
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			v, _ := strconv.Atoi(strings.Fields(l)[1])
			return v
		}
	}
	return -1
}

// 50 concurrent submitters x 20 processes: every job accepted exactly once,
// the log verifies, and the daemon stays under 100 MiB.
func TestLoad_1000Submits(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("load test")
	}
	h := newHome(t)
	h.submit("warm-up")
	pid := h.pid()
	ids, failures := submitLoad(h, 50, 20, nil)
	if failures != 0 || len(ids) != 1000 {
		t.Fatalf("%d accepted, %d failed; want 1000 and 0", len(ids), failures)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("job id %s returned twice", id)
		}
		seen[id] = true
	}
	var list []struct {
		JobID string `json:"job_id"`
	}
	h.ok(&list, "job", "list", "--status", "running")
	if len(list) != 1001 {
		t.Fatalf("the daemon has %d running jobs, want 1001", len(list))
	}
	for _, j := range list {
		delete(seen, j.JobID)
	}
	if len(seen) != 0 {
		t.Fatalf("%d acknowledged jobs are missing from the list", len(seen))
	}
	h.verify()
	if h.pid() != pid {
		t.Fatal("the daemon restarted during the load")
	}
	rss := rssPeakKiB(pid)
	t.Logf("daemon peak RSS %d KiB after 1,001 submits", rss)
	if rss <= 0 || rss > 100*1024 {
		t.Fatalf("daemon peak RSS %d KiB, want under 100 MiB", rss)
	}
}

// Kill -9 the daemon in the middle of the load: every submit that printed a
// job id is in the log after the restart.
func TestLoad_KillDaemonMidway(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("load test")
	}
	h := newHome(t)
	h.submit("warm-up")
	var killed atomic.Bool
	var victim atomic.Int64
	victim.Store(int64(h.pid()))
	ids, failures := submitLoad(h, 20, 15, func(total int64) {
		if total == 120 && killed.CompareAndSwap(false, true) {
			syscall.Kill(int(victim.Load()), syscall.SIGKILL)
		}
	})
	if !killed.Load() {
		t.Fatal("the load ended before the kill")
	}
	t.Logf("%d submits acknowledged, %d failed around the kill", len(ids), failures)
	var list []struct {
		JobID string `json:"job_id"`
	}
	h.ok(&list, "job", "list")
	have := map[string]bool{}
	for _, j := range list {
		have[j.JobID] = true
	}
	for _, id := range ids {
		if !have[id] {
			t.Fatalf("acknowledged job %s is not in the log after the restart", id)
		}
	}
	if h.pid() == int(victim.Load()) {
		t.Fatal("the killed daemon is still the one answering")
	}
	h.verify()
}
