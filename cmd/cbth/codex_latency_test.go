package main_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/internal/testkit/codextest"
)

var cliBench = flag.Int("cli.bench", 0, "deliveries TestCLIDeliveryLatency makes into the real Codex (0 skips it; just bench uses 100)")

// TestCLIDeliveryLatency measures, over -cli.bench deliveries into one
// thread of the real Codex, the time from a job's completion (its
// job.completed event) to the turn/start that carries it reaching the
// app-server's socket (faultcodex traces each one as it arrives), with no
// configured interval in between (max_wait_window and min_send_interval
// 0), and splits it at the barrier (attempt.accept_pending, recorded with
// the permission reading in one append). Beside it, measured in the same
// run on the same app-server and thread: a bare client's thread/read
// round trip (the floor of any exchange with it), and the pair a
// delivery cannot do without, thread/resume (the fresh permission
// reading) then turn/start, each pair made right after the previous turn
// ended, as each delivery is.
func TestCLIDeliveryLatency(t *testing.T) {
	t.Parallel()
	n := *cliBench
	if n == 0 {
		t.Skip("a benchmark: go test ./cmd/cbth -run TestCLIDeliveryLatency -args -cli.bench=100 (just bench)")
	}
	r := newFaultRig(t, "")
	thread, tm := r.foreground("[mark:earlier]")
	defer tm.quit()
	codextest.SetFaults(t, r.codex, codextest.Fault{Method: "turn/start", Action: "trace", Count: 1 << 30})
	for i := range n {
		r.complete(thread, fmt.Sprintf("[mark:b%d] result %d", i, i))
		waitFor(t, "the delivery", codextest.Guard, func() bool {
			bs := r.batches(thread)
			return len(bs) == i+1 && bs[i].CloseReason == "delivered"
		})
	}
	// The log in order: each job.completed, then its delivery's barrier,
	// then the acceptance, decided once turn/start's answer was read (the
	// end of the part the bare pair below compares with).
	var completed, barrier, accepted []time.Time
	for _, e := range r.events("job.completed", "attempt.accept_pending", "attempt.accepted") {
		var ev struct {
			RecordedAt time.Time `json:"recorded_at"`
		}
		if err := json.Unmarshal([]byte(e.line), &ev); err != nil {
			t.Fatal(err)
		}
		switch {
		case e.Type == "job.completed":
			completed = append(completed, ev.RecordedAt)
		case e.Type == "attempt.accept_pending" && len(barrier) < len(completed):
			barrier = append(barrier, ev.RecordedAt)
		case e.Type == "attempt.accepted" && len(accepted) < len(completed):
			accepted = append(accepted, ev.RecordedAt)
		}
	}
	var sent []time.Time
	for _, l := range codextest.FaultsApplied(r.codex) {
		f := strings.Fields(l)
		if len(f) == 4 && f[0] == "trace" && f[3] == thread { // the TUI's own (title threads) aside
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			sent = append(sent, time.Unix(0, ns))
		}
	}
	if len(completed) != n || len(barrier) != n || len(accepted) != n || len(sent) != n {
		t.Fatalf("%d completions, %d barriers, %d acceptances and %d turn/starts for %d deliveries", len(completed), len(barrier), len(accepted), len(sent), n)
	}
	lat, toBarrier, toSend, toAnswer := make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n)
	for i := range n {
		lat[i] = sent[i].Sub(completed[i])
		toBarrier[i], toSend[i], toAnswer[i] = barrier[i].Sub(completed[i]), sent[i].Sub(barrier[i]), accepted[i].Sub(completed[i])
	}
	c := r.appServer()
	ctx := codextest.Context(t)
	floor := make([]time.Duration, n)
	for i := range n {
		t0 := time.Now()
		if _, err := c.ThreadRead(ctx, appserver.ThreadReadParams{ThreadID: thread}); err != nil {
			t.Fatal(err)
		}
		floor[i] = time.Since(t0)
	}
	resume := make([]time.Duration, n)
	for i := range n {
		t0 := time.Now()
		if _, err := c.ThreadResume(ctx, appserver.ThreadResumeParams{ThreadID: thread, ExcludeTurns: true}); err != nil {
			t.Fatal(err)
		}
		resume[i] = time.Since(t0)
	}
	// The bare pair, each right after the previous turn ended. Its turns
	// run with the thread's own strict-safe settings, as a delivery's do.
	sub := c.Subscribe()
	defer sub.Close()
	pair := make([]time.Duration, n)
	for i := range n {
		t0 := time.Now()
		if _, err := c.ThreadResume(ctx, appserver.ThreadResumeParams{ThreadID: thread, ExcludeTurns: true}); err != nil {
			t.Fatal(err)
		}
		turn, err := c.TurnStart(ctx, appserver.TurnStartParams{ThreadID: thread, Input: []appserver.Input{appserver.TextInput(fmt.Sprintf("[mark:bare%d]", i))},
			ApprovalPolicy: json.RawMessage(`"never"`), SandboxPolicy: json.RawMessage(`{"type":"readOnly","networkAccess":false}`)})
		if err != nil {
			t.Fatal(err)
		}
		pair[i] = time.Since(t0)
		for ended := false; !ended; {
			m, ok := <-sub.C()
			if !ok {
				t.Fatalf("the bare client's notifications ended: %v", sub.Err())
			}
			var note appserver.TurnNote
			ended = m.Method == appserver.NoteTurnCompleted && json.Unmarshal(m.Params, &note) == nil && note.Turn.ID == turn.ID
		}
	}
	pct := func(d []time.Duration, p float64) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[int(p*float64(len(s)-1))]
	}
	msg := fmt.Sprintf("cli delivery, job complete -> turn/start sent, %d deliveries: p50 %.2f ms, p99 %.2f ms, max %.2f ms "+
		"(complete -> barrier p50 %.2f ms, barrier -> turn/start p50 %.2f ms; complete -> turn/start answered p50 %.2f ms p99 %.2f ms); "+
		"a bare client on the same app-server: thread/read p50 %.2f ms, thread/resume p50 %.2f ms p99 %.2f ms, "+
		"thread/resume + turn/start answered, after a turn: p50 %.2f ms p99 %.2f ms; "+
		"delivery over that pair: sent p50 x%.2f p99 x%.2f, answered p50 x%.2f p99 x%.2f",
		n, ms(pct(lat, .5)), ms(pct(lat, .99)), ms(pct(lat, 1)), ms(pct(toBarrier, .5)), ms(pct(toSend, .5)), ms(pct(toAnswer, .5)), ms(pct(toAnswer, .99)),
		ms(pct(floor, .5)), ms(pct(resume, .5)), ms(pct(resume, .99)), ms(pct(pair, .5)), ms(pct(pair, .99)),
		ms(pct(lat, .5))/ms(pct(pair, .5)), ms(pct(lat, .99))/ms(pct(pair, .99)), ms(pct(toAnswer, .5))/ms(pct(pair, .5)), ms(pct(toAnswer, .99))/ms(pct(pair, .99)))
	t.Log(msg)
	fmt.Println(msg)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

