package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/internal/testkit/codextest"
)

// The Codex CLI target through the real binary, the real pinned Codex
// (app-server and TUI) and the fake model: the fault matrix of issue 13
// (spec/codex-cli.md section 16).

// deliveryConfig is the cbth config of the delivery rigs: batches go at
// once, and the CLI target's windows are short enough for a test.
const deliveryConfig = `[delivery]
max_wait_window = "0s"
min_send_interval = "0s"
eligible_backoff = "200ms"
eligible_backoff_max = "1s"
[cli]
reconcile_window = "10s"
settle_delay = "300ms"
`

// newDeliveryRig is a codex rig whose threads run strict-safe (no
// approval, no network, read-only), the only permissions the default
// gate delivers into. top goes before the config's sections, cli into
// its [cli] section.
func newDeliveryRig(t *testing.T, top, cli string) *codexRig {
	t.Helper()
	r := newCodexRig(t, top+deliveryConfig+cli)
	r.codexTop(`approval_policy = "never"` + "\n" + `sandbox_mode = "read-only"` + "\n")
	return r
}

// codexTop puts top-level keys at the head of the Codex home's
// config.toml (after a table they would belong to it).
func (r *codexRig) codexTop(keys string) {
	r.t.Helper()
	p := filepath.Join(r.codexHome, "config.toml")
	b, err := os.ReadFile(p)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, append([]byte(keys), b...), 0o600); err != nil {
		r.t.Fatal(err)
	}
}

// foreground binds a thread made earlier and runs its TUI until it takes
// input; the session is live.
func (r *codexRig) foreground(mark string) (string, *terminal) {
	r.t.Helper()
	thread := r.execThread(mark)
	tm := r.startTerminal(r.project, "cli", "run", "--bind-thread-id", thread)
	waitFor(r.t, "the session to be live", codextest.Guard, func() bool {
		for _, s := range r.sessions() {
			if s.Thread == thread && s.State == "live" {
				return true
			}
		}
		return false
	})
	tm.waitText("an earlier conversation", codextest.Guard) // resumed: the history shows
	tm.waitText("Ask Codex", codextest.Guard)
	return thread, tm
}

// userTurn types a prompt into the TUI as its user would and waits until
// the model got it. A loaded machine may take the Enter before the TUI
// is ready for it; the text then stays in the composer, and Enter is
// pressed again (on an empty composer it does nothing).
func (r *codexRig) userTurn(tm *terminal, prompt, marker string) {
	r.t.Helper()
	tm.typeLine(prompt)
	deadline := time.Now().Add(codextest.Guard)
	for r.model.Count(marker) == 0 {
		if time.Now().After(deadline) {
			r.t.Fatalf("the user's turn %q never reached the model", marker)
		}
		for i := 0; i < 50 && r.model.Count(marker) == 0; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		if r.model.Count(marker) == 0 {
			io.WriteString(tm.pty, "\r")
		}
	}
}

// complete submits a cli job for thread and completes it with summary.
func (r *codexRig) complete(thread, summary string) string {
	r.t.Helper()
	id := r.submit(thread)
	r.ok(nil, "job", "complete", "--job-id", id, "--summary", summary)
	return id
}

// batchOf inspects the thread's only batch.
func (r *codexRig) batchOf(thread string) inspection {
	r.t.Helper()
	bs := r.batches(thread)
	if len(bs) != 1 {
		r.t.Fatalf("thread %s has %d batches, want 1", thread, len(bs))
	}
	var in inspection
	r.ok(&in, "batch", "inspect", "--batch-id", bs[0].ID)
	return in
}

func (r *codexRig) waitBatch(thread, what string, cond func(inspection) bool) inspection {
	r.t.Helper()
	var in inspection
	waitFor(r.t, what, codextest.Guard, func() bool {
		if len(r.batches(thread)) != 1 {
			return false
		}
		in = r.batchOf(thread)
		return cond(in)
	})
	return in
}

func closedDelivered(in inspection) bool { return in.Batch.CloseReason == "delivered" }
func parked(in inspection) bool          { return in.Batch.Replay == "manual_resolution_only" }

