package main_test

import (
	"bufio"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Delivery scenarios through the real binary, on the debug target, with a
// manual clock: time moves only when the test says so, so every window is
// crossed exactly.

const testClock = "2026-11-21T10:00:00Z"

func deliveryHome(t *testing.T, config string) *homeDir {
	h := newHome(t, "CBTH_TEST_CLOCK="+testClock)
	os.MkdirAll(h.root, 0o700)
	base := "[delivery]\nmax_wait_window = \"10s\"\nmin_send_interval = \"0s\"\ncooldown = \"30s\"\nmax_delivery_attempts = 3\nredelivery_window = \"1h\"\neligible_backoff = \"1m\"\n"
	if err := os.WriteFile(filepath.Join(h.root, "config.toml"), []byte(mergeTOML(base, config)), 0o600); err != nil {
		t.Fatal(err)
	}
	return h
}

// mergeTOML overrides keys of the [delivery] table in base with those in
// over (one "key = value" per line; a line starting with "!" goes before
// the table, for top-level keys).
func mergeTOML(base, over string) string {
	lines := strings.Split(strings.TrimSpace(base), "\n")
	var top []string
	for _, l := range strings.Split(strings.TrimSpace(over), "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if strings.HasPrefix(l, "!") {
			top = append(top, strings.TrimPrefix(l, "!"))
			continue
		}
		key := strings.TrimSpace(strings.SplitN(l, "=", 2)[0])
		replaced := false
		for i, b := range lines {
			if strings.HasPrefix(b, key+" ") {
				lines[i], replaced = l, true
			}
		}
		if !replaced {
			lines = append(lines, l)
		}
	}
	return strings.Join(append(top, lines...), "\n") + "\n"
}

func (h *homeDir) ready(thread string) string {
	h.t.Helper()
	id := h.submitTo("debug", thread)
	h.ok(nil, "job", "complete", "--job-id", id, "--summary", "done "+id[len(id)-4:])
	return id
}

func (h *homeDir) submitTo(target, thread string) string {
	h.t.Helper()
	var res struct {
		JobID string `json:"job_id"`
	}
	h.ok(&res, "job", "submit", "--target", target, "--thread-id", thread, "--task-kind", "ci", "--summary", "work")
	return res.JobID
}

func (h *homeDir) advance(d string) { h.t.Helper(); h.ok(nil, "debug", "clock", "--advance", d) }

func (h *homeDir) behave(thread, b string) {
	h.t.Helper()
	h.ok(nil, "debug", "target", "--thread-id", thread, b)
}

type delivered struct {
	BatchID    string   `json:"batch_id"`
	AttemptID  string   `json:"attempt_id"`
	Generation uint64   `json:"generation"`
	JobIDs     []string `json:"job_ids"`
	Outcome    string   `json:"outcome"`
	Behaviour  string   `json:"behaviour"`
}

// deliveries reads the debug target's file for a thread.
func (h *homeDir) deliveries(thread string) []delivered {
	f, err := os.Open(filepath.Join(h.root, "debug", "threads", url.PathEscape(thread)+".jsonl"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	defer f.Close()
	var out []delivered
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var d delivered
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			h.t.Fatalf("bad debug line %q", sc.Text())
		}
		out = append(out, d)
	}
	return out
}

type batchView struct {
	ID          string   `json:"batch_id"`
	State       string   `json:"state"`
	JobIDs      []string `json:"job_ids"`
	Replay      string   `json:"replay_policy"`
	Count       int      `json:"delivery_attempt_count"`
	Generation  uint64   `json:"generation"`
	CloseReason string   `json:"close_reason"`
	Head        bool     `json:"head"`
}

func (h *homeDir) batches(thread string) []batchView {
	h.t.Helper()
	var list []batchView
	h.ok(&list, "batch", "list", "--thread-id", thread)
	return list
}

