package main_test

import (
	"encoding/json"
	"flag"
	"fmt"
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
