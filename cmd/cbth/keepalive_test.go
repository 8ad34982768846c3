package main_test

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// What keeps the daemon alive, and what must not: through the real
// binary, on the debug target.

// headAttempt is the head attempt of `batch inspect`, with what the
// codex_app_server targets record of the RPC and the turn.
type headAttempt struct {
	State               string  `json:"state"`
	Marker              string  `json:"delivery_rpc_correlation_marker"`
	RPCState            string  `json:"delivery_rpc_state"`
	RPCKind             string  `json:"delivery_rpc_kind"`
	Rejected            int     `json:"rejected_rpc_request_count"`
	TurnID              string  `json:"delivery_turn_id"`
	ManagedSessionID    string  `json:"managed_session_id"`
	SessionEpoch        uint64  `json:"session_epoch"`
	ObservationState    string  `json:"delivery_observation_state"`
	ObservationDeadline *string `json:"delivery_observation_deadline"`
	AcceptedAt          *string `json:"delivery_accepted_at"`
	LastTurnEvent       *string `json:"last_observed_turn_event"`
	LastTurnEventAt     *string `json:"last_observed_turn_event_at"`
	EndReason           string  `json:"end_reason"`
}

// inspection is `batch inspect`'s reply as the delivery tests read it.
type inspection struct {
	Batch struct {
		ID          string `json:"batch_id"`
		State       string `json:"state"`
		Replay      string `json:"replay_policy"`
		CloseReason string `json:"close_reason"`
		Count       int    `json:"delivery_attempt_count"`
	} `json:"batch"`
	Head *headAttempt `json:"head_attempt"`
	Gate string       `json:"delivery_gate"`
}

func (h *homeDir) inspectBatch(id string) inspection {
	h.t.Helper()
	var in inspection
	h.ok(&in, "batch", "inspect", "--batch-id", id)
	return in
}

// keptPast waits, within limit, for the event that shows the daemon pid
// was kept up past at: its loop, judging it busy, moved its idle deadline
// (the last activity plus the idle timeout, which daemon status reports
// and looking at it does not move) past at. It fails if the daemon left
// first. A sleep would only guess that the loop had run.
func (h *homeDir) keptPast(pid int, at time.Time, limit time.Duration) {
	h.t.Helper()
	waitFor(h.t, "the daemon kept up past "+at.Format(time.RFC3339Nano), limit, func() bool {
		var st struct {
			PID          int       `json:"pid"`
			IdleDeadline time.Time `json:"idle_deadline"`
		}
		h.ok(&st, "daemon", "status")
		if st.PID != pid {
			h.t.Fatalf("the daemon %d left (now %d) before it was kept up past %s", pid, st.PID, at)
		}
		return st.IdleDeadline.After(at)
	})
}

func (h *homeDir) busy() []string {
	h.t.Helper()
	return h.status().Busy
}

func hasReason(reasons []string, part string) bool {
	for _, r := range reasons {
		if strings.Contains(r, part) {
			return true
		}
	}
	return false
}

// A parked head (manual_resolution_only) does not keep the daemon up: once
// the park is recorded nothing is due, and the daemon leaves at its idle
// timeout.
func TestKeepAlive_ParkedHeadLetsTheDaemonExit(t *testing.T) {
	t.Parallel()
	h := newHome(t, "CBTH_IDLE_TIMEOUT=2s")
	os.MkdirAll(h.root, 0o700)
	os.WriteFile(filepath.Join(h.root, "config.toml"), []byte("[delivery]\nmax_wait_window = \"0s\"\nsweep_interval = \"50ms\"\n"), 0o600)
	h.behave("T", "turn_failed")
	h.ready("T")
	waitFor(t, "the batch to be parked", 10*time.Second, func() bool {
		bs := h.batches("T")
		return len(bs) == 1 && bs[0].Replay == "manual_resolution_only" && bs[0].State != "closed"
	})
	pid := h.pid()
	var reasons []string
	waitFor(t, "nothing to keep the daemon up", 10*time.Second, func() bool {
		reasons = h.busy()
		return len(reasons) == 0
	})
	waitFor(t, "the daemon to leave at its idle timeout", 20*time.Second, func() bool { return h.pid() != pid })
	if h.pid() != 0 {
		t.Fatal("another daemon runs")
	}
	log, _ := os.ReadFile(filepath.Join(h.root, "log", "daemon.log"))
	if !strings.Contains(string(log), "idle timeout reached") {
		t.Fatalf("the daemon did not leave by the idle rule:\n%s", log)
	}
}