func TestDelivery_FIFOAndBatchLimits(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "max_jobs_per_batch = 2")
	h.behave("T", "accept") // keep each batch open so order is observable
	a := h.ready("T")
	if got := h.deliveries("T"); len(got) != 0 {
		t.Fatalf("delivered inside the merge window: %+v", got)
	}
	b := h.ready("T") // merges into a's batch, which is now full: it goes at once
	c := h.ready("T") // opens the next batch behind it
	bs := h.batches("T")
	if len(bs) != 2 || len(bs[0].JobIDs) != 2 || bs[0].JobIDs[0] != a || bs[0].JobIDs[1] != b || bs[1].JobIDs[0] != c {
		t.Fatalf("batches %+v; want [a b] then [c]", bs)
	}
	got := h.deliveries("T")
	if len(got) != 1 || got[0].BatchID != bs[0].ID || len(got[0].JobIDs) != 2 {
		t.Fatalf("deliveries %+v, want one delivery of the full first batch", got)
	}
	h.advance("11s")
	// One in-flight attempt per thread: the second batch waits while the
	// first is open, even once its own merge window has passed.
	h.advance("5s")
	if got := h.deliveries("T"); len(got) != 1 {
		t.Fatalf("second batch delivered while the first is open: %+v", got)
	}
	h.behave("T", "deliver")
	h.advance("30s") // cooldown over: redelivered, completes, next batch goes
	got = h.deliveries("T")
	if len(got) != 3 || got[1].BatchID != bs[0].ID || got[1].Generation != 2 || got[2].BatchID != bs[1].ID {
		t.Fatalf("deliveries %+v; want first batch twice (gen 1, 2) then the second", got)
	}
	for _, bv := range h.batches("T") {
		if bv.State != "closed" || bv.CloseReason != "delivered" {
			t.Fatalf("batch %+v not delivered", bv)
		}
	}
}

func TestDelivery_MaxTotalBytesSplits(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "max_total_bytes = 20")
	h.ready("T")
	h.ready("T")
	if bs := h.batches("T"); len(bs) != 2 {
		t.Fatalf("%d batches, want 2 (the byte limit stops the merge)", len(bs))
	}
}

func TestDelivery_MinSendInterval(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "min_send_interval = \"60s\"\nmax_wait_window = \"0s\"")
	h.ready("T")
	if n := len(h.deliveries("T")); n != 1 {
		t.Fatalf("%d deliveries, want 1", n)
	}
	h.ready("T") // the next batch is head at once but must wait 60s from the last send
	h.advance("30s")
	if n := len(h.deliveries("T")); n != 1 {
		t.Fatalf("second delivery 30s after the first; the interval is 60s")
	}
	h.advance("31s")
	if n := len(h.deliveries("T")); n != 2 {
		t.Fatalf("%d deliveries after the interval, want 2", n)
	}
	// Another thread is not held back by T's interval.
	h.ready("U")
	if n := len(h.deliveries("U")); n != 1 {
		t.Fatalf("thread U: %d deliveries, want 1", n)
	}
}

func TestDelivery_CooldownRedeliveryAndMaxAttempts(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "max_wait_window = \"0s\"\nmax_delivery_attempts = 2")
	h.behave("T", "accept")
	job := h.ready("T")
	h.advance("10s") // inside the cooldown: nothing new
	if n := len(h.deliveries("T")); n != 1 {
		t.Fatalf("%d deliveries during cooldown, want 1", n)
	}
	h.advance("21s")
	got := h.deliveries("T")
	if len(got) != 2 || got[1].Generation != 2 || got[1].AttemptID == got[0].AttemptID {
		t.Fatalf("after cooldown: %+v, want a second attempt (generation 2)", got)
	}
	h.advance("31s")
	bs := h.batches("T")
	if len(h.deliveries("T")) != 2 || bs[0].State != "closed" || bs[0].CloseReason != "max_attempts_exhausted" || bs[0].Count != 2 {
		t.Fatalf("after the second cooldown: %+v, want closed max_attempts_exhausted with 2 counted", bs)
	}
	r := h.run("wait", "--job-id", job, "--json")
	if r.code == 0 {
		t.Fatalf("wait exited 0 for a batch closed as max_attempts_exhausted: %s", r.stdout)
	}
}