var daemonBench = flag.Int("daemon.bench", 0, "deliveries TestCodexDaemonLatency makes through the user's Codex daemon, and hand-offs to its queue (0 skips it; just bench uses 50)")

// recordedAt lists the recorded_at of the home's events of type typ, in
// log order.
func (h *homeDir) recordedAt(typ string) []time.Time {
	h.t.Helper()
	var out []time.Time
	for _, e := range h.events(typ) {
		var ev struct {
			RecordedAt time.Time `json:"recorded_at"`
		}
		if err := json.Unmarshal([]byte(e.line), &ev); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, ev.RecordedAt)
	}
	return out
}

// TestCodexDaemonLatency measures the codex_daemon transport (spec/codex-
// cli.md section 17) over -daemon.bench results into one thread of a
// plain `codex` session: from a job's completion (job.completed) to its
// turn/start answered by the user's managed daemon (attempt.accepted),
// against, in the same run on the same daemon and thread, a bare second
// client's thread/resume + turn/start answered, each right after the
// previous turn ended, as a delivery is. Then, with the daemon stopped and
// the thread trusted, as many hand-offs to Codex's queue: from the job's
// completion to the batch closed handoff_recorded (the item is in Codex's
// queue then), against a bare `codex queue` of the same text.
func TestCodexDaemonLatency(t *testing.T) {
	t.Parallel()
	n := *daemonBench
	if n == 0 {
		t.Skip("a benchmark: go test ./cmd/cbth -run TestCodexDaemonLatency -args -daemon.bench=50 (just bench)")
	}
	u := newUserCodex(t, "approval_policy = \"never\"\nsandbox_mode = \"read-only\"\n", "queue_handoff = true\n")
	tm := u.tui()
	u.userTurn(tm, "[mark:t] hello", "[mark:t]")
	thread := u.threadOfMarker("[mark:t]")
	tm.waitText("Worked for", codextest.Guard)
	for i := range n {
		u.complete(thread, fmt.Sprintf("[mark:d%d] result %d", i, i))
		waitFor(t, "the delivery", codextest.Guard, func() bool {
			bs := u.batches(thread)
			return len(bs) == i+1 && bs[i].CloseReason == "delivered"
		})
	}
	completed, accepted := u.recordedAt("job.completed"), u.recordedAt("attempt.accepted")
	if len(completed) != n || len(accepted) != n {
		t.Fatalf("%d completions and %d acceptances for %d deliveries", len(completed), len(accepted), n)
	}
	direct := make([]time.Duration, n)
	for i := range n {
		direct[i] = accepted[i].Sub(completed[i])
	}
	c := codextest.Connect(t, filepath.Join(u.codexHome, "app-server-control", "app-server-control.sock"))
	ctx := codextest.Context(t)
	sub := c.Subscribe()
	defer sub.Close()
	pair := make([]time.Duration, n)
	for i := range n {
		t0 := time.Now()
		if _, err := c.ThreadResume(ctx, appserver.ThreadResumeParams{ThreadID: thread, ExcludeTurns: true}); err != nil {
			t.Fatal(err)
		}
		turn, err := c.TurnStart(ctx, appserver.TurnStartParams{ThreadID: thread, Input: []appserver.Input{appserver.TextInput(fmt.Sprintf("[mark:bare%d]", i))},
			ApprovalPolicy: json.RawMessage(`"never"`), SandboxPolicy: json.RawMessage(`{"type":"readOnly","networkAccess":false}`)})
		if err != nil {
			t.Fatal(err)
		}
		pair[i] = time.Since(t0)
		for ended := false; !ended; {
			m, ok := <-sub.C()
			if !ok {
				t.Fatalf("the bare client's notifications ended: %v", sub.Err())
			}
			var note appserver.TurnNote
			ended = m.Method == appserver.NoteTurnCompleted && json.Unmarshal(m.Params, &note) == nil && note.Turn.ID == turn.ID
		}
	}
	if code := tm.quit(); code != 0 {
		t.Fatalf("codex exited %d", code)
	}

	u.ok(nil, "thread", "trust", "--thread-id", thread, "--own-permissions")
	killDaemon(u.codexHome)
	for i := range n {
		u.complete(thread, fmt.Sprintf("[mark:q%d] queued %d", i, i))
		waitFor(t, "the hand-off", codextest.Guard, func() bool {
			bs := u.batches(thread)
			return len(bs) == n+i+1 && bs[n+i].CloseReason == "handoff_recorded"
		})
	}
	completed, handed := u.recordedAt("job.completed")[n:], u.recordedAt("batch.queued_to_codex")
	if len(completed) != n || len(handed) != n {
		t.Fatalf("%d completions and %d hand-offs for %d", len(completed), len(handed), n)
	}
	queued, bare := make([]time.Duration, n), make([]time.Duration, n)
	for i := range n {
		queued[i] = handed[i].Sub(completed[i])
		cmd := exec.Command(u.wrapper, "queue", "--thread", thread, "--message", fmt.Sprintf("[mark:bq%d] a bare queued message", i))
		cmd.Env = u.codexEnv()
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("codex queue: %v\n%s", err, out)
		}
		bare[i] = time.Since(t0)
	}
	pct := func(d []time.Duration, p float64) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[int(p*float64(len(s)-1))]
	}
	msg := fmt.Sprintf("codex_daemon, %d results: job complete -> turn/start answered p50 %.2f ms p99 %.2f ms; a bare client's thread/resume + turn/start answered on the same daemon p50 %.2f ms p99 %.2f ms; ratio p50 x%.2f p99 x%.2f. "+
		"Queue hand-off, %d results: job complete -> handoff_recorded p50 %.2f ms p99 %.2f ms; a bare `codex queue` (the npm codex) p50 %.2f ms p99 %.2f ms; ratio p50 x%.2f",
		n, ms(pct(direct, .5)), ms(pct(direct, .99)), ms(pct(pair, .5)), ms(pct(pair, .99)), ms(pct(direct, .5))/ms(pct(pair, .5)), ms(pct(direct, .99))/ms(pct(pair, .99)),
		n, ms(pct(queued, .5)), ms(pct(queued, .99)), ms(pct(bare, .5)), ms(pct(bare, .99)), ms(pct(queued, .5))/ms(pct(bare, .5)))
	t.Log(msg)
	fmt.Println(msg)
}