// An accepted turn reported asynchronously is observed past its cooldown,
// even with a budget of one attempt: the budget never closes a batch whose
// turn is still running, and the turn's completion closes it delivered.
func TestAsyncTurn_TrackedPastCooldownClosesDelivered(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "max_wait_window = \"0s\"\nmax_delivery_attempts = 1\ncooldown = \"30s\"")
	h.behave("T", "async")
	job := h.ready("T")
	bs := h.batches("T")
	in := h.inspectBatch(bs[0].ID)
	if in.Head == nil || in.Head.State != "cooldown" || in.Head.ObservationState != "tracking" || in.Head.LastTurnEvent != nil ||
		in.Head.ManagedSessionID != "debug:T" || in.Head.SessionEpoch == 0 {
		t.Fatalf("after an async accept: %+v, want a tracked cooldown attempt on session debug:T", in.Head)
	}
	h.advance("31s") // past the cooldown, with the one attempt spent
	in = h.inspectBatch(bs[0].ID)
	if in.Batch.State == "closed" {
		t.Fatalf("closed %s while its turn was still tracked", in.Batch.CloseReason)
	}
	if !hasReason(h.busy(), "observing 1 accepted turn until") {
		t.Fatalf("busy reasons %v do not name the tracked turn", h.busy())
	}
	var rep struct {
		Outcome string `json:"outcome"`
	}
	h.ok(&rep, "debug", "turn", "--thread-id", "T", "--event", "started")
	if rep.Outcome != "observed" {
		t.Fatalf("turn started: %+v", rep)
	}
	h.ok(&rep, "debug", "turn", "--thread-id", "T", "--event", "completed")
	if rep.Outcome != "delivered" {
		t.Fatalf("turn completed: %+v, want delivered", rep)
	}
	in = h.inspectBatch(bs[0].ID)
	if in.Batch.State != "closed" || in.Batch.CloseReason != "delivered" || in.Batch.Count != 1 {
		t.Fatalf("after the turn completed: %+v", in.Batch)
	}
	if r := h.run("wait", "--job-id", job, "--timeout", "5s"); r.code != 0 {
		t.Fatalf("wait: %s %s", r.stdout, r.stderr)
	}
	var q struct {
		Batch struct {
			ID          string `json:"batch_id"`
			CloseReason string `json:"close_reason"`
		} `json:"batch"`
	}
	h.ok(&q, "job", "query", job)
	if q.Batch.ID != bs[0].ID || q.Batch.CloseReason != "delivered" {
		t.Fatalf("job query does not show where the result went: %+v", q)
	}
}

// A turn event counts only from the session and epoch the barrier
// recorded: one reported from another epoch changes nothing.
func TestAsyncTurn_OtherEpochIgnored(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "max_wait_window = \"0s\"")
	h.behave("T", "async")
	h.ready("T")
	bs := h.batches("T")
	in := h.inspectBatch(bs[0].ID)
	head := h.status().LogHeadSeq
	var rep struct {
		Outcome string `json:"outcome"`
		Epoch   uint64 `json:"session_epoch"`
	}
	h.ok(&rep, "debug", "turn", "--thread-id", "T", "--event", "completed", "--session-epoch", "99")
	if rep.Outcome != "session_mismatch" || rep.Epoch != 99 || in.Head.SessionEpoch == 99 {
		t.Fatalf("a turn event from epoch 99: %+v (the attempt is on epoch %d)", rep, in.Head.SessionEpoch)
	}
	if h.status().LogHeadSeq != head {
		t.Fatal("an event from another epoch appended to the log")
	}
	if got := h.inspectBatch(bs[0].ID); got.Batch.State == "closed" {
		t.Fatalf("closed %s on an event from another epoch", got.Batch.CloseReason)
	}
}