func TestDelivery_RejectBacksOffAndWindowExhausts(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "max_wait_window = \"0s\"\nredelivery_window = \"5m\"")
	h.behave("T", "reject")
	h.ready("T")
	var head struct {
		Batch struct {
			Count         int    `json:"delivery_attempt_count"`
			EligibleAfter string `json:"eligible_after"`
		} `json:"batch"`
		Gate string `json:"delivery_gate"`
	}
	h.ok(&head, "batch", "inspect-head", "--source-thread-id", "T")
	if head.Batch.Count != 0 || head.Batch.EligibleAfter == "" || !strings.Contains(head.Gate, "backing off") {
		t.Fatalf("after a reject: %+v; want no count, eligible_after set, gate backing off", head)
	}
	h.advance("61s") // retried once the back-off ends, rejected again
	if n := len(h.deliveries("T")); n != 0 {
		t.Fatalf("a rejected delivery was recorded as received: %d", n)
	}
	h.advance("5m")
	bs := h.batches("T")
	if bs[0].State != "closed" || bs[0].CloseReason != "redelivery_window_exhausted" || bs[0].Count != 0 {
		t.Fatalf("after the window: %+v", bs[0])
	}
}

func TestDelivery_UnknownParksUntilOperatorCloses(t *testing.T) {
	t.Parallel()
	hookOut := filepath.Join(t.TempDir(), "hook.out")
	h := deliveryHome(t, "!park_hook = [\"sh\", \"-c\", \"echo $CBTH_BATCH_ID $CBTH_THREAD_ID >> "+hookOut+"\"]\nmax_wait_window = \"0s\"")
	h.behave("T", "unknown")
	job := h.ready("T")
	second := h.ready("T")
	bs := h.batches("T")
	if bs[0].Replay != "manual_resolution_only" || bs[0].State == "closed" {
		t.Fatalf("after an unknown outcome: %+v, want the batch parked", bs[0])
	}
	var st struct {
		Parked int `json:"parked_batches"`
	}
	h.ok(&st, "daemon", "status")
	if st.Parked != 1 {
		t.Fatalf("daemon status shows %d parked batches, want 1", st.Parked)
	}
	h.behave("T", "deliver")
	h.advance("10m") // no automatic replay once parked, whatever the time
	if n := len(h.deliveries("T")); n != 1 {
		t.Fatalf("%d deliveries; a parked batch must not be replayed", n)
	}
	if b, _ := os.ReadFile(hookOut); !strings.Contains(string(b), bs[0].ID+" T") {
		t.Fatalf("park hook output %q does not name the batch", b)
	}
	var ins struct {
		Batch struct {
			Notified bool `json:"park_notified"`
		} `json:"batch"`
	}
	h.ok(&ins, "batch", "inspect", "--batch-id", bs[0].ID)
	if !ins.Batch.Notified {
		t.Fatal("the park hook run is not recorded on the batch")
	}
	var closed struct {
		Outcome string `json:"outcome"`
		BatchID string `json:"batch_id"`
	}
	h.ok(&closed, "batch", "close-head", "--source-thread-id", "T", "--reason", "operator_closed_unconfirmed", "--batch-id", bs[0].ID)
	if closed.Outcome != "closed" || closed.BatchID != bs[0].ID {
		t.Fatalf("close-head: %+v", closed)
	}
	h.ok(&closed, "batch", "close-head", "--source-thread-id", "T", "--reason", "operator_closed_unconfirmed", "--batch-id", bs[0].ID)
	if closed.Outcome != "already_closed" {
		t.Fatalf("repeated close-head: %+v, want already_closed", closed)
	}
	// The FIFO moves on: the second batch is delivered.
	if r := h.run("wait", "--job-id", second, "--timeout", "5s"); r.code != 0 {
		t.Fatalf("the next batch was not delivered after the operator close: %s %s", r.stdout, r.stderr)
	}
	if r := h.run("wait", "--job-id", job, "--json"); r.code == 0 {
		t.Fatal("wait exited 0 for an operator-closed, unconfirmed batch")
	}
	h.verify()
}

