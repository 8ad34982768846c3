package main_test

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
)

var watchSecs = flag.Int("watch.secs", 5, "BenchmarkWatch: seconds of the 10,000 lines/s stream (at most 60)")

// BenchmarkWatch measures a watcher (spec/tasks.md, "Watchers") against
// bare references in the same run:
//
//   - match_p50_ms: a matching line written into the watched command's
//     input (a FIFO it cats) until its update is recorded (the daemon's
//     commit, heard through watch.next), median of 100, against
//     grep_p50_ms, the same line through a bare `grep --line-buffered`
//     pipe until grep prints it; x_grep is their ratio.
//   - cpu_ms_per_s: the daemon's CPU time (user and system, from
//     /proc/PID/stat) per second of a stream of 10,000 non-matching
//     lines a second through a watcher, against cat_ms_per_s, `cat >
//     /dev/null` of the same stream; x_cat is their ratio. plain_ms_per_s
//     is the daemon's for the same stream through a plain task (no
//     patterns: the spool and the redaction alone).
//
// Linux only (/proc); bounded: 100 lines, then -watch.secs of stream
// three times.
func BenchmarkWatch(b *testing.B) {
	secs := min(max(*watchSecs, 1), 60)
	dir := b.TempDir()
	root := filepath.Join(dir, "home")
	if err := os.MkdirAll(root, 0o700); err != nil {
		b.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "config.toml"), []byte("[delivery]\nmax_wait_window = \"0s\"\nmin_send_interval = \"0s\"\n"), 0o600)
	env := append(os.Environ(), "CBTH_HOME="+root)
	run := func(args ...string) string {
		c := exec.Command(cbthBin, args...)
		c.Env = env
		out, err := c.CombinedOutput()
		if err != nil {
			b.Fatalf("cbth %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run("debug", "target", "--thread-id", "*", "busy") // updates are recorded, never delivered: no other commit
	defer run("daemon", "stop")
	cl, err := ipc.Dial(filepath.Join(root, "run", "cbth.sock"), "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	daemonPID, _ := strconv.Atoi(strings.TrimSpace(readFile(b, filepath.Join(root, "run", "daemon.lock"))))

	// watch starts a command that cats a FIFO, and returns the FIFO's
	// writing end once the command reads it.
	watch := func(name string, args ...string) (*os.File, string) {
		fifo := filepath.Join(dir, name)
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			b.Fatal(err)
		}
		out := run(append(append([]string{"--json", "task", "run", "--target", "debug", "--thread-id", "W-" + name}, args...), "--", "cat", fifo)...)
		var v struct {
			TaskID string `json:"task_id"`
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			b.Fatalf("task run: %v\n%s", err, out)
		}
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // blocks until cat opens it
		if err != nil {
			b.Fatal(err)
		}
		return w, v.TaskID
	}

	b.ResetTimer()
	for range b.N {
		// Latency: a matching line to its recorded update, against grep.
		w, _ := watch("latency", "--wake-on", "^MATCH", "--wakes-per-hour", "600")
		grep := exec.Command("grep", "--line-buffered", "^MATCH")
		gin, _ := grep.StdinPipe()
		gout, _ := grep.StdoutPipe()
		if err := grep.Start(); err != nil {
			b.Fatal(err)
		}
		gr := bufio.NewReader(gout)
		var match, bare []time.Duration
		for i := range 100 {
			var head api.WatchView
			if err := cl.Call(api.WatchNext.Name, api.WatchArgs{}, &head); err != nil {
				b.Fatal(err)
			}
			line := fmt.Sprintf("MATCH %d\n", i)
			t0 := time.Now()
			if _, err := io.WriteString(w, line); err != nil {
				b.Fatal(err)
			}
			var next api.WatchView
			if err := cl.Call(api.WatchNext.Name, api.WatchArgs{After: head.Seq, WaitMS: 10_000}, &next); err != nil || next.Seq == head.Seq {
				b.Fatalf("no commit after a matching line: %v", err)
			}
			match = append(match, time.Since(t0))
			t0 = time.Now()
			io.WriteString(gin, line)
			if got, err := gr.ReadString('\n'); err != nil || got != line {
				b.Fatalf("grep printed %q, %v", got, err)
			}
			bare = append(bare, time.Since(t0))
		}
		w.Close()
		gin.Close()
		grep.Wait()
		mp, gp := median(match), median(bare)
		b.ReportMetric(float64(mp.Microseconds())/1000, "match_p50_ms")
		b.ReportMetric(float64(gp.Microseconds())/1000, "grep_p50_ms")
		b.ReportMetric(float64(mp)/float64(gp), "x_grep")

		// CPU: 10,000 non-matching lines a second, through a watcher,
		// through a plain task, and into cat > /dev/null.
		stream := func(w io.Writer) {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			var chunk strings.Builder
			n := 0
			for range secs * 100 {
				chunk.Reset()
				for range 100 {
					n++
					fmt.Fprintf(&chunk, "INFO GET /api/items/%d 200 in 4ms user=anon trace=%016x\n", n, n*7919)
				}
				if _, err := io.WriteString(w, chunk.String()); err != nil {
					b.Fatal(err)
				}
				<-tick.C
			}
		}
		daemonCPU := func(name string, args ...string) float64 {
			w, id := watch(name, args...)
			before := procCPU(b, daemonPID)
			stream(w)
			w.Close()
			var v struct {
				State       string `json:"state"`
				OutputBytes int64  `json:"output_bytes"`
			}
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if err := json.Unmarshal([]byte(run("task", "inspect", id, "--json")), &v); err == nil && v.State == "exited" {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("the streamed task %s did not end", id)
				}
			}
			if v.OutputBytes < int64(secs)*10_000*50 {
				b.Fatalf("the task saw %d bytes of the stream", v.OutputBytes)
			}
			return float64((procCPU(b, daemonPID) - before).Milliseconds()) / float64(secs)
		}
		watched := daemonCPU("watched", "--wake-on", "^ERROR", "--wake-on", "panic:", "--wake-on", `HTTP 5\d\d`)
		plain := daemonCPU("plain")
		cat := exec.Command("cat")
		cin, _ := cat.StdinPipe()
		cat.Stdout = io.Discard
		if err := cat.Start(); err != nil {
			b.Fatal(err)
		}
		stream(cin)
		cin.Close()
		cat.Wait()
		ru := cat.ProcessState.SysUsage().(*syscall.Rusage)
		catCPU := float64((time.Duration(ru.Utime.Nano()) + time.Duration(ru.Stime.Nano())).Milliseconds()) / float64(secs)
		b.ReportMetric(watched, "cpu_ms_per_s")
		b.ReportMetric(plain, "plain_ms_per_s")
		b.ReportMetric(catCPU, "cat_ms_per_s")
		if catCPU > 0 {
			b.ReportMetric(watched/catCPU, "x_cat")
		}
	}
}

// procCPU is a process's CPU time so far (user and system), from
// /proc/PID/stat (fields 14 and 15, in clock ticks of 1/100 s).
func procCPU(b *testing.B, pid int) time.Duration {
	s := readFile(b, fmt.Sprintf("/proc/%d/stat", pid))
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

func readFile(b *testing.B, path string) string {
	s, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return string(s)
}