// The daemon stays up while it observes an accepted turn, however long
// past its idle timeout, and at the observation deadline it parks the
// batch as expired; then nothing keeps it up.
func TestKeepAlive_TrackingUntilTheDeadlineThenExpired(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "max_wait_window = \"0s\"\nobservation_window = \"30m\"\n!idle_timeout = \"10m\"")
	h.behave("T", "async")
	h.ready("T")
	bs := h.batches("T")
	h.advance("20m") // twice the idle timeout
	if !hasReason(h.busy(), "observing 1 accepted turn until") {
		t.Fatalf("busy reasons %v: the tracked turn must keep the daemon up", h.busy())
	}
	if in := h.inspectBatch(bs[0].ID); in.Head == nil || in.Head.ObservationState != "tracking" {
		t.Fatalf("before the deadline: %+v", in.Head)
	}
	h.advance("10m") // the deadline
	in := h.inspectBatch(bs[0].ID)
	if in.Batch.Replay != "manual_resolution_only" || in.Batch.State == "closed" || in.Head == nil ||
		in.Head.State != "abandoned" || in.Head.ObservationState != "expired" {
		t.Fatalf("at the deadline: %+v %+v, want parked with the attempt expired", in.Batch, in.Head)
	}
	if r := h.busy(); hasReason(r, "observing") {
		t.Fatalf("busy reasons %v after the deadline", r)
	}
	// A late completion is evidence only.
	var rep struct {
		Outcome string `json:"outcome"`
	}
	h.ok(&rep, "debug", "turn", "--thread-id", "T", "--event", "completed")
	if rep.Outcome != "late_ignored" {
		t.Fatalf("late completion: %+v", rep)
	}
	if got := h.inspectBatch(bs[0].ID); got.Batch.State == "closed" {
		t.Fatal("a late completion closed a parked batch")
	}
}

// With the real clock: past its idle timeout the daemon is still up while
// it observes, and it leaves once the deadline parked the batch.
func TestKeepAlive_TrackingOutlivesTheIdleTimeout(t *testing.T) {
	t.Parallel()
	h := newHome(t, "CBTH_IDLE_TIMEOUT=1s")
	os.MkdirAll(h.root, 0o700)
	os.WriteFile(filepath.Join(h.root, "config.toml"), []byte("[delivery]\nmax_wait_window = \"0s\"\nsweep_interval = \"50ms\"\nobservation_window = \"4s\"\n"), 0o600)
	h.behave("T", "async")
	h.ready("T")
	pid := h.pid()
	// Well past the idle timeout, before the deadline: the loop judged
	// the daemon busy at a time past it, and it is still up.
	h.keptPast(pid, time.Now().Add(2500*time.Millisecond), 20*time.Second)
	waitFor(t, "the daemon to leave after the deadline", 20*time.Second, func() bool { return h.pid() != pid })
	bs := h.batches("T")
	if bs[0].Replay != "manual_resolution_only" {
		t.Fatalf("after the deadline: %+v, want parked", bs[0])
	}
}

// A configuration whose observation window is not longer than the idle
// timeout is refused: the daemon could not keep both promises.
func TestConfig_ObservationWindowMustExceedIdleTimeout(t *testing.T) {
	t.Parallel()
	h := newHome(t, "CBTH_IDLE_TIMEOUT=10m")
	os.MkdirAll(h.root, 0o700)
	os.WriteFile(filepath.Join(h.root, "config.toml"), []byte("[delivery]\nobservation_window = \"10m\"\n"), 0o600)
	r := h.run("daemon", "run", "--quiet", "--json")
	if r.code != 2 || !strings.Contains(r.stdout, "EINVAL") || !strings.Contains(r.stdout, "observation_window") {
		t.Fatalf("daemon run: exit %d %s %s; want EINVAL naming observation_window", r.code, r.stdout, r.stderr)
	}
}