func TestDelivery_TurnFailedParksAndManualExpires(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "max_wait_window = \"0s\"\nredelivery_window = \"10m\"")
	h.behave("T", "turn_failed")
	h.ready("T")
	bs := h.batches("T")
	if bs[0].Replay != "manual_resolution_only" || bs[0].Count != 1 {
		t.Fatalf("after a failed turn: %+v", bs[0])
	}
	h.advance("11m")
	bs = h.batches("T")
	if bs[0].State != "closed" || bs[0].CloseReason != "manual_resolution_expired" {
		t.Fatalf("parked batch past its window: %+v, want manual_resolution_expired", bs[0])
	}
}

func TestDelivery_FairOrderAcrossThreads(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "max_wait_window = \"0s\"")
	for _, th := range []string{"A", "B", "C"} {
		h.behave(th, "accept")
	}
	h.ready("A")
	h.ready("B")
	h.ready("C")
	for _, th := range []string{"A", "B", "C"} {
		if n := len(h.deliveries(th)); n != 1 {
			t.Fatalf("thread %s: %d deliveries, want 1", th, n)
		}
	}
	var cur struct {
		Events []struct {
			Type    string          `json:"type"`
			Payload json.RawMessage `json:"payload"`
		} `json:"events"`
	}
	if err := callOpArgs(h.root, "events.read", map[string]any{"stream": "cursor/debug"}, &cur); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, e := range cur.Events {
		var p struct {
			Thread string `json:"source_thread_id"`
		}
		json.Unmarshal(e.Payload, &p)
		order = append(order, p.Thread)
	}
	if strings.Join(order, ",") != "A,B,C" {
		t.Fatalf("cursor advanced over %v, want A,B,C (ready order)", order)
	}
}

// Artifacts are never collected while an open batch holds them, and are
// collected by the sweep once their retention has passed after the close.
// Orphans left by a crash between copy and event are removed at start.
func TestArtifactRetentionAndOrphans(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "max_wait_window = \"0s\"\n!min_artifact_ttl = \"1m\"\n!post_close_ttl = \"2m\"")
	h.behave("T", "accept") // the batch stays open
	f := filepath.Join(t.TempDir(), "r.txt")
	os.WriteFile(f, []byte("result"), 0o600)
	id := h.submitTo("debug", "T")
	var done struct {
		Artifact struct {
			ID   string `json:"artifact_id"`
			Path string `json:"managed_path"`
		} `json:"artifact"`
	}
	h.ok(&done, "job", "complete", "--job-id", id, "--summary", "ok", "--result-file", f)
	h.advance("10m") // far past the minimum TTL, batch still open (cooldowns, redeliveries)
	if _, err := os.Stat(done.Artifact.Path); err != nil {
		t.Fatalf("artifact collected while its batch is open: %v", err)
	}
	bs := h.batches("T")
	h.ok(nil, "batch", "close-head", "--source-thread-id", "T", "--reason", "operator_confirmed_delivery", "--batch-id", bs[0].ID)
	h.advance("1m")
	if _, err := os.Stat(done.Artifact.Path); err != nil {
		t.Fatalf("artifact collected before post_close_ttl: %v", err)
	}
	// An operator pin holds it past its retention.
	var pin struct {
		Outcome string `json:"outcome"`
	}
	h.ok(&pin, "artifact", "pin", "--artifact-id", done.Artifact.ID, "--for", "5m")
	if pin.Outcome != "pinned" {
		t.Fatalf("pin: %+v", pin)
	}
	h.advance("2m")
	if _, err := os.Stat(done.Artifact.Path); err != nil {
		t.Fatalf("pinned artifact collected: %v", err)
	}
	h.advance("3m")
	if _, err := os.Stat(filepath.Dir(done.Artifact.Path)); !os.IsNotExist(err) {
		t.Fatalf("artifact not collected after its retention: %v", err)
	}
	var q struct {
		Artifact struct{ State string } `json:"artifact"`
	}
	h.ok(&q, "job", "query", id)
	if q.Artifact.State != "collected" {
		t.Fatalf("artifact state %q, want collected", q.Artifact.State)
	}
	// An orphan (a copy whose event never landed) goes at the next start.
	h.ok(nil, "daemon", "stop")
	orphan := filepath.Join(h.root, "artifacts", "01a1fd8c-0000-7000-8000-000000000000")
	os.MkdirAll(orphan, 0o700)
	os.WriteFile(filepath.Join(orphan, "payload"), []byte("x"), 0o600)
	h.status()
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("orphan artifact directory survived a restart: %v", err)
	}
}