// Delivered: the continuation reaches the model once, the TUI shows it
// (the prompt and the model's answer), the batch closes delivered, and
// the head attempt carries every CLI field of the seed.
func TestCLIDelivery_Delivered(t *testing.T) {
	t.Parallel()
	r := newDeliveryRig(t, "", "")
	thread, tm := r.foreground("[mark:earlier]")
	r.complete(thread, "[mark:d1] the CI run passed")
	in := r.waitBatch(thread, "the batch to close delivered", closedDelivered)
	h := in.Head
	if h == nil || h.Marker == "" || h.TurnID == "" || h.ManagedSessionID != r.session(thread).ID || h.SessionEpoch != 1 ||
		h.RPCKind != "turn_start" || h.AcceptedAt == nil || h.ObservationDeadline == nil || h.LastTurnEvent == nil ||
		*h.LastTurnEvent != "turn_completed" || h.LastTurnEventAt == nil || in.Batch.Count != 1 {
		t.Fatalf("delivered batch %+v, head %+v", in.Batch, h)
	}
	if n := r.model.Count(h.Marker); n != 1 {
		t.Fatalf("the model got the marker %s in %d requests, want 1", h.Marker, n)
	}
	if r.threadOfMarker(h.Marker) != thread {
		t.Fatalf("the continuation went to thread %s, not %s", r.threadOfMarker(h.Marker), thread)
	}
	// The fresh permission reading Prepare took is recorded in the
	// barrier's append: right before accept_pending, decided at the same
	// time.
	all := r.events("*")
	for i, e := range all {
		if e.Type != "attempt.accept_pending" {
			continue
		}
		var at [2]struct {
			RecordedAt string `json:"recorded_at"`
		}
		prev := all[max(i-1, 0)]
		_ = json.Unmarshal([]byte(prev.line), &at[0])
		_ = json.Unmarshal([]byte(e.line), &at[1])
		if i == 0 || prev.Type != "session.permission_observed" || prev.Seq != e.Seq-1 || at[0].RecordedAt != at[1].RecordedAt {
			t.Fatalf("the barrier %s (seq %d) is not recorded with the reading: the event before it is %s (seq %d) at %s",
				at[1].RecordedAt, e.Seq, prev.Type, prev.Seq, at[0].RecordedAt)
		}
	}
	tm.waitText("ECHO:["+h.Marker+"]", codextest.Guard) // the TUI shows the continuation and its answer (the screen capture loses the spaces the TUI moves the cursor over)
	if !strings.Contains(tm.screen(), "[mark:d1] the CI run passed") {
		t.Fatalf("the TUI does not show the job's summary:\n%s", tail(tm.screen(), 3000))
	}
	if path := os.Getenv("CBTH_TUI_CAPTURE"); path != "" {
		// The README's terminal capture: CBTH_TUI_CAPTURE=FILE go test
		// ./cmd/cbth -run TestCLIDelivery_Delivered
		tm.mu.Lock()
		raw := tm.out.Bytes()
		tm.mu.Unlock()
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if code := tm.quit(); code != 0 {
		t.Fatalf("cbth cli run exited %d", code)
	}

	// No foreground: the next result waits (the session is detached),
	// and goes once `cbth cli run` attaches the thread again.
	r.complete(thread, "[mark:d2] the second result")
	var second inspection
	waitFor(t, "the second batch to wait for the session", codextest.Guard, func() bool {
		bs := r.batches(thread)
		if len(bs) != 2 {
			return false
		}
		r.ok(&second, "batch", "inspect", "--batch-id", bs[1].ID)
		return strings.Contains(second.Gate, "is detached")
	})
	if second.Head != nil || r.model.Count("[mark:d2]") != 0 {
		t.Fatalf("delivered without a foreground: %+v", second)
	}
	tm = r.startTerminal(r.project, "cli", "run", "--bind-thread-id", thread)
	second = r.nthBatch(thread, 2, "the second batch to close delivered", closedDelivered)
	if r.model.Count(second.Head.Marker) != 1 || r.model.Count("[mark:d2]") != 1 {
		t.Fatalf("second delivery: %+v; the model saw it %d times", second, r.model.Count(second.Head.Marker))
	}
	// The prompt is drawn while the session still resumes, and a ^C then
	// interrupts the resume (exit 130): quit once the delivered turn is
	// on the screen.
	tm.waitText("[mark:d2]", codextest.Guard)
	if code := tm.quit(); code != 0 {
		t.Fatalf("cbth cli run exited %d", code)
	}
}

// appServer connects a client of the test's own to the home's shared
// app-server (as another TUI would be).
func (r *codexRig) appServer() *appserver.Client {
	r.t.Helper()
	return codextest.Connect(r.t, filepath.Join(r.root, "run", "codex", "codex.sock"))
}

const continuation = "cbth: background job results"

// The user's own turn is running: the delivery waits (no attempt, the gate
// says why), then goes once the thread is idle.
func TestCLIDelivery_WaitsForTheUsersTurn(t *testing.T) {
	t.Parallel()
	r := newDeliveryRig(t, "", "")
	defer r.model.Release()
	thread, tm := r.foreground("[mark:earlier]")
	r.userTurn(tm, "[fake:hang] [mark:user] a long task of the user's", "[mark:user]")
	// The result file is small text: its bytes go into the prompt.
	small := filepath.Join(t.TempDir(), "result.txt")
	if err := os.WriteFile(small, []byte("[mark:payload] 3 tests passed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.ok(nil, "job", "complete", "--job-id", r.submit(thread), "--summary", "[mark:w1] done while the user worked", "--result-file", small)
	in := r.waitBatch(thread, "the gate to hold the batch", func(in inspection) bool { return strings.Contains(in.Gate, "a turn runs on the thread") })
	if in.Head != nil || r.model.Count(continuation) != 0 {
		t.Fatalf("delivered into a running turn: head %+v, %d model calls", in.Head, r.model.Count(continuation))
	}
	r.model.Release() // the user's turn ends; the thread goes idle
	in = r.waitBatch(thread, "the batch to close delivered", closedDelivered)
	if n := r.model.Count(in.Head.Marker); n != 1 || r.model.Count("[mark:payload] 3 tests passed") != 1 {
		t.Fatalf("the model got the marker in %d requests, want 1, and the result's bytes %d times", n, r.model.Count("[mark:payload]"))
	}
	if code := tm.quit(); code != 0 {
		t.Fatalf("cbth cli run exited %d", code)
	}
}

// A result ready before the new thread's first turn: `cbth cli run
// --new-thread`, nothing typed, a job of the thread completes. Codex has
// no rollout of the thread yet, so its permissions cannot be read: the
// batch waits with the gate reason awaiting_first_turn while the session
// stays live (never stale), and goes once, right after the user's first
// turn; the thread then goes on.
func TestCLIDelivery_NewThreadWaitsForItsFirstTurn(t *testing.T) {
	t.Parallel()
	r := newDeliveryRig(t, "", "")
	tm := r.startTerminal(r.project, "cli", "run", "--new-thread")
	var thread string
	waitFor(t, "the new thread's session", codextest.Guard, func() bool {
		l := r.sessions()
		if len(l) == 1 && l[0].State == "live" {
			thread = l[0].Thread
		}
		return thread != ""
	})
	tm.waitText("Ask Codex", codextest.Guard)
	r.complete(thread, "[mark:n1] done before the first turn")
	in := r.waitBatch(thread, "the gate to hold the batch", func(in inspection) bool { return strings.Contains(in.Gate, "awaiting_first_turn") })
	var head struct {
		Gate string `json:"delivery_gate"`
	}
	r.ok(&head, "batch", "inspect-head", "--source-thread-id", thread)
	if in.Head != nil || r.model.Count("[mark:n1]") != 0 || !strings.Contains(head.Gate, "awaiting_first_turn") {
		t.Fatalf("before the first turn: head %+v, inspect-head gate %q, the model saw the result %d times", in.Head, head.Gate, r.model.Count("[mark:n1]"))
	}
	if s := r.session(thread); s.State != "live" {
		t.Fatalf("the session went %s before the first turn", s.State)
	}

	r.userTurn(tm, "[mark:first] the user's first turn", "[mark:first]")
	in = r.waitBatch(thread, "the batch to close delivered", closedDelivered)
	if n := r.model.Count(in.Head.Marker); n != 1 || r.model.Count("[mark:n1]") != 1 || r.threadOfMarker(in.Head.Marker) != thread {
		t.Fatalf("the model got the marker in %d requests (want 1), the summary %d times, in thread %s (want %s)",
			n, r.model.Count("[mark:n1]"), r.threadOfMarker(in.Head.Marker), thread)
	}
	tm.waitText("ECHO:["+in.Head.Marker+"]", codextest.Guard)

	// The thread goes on: the user types again, in the same thread.
	r.userTurn(tm, "[mark:after] and on", "[mark:after]")
	if r.threadOfMarker("[mark:after]") != thread || r.model.Count(in.Head.Marker) != 1 {
		t.Fatalf("the user's next turn went to %s (want %s); the continuation was seen %d times", r.threadOfMarker("[mark:after]"), thread, r.model.Count(in.Head.Marker))
	}
	if s := r.session(thread); s.State != "live" || len(r.events("session.stale")) != 0 {
		t.Fatalf("session %+v, stale events %d", s, len(r.events("session.stale")))
	}
	if code := tm.quit(); code != 0 {
		t.Fatalf("cbth cli run exited %d", code)
	}
}

// The delivered turn is interrupted: parked for manual resolution, never
// resent; the head attempt says why.
func TestCLIDelivery_InterruptedTurnParks(t *testing.T) {
	t.Parallel()
	r := newDeliveryRig(t, "", "")
	defer r.model.Release()
	thread, tm := r.foreground("[mark:earlier]")
	r.complete(thread, "[fake:hang] [mark:i1] a result whose turn will be interrupted")
	in := r.waitBatch(thread, "the turn to be accepted", func(in inspection) bool { return in.Head != nil && in.Head.TurnID != "" })
	waitFor(t, "the continuation to reach the model", codextest.Guard, func() bool { return r.model.Count(in.Head.Marker) == 1 })
	// inspect-head shows every CLI field of the seed while the turn is
	// observed.
	var raw struct {
		Head map[string]any `json:"head_attempt"`
	}
	r.ok(&raw, "batch", "inspect-head", "--source-thread-id", thread)
	for _, k := range []string{"delivery_turn_id", "managed_session_id", "session_epoch", "delivery_observation_state",
		"delivery_observation_deadline", "delivery_accepted_at", "last_observed_turn_event", "last_observed_turn_event_at"} {
		if v, ok := raw.Head[k]; !ok || v == nil {
			t.Errorf("inspect-head: %s is %v", k, v)
		}
	}
	if raw.Head["delivery_observation_state"] != "tracking" || raw.Head["managed_session_id"] != r.session(thread).ID {
		t.Errorf("inspect-head while tracking: %v", raw.Head)
	}
	c := r.appServer()
	ctx, cancel := context.WithTimeout(context.Background(), codextest.Guard)
	defer cancel()
	if err := c.TurnInterrupt(ctx, appserver.TurnInterruptParams{ThreadID: thread, TurnID: in.Head.TurnID}); err != nil {
		t.Fatal(err)
	}
	in = r.waitBatch(thread, "the batch to park", parked)
	if in.Head.State != "abandoned" || in.Head.LastTurnEvent == nil || *in.Head.LastTurnEvent != "turn_interrupted" || in.Batch.State == "closed" {
		t.Fatalf("interrupted delivery: batch %+v head %+v", in.Batch, in.Head)
	}
	if n := r.model.Count(in.Head.Marker); n != 1 {
		t.Fatalf("the model got the marker in %d requests, want 1", n)
	}
	if code := tm.quit(); code != 0 {
		t.Fatalf("cbth cli run exited %d", code)
	}
}

// The model hangs past the observation deadline: the attempt expires and
// the batch parks (a short observation_window; the idle timeout under it).
func TestCLIDelivery_ObservationDeadlineExpires(t *testing.T) {
	t.Parallel()
	r := newDeliveryRig(t, "idle_timeout = \"1s\"\n", "observation_window = \"2s\"\n")
	defer r.model.Release()
	thread, tm := r.foreground("[mark:earlier]")
	r.complete(thread, "[fake:hang] [mark:e1] a result whose turn never ends")
	r.waitBatch(thread, "the turn to be accepted", func(in inspection) bool { return in.Head != nil && in.Head.TurnID != "" })
	// The foreground goes (killed: ^C would interrupt the turn); the
	// observed turn alone keeps the daemon up past its idle timeout until
	// the deadline. A daemon that had left would have parked the attempt
	// as lost on its next start, not expired.
	syscall.Kill(-tm.cmd.Process.Pid, syscall.SIGKILL)
	<-tm.done
	in := r.waitBatch(thread, "the batch to park", parked)
	if in.Head.ObservationState != "expired" || in.Head.State != "abandoned" || in.Head.TurnID == "" || len(r.events("appserver.started")) != 1 {
		t.Fatalf("expired delivery: batch %+v head %+v", in.Batch, in.Head)
	}
	if n := r.model.Count(in.Head.Marker); n != 1 {
		t.Fatalf("the model got the marker in %d requests, want 1", n)
	}
}

// The app-server is killed mid-turn: the epoch advances, the accepted
// attempt is abandoned and its batch parked; the model saw the marker once
// (no resend on the new instance).
func TestCLIDelivery_AppServerKilledMidTurn(t *testing.T) {
	t.Parallel()
	r := newDeliveryRig(t, "", "")
	defer r.model.Release()
	thread, tm := r.foreground("[mark:earlier]")
	r.complete(thread, "[fake:hang] [mark:k1] a result whose app-server dies")
	in := r.waitBatch(thread, "the turn to be accepted", func(in inspection) bool { return in.Head != nil && in.Head.TurnID != "" })
	waitFor(t, "the continuation to reach the model", codextest.Guard, func() bool { return r.model.Count(in.Head.Marker) == 1 })
	started := r.events("appserver.started")
	if err := syscall.Kill(int(started[len(started)-1].Payload["pid"].(float64)), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	in = r.waitBatch(thread, "the batch to park", parked)
	if in.Head.State != "abandoned" || in.Head.SessionEpoch != 1 || r.session(thread).Epoch != 2 {
		t.Fatalf("after kill -9: batch %+v head %+v session %+v", in.Batch, in.Head, r.session(thread))
	}
	r.model.Release()
	if n := r.model.Count(in.Head.Marker); n != 1 {
		t.Fatalf("the model got the marker in %d requests, want 1", n)
	}
	tm.quit()
}

// The thread's permissions widen (network) between two deliveries: the
// first goes, the second is left to the operator with the reason, and the
// drift is recorded as an audit event.
func TestCLIDelivery_PermissionDriftGoesToTheOperator(t *testing.T) {
	t.Parallel()
	r := newDeliveryRig(t, "", "")
	thread, tm := r.foreground("[mark:earlier]")
	r.complete(thread, "[mark:p1] first result")
	r.waitBatch(thread, "the first batch to close delivered", closedDelivered)

	// Another client of the app-server runs a turn that gives the thread
	// network access (turn/start settings persist for later turns).
	c := r.appServer()
	ctx, cancel := context.WithTimeout(context.Background(), codextest.Guard)
	defer cancel()
	if _, err := c.ThreadResume(ctx, appserver.ThreadResumeParams{ThreadID: thread, ExcludeTurns: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TurnStart(ctx, appserver.TurnStartParams{ThreadID: thread, Input: []appserver.Input{appserver.TextInput("[mark:widen] go online")},
		SandboxPolicy: json.RawMessage(`{"type":"readOnly","networkAccess":true}`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the widening turn to end", codextest.Guard, func() bool {
		if r.model.Count("[mark:widen]") != 1 {
			return false
		}
		th, err := c.ThreadRead(ctx, appserver.ThreadReadParams{ThreadID: thread})
		return err == nil && th.Status.Type == appserver.ThreadIdle
	})

	r.complete(thread, "[mark:p2] second result")
	var second inspection
	waitFor(t, "the second batch to go to the operator", codextest.Guard, func() bool {
		bs := r.batches(thread)
		if len(bs) != 2 {
			return false
		}
		r.ok(&second, "batch", "inspect", "--batch-id", bs[1].ID)
		return second.Batch.Replay == "manual_resolution_only"
	})
	if r.model.Count("[mark:p2]") != 0 || second.Head != nil {
		t.Fatalf("the second batch was delivered: %+v", second)
	}
	var reason struct {
		Batch struct {
			Reason string `json:"replay_policy_reason"`
		} `json:"batch"`
	}
	r.ok(&reason, "batch", "inspect", "--batch-id", second.Batch.ID)
	if !strings.Contains(reason.Batch.Reason, "wider than the session's startup cap") {
		t.Fatalf("parked for %q", reason.Batch.Reason)
	}
	drift := r.events("session.permission_drifted")
	if len(drift) != 1 || drift[0].Payload["direction"] != "widened" {
		t.Fatalf("drift audit events %+v", drift)
	}
	if code := tm.quit(); code != 0 {
		t.Fatalf("cbth cli run exited %d", code)
	}
}

// Faults on the app-server's socket (faultcodex in front of the real
// Codex), one thread, one batch after another: a turn/start answered -32001 (overloaded) is a proven reject,
// retried after the back-off without counting an attempt; a turn/start
// whose answer is lost is proven accepted through its marker, exactly one
// turn carrying it, and the model got it once; a turn/start that never
// reached Codex is proven not accepted once the thread stayed idle
// without the marker, and retried.
func TestCLIDelivery_FaultsOnTheSocket(t *testing.T) {
	t.Parallel()
	r := newFaultRig(t, "acceptance_timeout = \"1s\"\nsteer = true\n")
	thread, tm := r.foreground("[mark:earlier]")

	codextest.SetFaults(t, r.codex, codextest.Fault{Method: "turn/start", Action: "error", Code: -32001, Message: "Server overloaded; retry later.", Count: 1})
	// Its result is over the inline limit: named, never pasted.
	big := filepath.Join(t.TempDir(), "big.log")
	if err := os.WriteFile(big, []byte("[mark:big]"+strings.Repeat("x", 20<<10)), 0o600); err != nil {
		t.Fatal(err)
	}
	r.ok(nil, "job", "complete", "--job-id", r.submit(thread), "--summary", "[mark:f1] first result", "--result-file", big)
	in := r.waitBatch(thread, "the first batch to close delivered", closedDelivered)
	if in.Batch.Count != 1 || in.Head.Rejected != 1 || r.model.Count(in.Head.Marker) != 1 || r.model.Count("[mark:f1]") != 1 {
		t.Fatalf("after -32001: batch %+v head %+v; the model saw the batch %d times", in.Batch, in.Head, r.model.Count("[mark:f1]"))
	}
	if r.model.Count("[mark:big]") != 0 || r.model.Count("is not pasted here; it is at") != 1 {
		t.Fatalf("a result over the inline limit was pasted (%d) or not named (%d)", r.model.Count("[mark:big]"), r.model.Count("is not pasted here"))
	}

	codextest.SetFaults(t, r.codex, codextest.Fault{Method: "turn/start", Action: "drop_response", Count: 1})
	r.complete(thread, "[mark:f2] second result")
	var second inspection
	waitFor(t, "the second batch to close delivered", codextest.Guard, func() bool {
		bs := r.batches(thread)
		if len(bs) != 2 {
			return false
		}
		r.ok(&second, "batch", "inspect", "--batch-id", bs[1].ID)
		return closedDelivered(second)
	})
	if second.Batch.Count != 1 || second.Head.Rejected != 0 || second.Head.TurnID == "" || r.model.Count(second.Head.Marker) != 1 {
		t.Fatalf("after a lost answer: batch %+v head %+v; the model saw the marker %d times", second.Batch, second.Head, r.model.Count(second.Head.Marker))
	}
	// A turn/start lost on its way: no answer, and the thread stays idle
	// with no turn carrying the marker, so it is proven not accepted and
	// retried (a new request id and marker), without counting.
	codextest.SetFaults(t, r.codex, codextest.Fault{Method: "turn/start", Action: "drop_request", Count: 1})
	r.complete(thread, "[mark:f3] third result")
	var third inspection
	waitFor(t, "the third batch to close delivered", codextest.Guard, func() bool {
		bs := r.batches(thread)
		if len(bs) != 3 {
			return false
		}
		r.ok(&third, "batch", "inspect", "--batch-id", bs[2].ID)
		return closedDelivered(third)
	})
	if third.Batch.Count != 1 || third.Head.Rejected != 1 || r.model.Count("[mark:f3]") != 1 {
		t.Fatalf("after a lost request: batch %+v head %+v; the model saw the batch %d times", third.Batch, third.Head, r.model.Count("[mark:f3]"))
	}
	if got := codextest.FaultsApplied(r.codex); len(got) != 3 {
		t.Fatalf("faults applied: %q, want the -32001 answer, one dropped answer and one dropped request", got)
	}

	// A brief disconnection of the daemon from the same app-server while
	// the delivered turn runs: the turn ends while the daemon cannot hear
	// it; on the new connection the target looks the turn up
	// (thread/turns/list) and the batch closes delivered, on the same
	// epoch.
	codextest.SetFaults(t, r.codex, codextest.Fault{Method: "turn/start", Action: "disconnect", Count: 1})
	r.complete(thread, "[fake:slow] [mark:f4] a result whose turn ends while the daemon is away")
	fourth := r.nthBatch(thread, 4, "the fourth batch to close delivered", closedDelivered)
	if fourth.Head.SessionEpoch != 1 || r.session(thread).Epoch != 1 || len(r.events("appserver.started")) != 1 || r.model.Count(fourth.Head.Marker) != 1 {
		t.Fatalf("after a reconnection: batch %+v head %+v session %+v", fourth.Batch, fourth.Head, r.session(thread))
	}

	// turn/steer ([cli] steer): a read-only batch goes into the user's
	// running turn once it is classified read_only_low_risk (a
	// strict-safe thread, not waiting on an approval); a steer answered
	// with an error (here the proxy answers the first one "expected active
	// turn id", as Codex does when the turn changed) is a proven reject,
	// retried without counting; the steered turn's completion closes the
	// batch delivered.
	defer r.model.Release()
	r.userTurn(tm, "[fake:hang] [mark:user] a long task of the user's", "[mark:user]")
	codextest.SetFaults(t, r.codex, codextest.Fault{Method: "turn/steer", Action: "error", Code: -32600,
		Message: "expected active turn id `01a20000-0000-7000-8000-000000000000` but found another", Count: 1})
	id := r.submit(thread, "--delivery-read-only", "true", "--delivery-requires-approval", "false",
		"--delivery-requires-network", "false", "--delivery-requires-write-access", "false")
	r.ok(nil, "job", "complete", "--job-id", id, "--summary", "[mark:s1] a read-only result")
	in = r.nthBatch(thread, 5, "the steered batch to close delivered", closedDelivered)
	if in.Head.RPCKind != "turn_steer" || in.Head.Rejected != 1 || in.Batch.Count != 1 || r.model.Count(in.Head.Marker) != 1 {
		t.Fatalf("steered delivery: batch %+v head %+v; the model saw the marker %d times", in.Batch, in.Head, r.model.Count(in.Head.Marker))
	}
	// The model saw the steer as the user's own turn asked again.
	if u, m := r.turnOfMarker("[mark:user]"), r.turnOfMarker(in.Head.Marker); u == "" || u != m || m != in.Head.TurnID {
		t.Fatalf("user's turn %s, steered request's turn %s, delivery_turn_id %s", u, m, in.Head.TurnID)
	}
	if got := codextest.FaultsApplied(r.codex); len(got) != 5 {
		t.Fatalf("faults applied: %q", got)
	}
	if code := tm.quit(); code != 0 {
		t.Fatalf("cbth cli run exited %d", code)
	}
}

// nthBatch waits until the thread's n-th batch satisfies cond.
func (r *codexRig) nthBatch(thread string, n int, what string, cond func(inspection) bool) inspection {
	r.t.Helper()
	var in inspection
	waitFor(r.t, what, codextest.Guard, func() bool {
		bs := r.batches(thread)
		if len(bs) < n {
			return false
		}
		r.ok(&in, "batch", "inspect", "--batch-id", bs[n-1].ID)
		return cond(in)
	})
	return in
}

// newFaultRig is a delivery rig whose codex is faultcodex in front of the
// pinned binary.
func newFaultRig(t *testing.T, cli string) *codexRig {
	t.Helper()
	r := newDeliveryRig(t, "", cli)
	r.codex = codextest.FaultCodex(t, r.codex)
	cfg := fmt.Sprintf("codex_binary = %q\ncodex_home = %q\n%s", r.codex, r.codexHome, deliveryConfig+cli)
	if err := os.WriteFile(filepath.Join(r.root, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

// turnOfMarker is the turn of the first model call prompted by marker
// (Codex names it in the request's client_metadata).
func (r *codexRig) turnOfMarker(marker string) string {
	for _, q := range r.model.Requests() {
		if q.Title || !strings.Contains(q.UserText, marker) {
			continue
		}
		var b struct {
			Meta struct {
				TurnID string `json:"turn_id"`
			} `json:"client_metadata"`
		}
		if json.Unmarshal(q.Body, &b) == nil {
			return b.Meta.TurnID
		}
	}
	return ""
}