// A hung delivery holds up its own thread only: another thread of the
// same target is delivered meanwhile.
func TestDelivery_HungThreadDoesNotDelayAnother(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	os.MkdirAll(h.root, 0o700)
	os.WriteFile(filepath.Join(h.root, "config.toml"), []byte("[delivery]\nmax_wait_window = \"0s\"\nsweep_interval = \"20ms\"\ndelivery_timeout = \"1h\"\n"), 0o600)
	h.behave("A", "hang")
	h.ready("A")
	waitFor(t, "A's delivery to be in flight", 10*time.Second, func() bool {
		var in inspection
		h.ok(&in, "batch", "inspect-head", "--source-thread-id", "A")
		return in.Head != nil && in.Head.State == "accept_pending"
	})
	b := h.ready("B")
	if r := h.run("wait", "--job-id", b, "--timeout", "20s"); r.code != 0 {
		t.Fatalf("thread B was not delivered while A hangs: %s %s", r.stdout, r.stderr)
	}
	var in inspection
	h.ok(&in, "batch", "inspect-head", "--source-thread-id", "A")
	if in.Head == nil || in.Head.State != "accept_pending" {
		t.Fatalf("A's head: %+v, want its delivery still in flight", in.Head)
	}
	if st := h.status(); !hasReason(st.Busy, "1 delivery in flight") {
		t.Fatalf("busy reasons %v do not count the hung delivery", st.Busy)
	}
}

// The target's gate holds a thread back (its caller is busy): the core
// lets it through, the target does not, and inspect says why.
func TestDelivery_TargetGateHoldsTheThread(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "max_wait_window = \"0s\"")
	h.behave("T", "busy")
	h.ready("T")
	var in inspection
	h.ok(&in, "batch", "inspect-head", "--source-thread-id", "T")
	if len(h.deliveries("T")) != 0 || in.Head != nil || !strings.Contains(in.Gate, "busy") {
		t.Fatalf("a gated thread: gate %q, head %+v, deliveries %d", in.Gate, in.Head, len(h.deliveries("T")))
	}
	h.behave("T", "deliver")
	if n := len(h.deliveries("T")); n != 1 {
		t.Fatalf("%d deliveries once the gate opened, want 1", n)
	}
}

// A parked batch's hook runs off the loop: while a slow hook runs, other
// threads are still delivered.
func TestParkHook_RunsOffTheLoop(t *testing.T) {
	t.Parallel()
	hookDone := filepath.Join(t.TempDir(), "hook.done")
	h := newHome(t)
	os.MkdirAll(h.root, 0o700)
	os.WriteFile(filepath.Join(h.root, "config.toml"), []byte("park_hook = [\"sh\", \"-c\", \"sleep 20; touch "+hookDone+"\"]\n[delivery]\nmax_wait_window = \"0s\"\nsweep_interval = \"20ms\"\n"), 0o600)
	h.behave("A", "unknown")
	h.ready("A")
	waitFor(t, "the park hook to start", 10*time.Second, func() bool { return hasReason(h.busy(), "park hooks running") })
	b := h.ready("B")
	if r := h.run("wait", "--job-id", b, "--timeout", "10s"); r.code != 0 {
		t.Fatalf("thread B was not delivered while a hook runs: %s %s", r.stdout, r.stderr)
	}
	if _, err := os.Stat(hookDone); err == nil {
		t.Fatal("the hook finished before B was delivered; the test proves nothing")
	}
}