// A daemon killed while a delivery is in flight (accept_pending, no answer
// yet) cannot know whether the channel took it: after the restart the
// batch is parked for manual resolution and never replayed on its own.
func TestDelivery_KilledMidDeliveryIsNotReplayed(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	os.MkdirAll(h.root, 0o700)
	os.WriteFile(filepath.Join(h.root, "config.toml"), []byte("[delivery]\nmax_wait_window = \"0s\"\nsweep_interval = \"20ms\"\ndelivery_timeout = \"1h\"\n"), 0o600)
	h.behave("T", "hang")
	h.ready("T")
	waitFor(t, "the delivery to be in flight", 10*time.Second, func() bool {
		var in struct {
			Head *struct {
				State string `json:"state"`
			} `json:"head_attempt"`
		}
		h.ok(&in, "batch", "inspect-head", "--source-thread-id", "T")
		return in.Head != nil && in.Head.State == "accept_pending"
	})
	pid := h.pid()
	syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, "the daemon to die", 10*time.Second, func() bool { return h.pid() != pid })
	h.behave("T", "deliver") // restarts the daemon; delivering would now succeed
	// Wait on scheduling passes having run since, not a guess of how
	// long they take: another thread's result is delivered, which only a
	// pass over the heads does.
	h.behave("U", "deliver")
	h.ready("U")
	waitFor(t, "another thread's delivery after the restart", 10*time.Second, func() bool { return len(h.deliveries("U")) == 1 })
	bs := h.batches("T")
	if len(bs) != 1 || bs[0].Replay != "manual_resolution_only" || bs[0].State == "closed" {
		t.Fatalf("after the restart: %+v, want the batch parked", bs)
	}
	for _, d := range h.deliveries("T") {
		if d.Behaviour == "deliver" {
			t.Fatalf("the in-flight batch was replayed after the restart: %+v", d)
		}
	}
	h.verify()
}

// A kick never delivers a head whose redelivery window ended: every
// scheduling pass, on a kick as on the timer, starts with the overdue
// sweep at its own now, which closes the head first; and the core's
// eligibility checks the window itself (seed 004, recommended behaviour
// 7; issue 36, C3.33). `debug clock --no-sweep` lets time pass the way it
// does between two ticks of a daemon on the system clock.
func TestKick_SweepsBeforeItSchedules(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "max_wait_window = \"0s\"")
	h.behave("T", "busy") // the target's gate holds T back
	h.ready("T")
	bs := h.batches("T")
	if len(bs) != 1 || bs[0].State != "queued" || bs[0].Count != 0 {
		t.Fatalf("before the window ends: %+v", bs)
	}
	h.ok(nil, "debug", "clock", "--advance", "1h1s", "--no-sweep")
	// No pass ran: the head is still open, and not eligible any more.
	in := h.inspectBatch(bs[0].ID)
	if in.Batch.State != "queued" || in.Gate != "redelivery window ended" {
		t.Fatalf("past the window, before any pass: state %s, gate %q", in.Batch.State, in.Gate)
	}
	// The kick: the target lets T through now. Its pass sweeps first.
	h.behave("T", "deliver")
	if d := h.deliveries("T"); len(d) != 0 {
		t.Fatalf("a kick delivered a head past its redelivery window: %+v", d)
	}
	in = h.inspectBatch(bs[0].ID)
	if in.Batch.State != "closed" || in.Batch.CloseReason != "redelivery_window_exhausted" {
		t.Fatalf("after the kick: %+v", in.Batch)
	}
	// Closed by the sweep, at the now of the kick's pass.
	closes := h.events("batch.closed")
	var at struct {
		RecordedAt string `json:"recorded_at"`
	}
	if len(closes) != 1 || closes[0].Actor != "sweep" || json.Unmarshal([]byte(closes[0].line), &at) != nil || at.RecordedAt != "2026-11-21T11:00:01Z" {
		t.Fatalf("the close: %+v", closes)
	}
}