// A job never reported fails at job_timeout with a clear reason, and then
// keeps nothing alive.
func TestJobTimeout(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "!job_timeout = \"1h\"")
	id := h.submitTo("debug", "T")
	if st := h.status(); st.ActiveJobs != 1 {
		t.Fatalf("active jobs %d", st.ActiveJobs)
	}
	h.advance("59m")
	var q struct {
		Status     string `json:"status"`
		FailReason string `json:"fail_reason"`
		TimeoutAt  string `json:"timeout_at"`
	}
	h.ok(&q, "job", "query", id)
	if q.Status != "running" || q.TimeoutAt == "" {
		t.Fatalf("before its timeout: %+v", q)
	}
	h.advance("1m")
	h.ok(&q, "job", "query", id)
	if q.Status != "failed" || !strings.HasPrefix(q.FailReason, "job_timeout") {
		t.Fatalf("at its timeout: %+v, want failed with a job_timeout reason", q)
	}
	if st := h.status(); st.ActiveJobs != 0 || hasReason(st.Busy, "active job") {
		t.Fatalf("a timed-out job still counts: %+v", st)
	}
}

// An accepted turn tracked when the daemon died cannot be proven to go on
// in the new daemon's stream: the new daemon parks it at once instead of
// waiting out the observation window.
func TestRestart_TrackedTurnIsParkedAtStartup(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "max_wait_window = \"0s\"")
	h.behave("T", "async")
	h.ready("T")
	bs := h.batches("T")
	pid := h.pid()
	syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, "the daemon to die", 10*time.Second, func() bool { return h.pid() != pid })
	in := h.inspectBatch(bs[0].ID) // restarts the daemon
	if in.Batch.Replay != "manual_resolution_only" || in.Head == nil || in.Head.State != "abandoned" || in.Head.ObservationState != "lost" {
		t.Fatalf("after the restart: %+v %+v, want parked with the observation lost", in.Batch, in.Head)
	}
	if hasReason(h.busy(), "observing") {
		t.Fatal("the lost turn still keeps the daemon up")
	}
	h.verify()
}

// The audit commands never start a daemon.
func TestAuditCommandsNeverStartADaemon(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.submit("t")
	h.ok(nil, "daemon", "stop")
	waitFor(t, "the daemon to stop", 10*time.Second, func() bool { return h.pid() == 0 })
	for _, args := range [][]string{
		{"events", "tail", "-n", "5"},
		{"events", "export"},
		{"events", "verify"},
		{"events", "replay", "--until", "1"},
		{"events", "diff", h.root, h.root},
	} {
		r := h.run(append(args, "--json")...)
		if r.code != 0 || r.stdout == "" {
			t.Fatalf("%v: exit %d %s %s", args, r.code, r.stdout, r.stderr)
		}
		if h.pid() != 0 {
			t.Fatalf("%v started a daemon", args)
		}
	}
}

// An open gateway connection keeps the daemon up past its idle timeout: a
// channel client waiting on its stream is work. Closed, the daemon leaves
// by the idle rule.
func TestKeepAlive_GatewayConnection(t *testing.T) {
	t.Parallel()
	h := newHome(t, "CBTH_IDLE_TIMEOUT=2s")
	os.MkdirAll(h.root, 0o700)
	os.WriteFile(filepath.Join(h.root, "config.toml"), []byte("[delivery]\nsweep_interval = \"50ms\"\n"), 0o600)
	pid := h.status().PID
	c, err := net.Dial("unix", filepath.Join(h.root, "run", "gateway.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "the gateway client named as a busy reason", 10*time.Second, func() bool { return slices.Contains(h.busy(), "1 gateway client") })
	// Past several idle timeouts, with only the connection open.
	h.keptPast(pid, time.Now().Add(5*time.Second), 30*time.Second)
	c.Close()
	waitFor(t, "the daemon to leave once the client is gone", 20*time.Second, func() bool { return h.pid() != pid })
	log, _ := os.ReadFile(filepath.Join(h.root, "log", "daemon.log"))
	if !strings.Contains(string(log), "idle timeout reached") {
		t.Fatalf("the daemon did not leave by the idle rule:\n%s", log)
	}
}
