package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/internal/testkit/codextest"
)

// The host-plugin codex_app_server target (spec/plugin-target.md) through
// the real binary and socket, and, where a turn starts, the real pinned
// Codex app-server the daemon starts and the fake model.

type deliveryTarget struct {
	Ownership        string `json:"ownership"`
	PluginID         string `json:"plugin_id"`
	LeaseID          string `json:"app_server_lease_id"`
	ManagedSessionID string `json:"managed_session_id"`
	BoundThreadID    string `json:"bound_thread_id"`
	SessionEpoch     uint64 `json:"session_epoch"`
	CodexBinary      string `json:"codex_binary"`
}

type lease struct {
	Outcome          string `json:"outcome"`
	LeaseID          string `json:"app_server_lease_id"`
	Ownership        string `json:"ownership"`
	Thread           string `json:"bound_thread_id"`
	ManagedSessionID string `json:"managed_session_id"`
	SessionEpoch     uint64 `json:"session_epoch"`
	Instance         string `json:"app_server_instance"`
	PID              int    `json:"app_server_pid"`
}

type enqueued struct {
	JobID        string          `json:"job_id"`
	Status       string          `json:"status"`
	Deduplicated bool            `json:"deduplicated"`
	Target       *deliveryTarget `json:"delivery_target"`
}

type pluginInspection struct {
	Job struct {
		JobID  string          `json:"job_id"`
		Target *deliveryTarget `json:"delivery_target"`
	} `json:"job"`
	Batch *struct {
		Batch struct {
			ID          string          `json:"batch_id"`
			Replay      string          `json:"replay_policy"`
			CloseReason string          `json:"close_reason"`
			Target      *deliveryTarget `json:"delivery_target"`
		} `json:"batch"`
	} `json:"batch"`
	Target    *deliveryTarget `json:"delivery_target"`
	Lease     *lease          `json:"lease"`
	Reconcile struct {
		Outcome    string `json:"outcome"`
		TurnID     string `json:"delivery_turn_id"`
		TurnStatus string `json:"turn_status"`
		Detail     string `json:"detail"`
	} `json:"reconcile"`
}

// pluginShapes holds outputs to spec/plugin-target.md's shapes (with
// spec/cli.md's, which they refer to), as TestJSONShapesMatchTheSpec does.
func pluginShapes(t *testing.T) *shapeCheck {
	shapes := loadShapes(t)
	mine := loadShapesFrom(t, "plugin-target.md")
	for k, v := range mine {
		shapes[k] = v
	}
	c := &shapeCheck{t: t, shapes: shapes, seen: map[string]bool{}}
	t.Cleanup(func() {
		for _, name := range []string{"plugin-handshake", "plugin-enqueue", "plugin-inspect", "plugin-ensure"} {
			if _, ok := mine[name]; !ok {
				t.Errorf("spec/plugin-target.md has no shape %s", name)
			}
		}
	})
	return c
}

// shaped runs a command with --json, holds its output to shape and
// decodes it into out.
func (h *homeDir) shaped(c *shapeCheck, shape string, out any, args ...string) {
	h.t.Helper()
	r := h.run(append(args, "--json")...)
	if r.code != 0 {
		h.t.Fatalf("cbth %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
	}
	c.doc(shape, strings.Join(args, " "), r.stdout)
	if out != nil {
		if err := json.Unmarshal([]byte(r.stdout), out); err != nil {
			h.t.Fatal(err)
		}
	}
}

// completeToAccepted is how long a job's result took from job.completed
// to its attempt's attempt.accepted, by the times the log recorded.
func (h *homeDir) completeToAccepted(jobID string) time.Duration {
	h.t.Helper()
	at := func(e logged) time.Time {
		var v struct {
			RecordedAt time.Time `json:"recorded_at"`
		}
		if err := json.Unmarshal([]byte(e.line), &v); err != nil {
			h.t.Fatal(err)
		}
		return v.RecordedAt
	}
	var t0, t1 time.Time
	var batch, attempt string
	for _, e := range h.events("job.completed", "attempt.prepared", "attempt.accepted") {
		switch {
		case e.Type == "job.completed" && e.Stream.ID == jobID:
			t0, batch = at(e), e.Payload["batch_id"].(string)
		case e.Type == "attempt.prepared" && batch != "" && e.Payload["batch_id"] == batch:
			attempt = e.Stream.ID
		case e.Type == "attempt.accepted" && attempt != "" && e.Stream.ID == attempt:
			t1 = at(e)
		}
	}
	if t0.IsZero() || t1.IsZero() {
		h.t.Fatalf("job %s: no completion or no acceptance in the log", jobID)
	}
	return t1.Sub(t0)
}

func (h *homeDir) enqueue(thread, key string, extra ...string) enqueued {
	h.t.Helper()
	var e enqueued
	h.ok(&e, append([]string{"plugin", "enqueue", "--plugin-id", "plug", "--thread-id", thread, "--idempotency-key", key,
		"--task-kind", "ci", "--summary", "wait for CI"}, extra...)...)
	if e.JobID == "" || e.Target == nil {
		h.t.Fatalf("enqueue returned %+v", e)
	}
	return e
}

func (h *homeDir) inspectDelivery(args ...string) pluginInspection {
	h.t.Helper()
	var in pluginInspection
	h.ok(&in, append([]string{"plugin", "inspect"}, args...)...)
	return in
}

// Delivery-owned mode end to end: the handshake offers both modes; an
// enqueue with no lease derives the target (a retry returns the same
// job); nothing starts until the job completes, then the daemon starts
// its own app-server with the given codex, the continuation reaches the
// model once, the batch closes delivered; the target is in the job, the
// batch and inspect. Then a turn left running across a daemon restart is
// parked, and inspect, given no lease, finds the target again and shows
// the turn as evidence.
func TestPluginTarget_DeliveryOwned(t *testing.T) {
	t.Parallel()
	r := newDeliveryRig(t, "", "")
	shapes := pluginShapes(t)
	var hs struct {
		Caps []string `json:"service_capabilities"`
	}
	r.shaped(shapes, "plugin-handshake", &hs, "plugin", "handshake", "--plugin-id", "plug")
	if !slices.Contains(hs.Caps, "delivery-owned-codex-app-server-target-v1") || !slices.Contains(hs.Caps, "delivery-driver-codex-app-server-v1") {
		t.Fatalf("service capabilities %v", hs.Caps)
	}

	thread := r.execThread("[mark:earlier]")
	var e enqueued
	r.shaped(shapes, "plugin-enqueue", &e, "plugin", "enqueue", "--plugin-id", "plug", "--thread-id", thread, "--idempotency-key", "k1",
		"--task-kind", "ci", "--summary", "wait for CI", "--codex-binary", r.codex)
	dt := *e.Target
	if dt.Ownership != "delivery_owned" || !strings.HasPrefix(dt.LeaseID, "dol-") || dt.SessionEpoch != 1 || dt.BoundThreadID != thread ||
		dt.CodexBinary != r.codex || dt.PluginID != "plug" || dt.ManagedSessionID == "" {
		t.Fatalf("resolved target %+v", dt)
	}
	if again := r.enqueue(thread, "k1", "--codex-binary", r.codex); again.JobID != e.JobID || !again.Deduplicated || *again.Target != dt {
		t.Fatalf("a retried enqueue gave %+v, want job %s", again, e.JobID)
	}
	// Another key, another target: derived, deterministic, never the same.
	if other := r.enqueue(thread, "k2", "--codex-binary", r.codex); other.Target.LeaseID == dt.LeaseID || other.Target.ManagedSessionID == dt.ManagedSessionID {
		t.Fatalf("two keys share a target: %+v", other.Target)
	} else {
		r.ok(nil, "job", "cancel", "--job-id", other.JobID)
	}

	r.ok(nil, "job", "complete", "--job-id", e.JobID, "--summary", "[mark:po1] the CI run passed")
	in := r.waitBatch(thread, "the batch to close delivered", closedDelivered)
	h := in.Head
	if h == nil || h.ManagedSessionID != dt.ManagedSessionID || h.SessionEpoch != 1 || h.TurnID == "" || in.Batch.Count != 1 {
		t.Fatalf("delivered batch %+v, head %+v", in.Batch, h)
	}
	if n := r.model.Count(h.Marker); n != 1 || r.model.Count("[mark:po1] the CI run passed") != 1 {
		t.Fatalf("the model got the marker in %d requests, want 1", n)
	}
	if r.threadOfMarker(h.Marker) != thread {
		t.Fatalf("the continuation went to thread %s, not %s", r.threadOfMarker(h.Marker), thread)
	}
	// The first delivery starts the daemon's app-server (a figure for
	// people, not asserted).
	t.Logf("job complete to turn accepted, the app-server started on the way: %s", r.completeToAccepted(e.JobID))
	// The delivery is over: the daemon no longer holds its lease.
	var got pluginInspection
	r.shaped(shapes, "plugin-inspect", &got, "plugin", "inspect", "--job-id", e.JobID)
	r.shaped(shapes, "job", nil, "job", "query", e.JobID)
	if got.Target == nil || *got.Target != dt || got.Job.Target == nil || *got.Job.Target != dt || got.Batch == nil ||
		got.Batch.Batch.Target == nil || *got.Batch.Batch.Target != dt || got.Batch.Batch.CloseReason != "delivered" ||
		got.Reconcile.Outcome != "not_needed" || got.Lease != nil {
		t.Fatalf("inspect after delivery: %+v", got)
	}

	// A turn still running when the daemon restarts: its stream cannot be
	// proven continuous, so it is parked, never resent; inspect with no
	// lease id finds the target again from what the log holds.
	defer r.model.Release()
	thread2 := r.execThread("[mark:earlier2]")
	e2 := r.enqueue(thread2, "k3", "--codex-binary", r.codex)
	r.ok(nil, "job", "complete", "--job-id", e2.JobID, "--summary", "[fake:hang] [mark:po2] a long answer")
	in = r.waitBatch(thread2, "the turn to be accepted", func(in inspection) bool {
		return in.Head != nil && in.Head.TurnID != "" && in.Head.ObservationState == "tracking"
	})
	turn := in.Head.TurnID
	t.Logf("job complete to turn accepted, on the app-server already running: %s", r.completeToAccepted(e2.JobID))
	live := r.inspectDelivery("--job-id", e2.JobID)
	if live.Reconcile.Outcome != "followed" || live.Reconcile.TurnID != turn || live.Lease == nil || live.Lease.LeaseID != e2.Target.LeaseID {
		t.Fatalf("inspect of a turn observed live: %+v", live.Reconcile)
	}
	r.ok(nil, "daemon", "stop")
	var after pluginInspection
	r.shaped(shapes, "plugin-inspect", &after, "plugin", "inspect", "--job-id", e2.JobID) // starts a new daemon
	if after.Batch == nil || after.Batch.Batch.Replay != "manual_resolution_only" || after.Reconcile.Outcome != "evidence" ||
		after.Reconcile.TurnID != turn || after.Lease == nil || after.Lease.LeaseID != e2.Target.LeaseID {
		t.Fatalf("inspect after a restart: %+v", after)
	}
	if n := r.model.Count("[mark:po2]"); n != 1 {
		t.Fatalf("the model got the parked delivery %d times, want 1", n)
	}
	// The daemon's app-servers end with it.
	r.ok(nil, "daemon", "stop")
	codextest.GroupGone(t, live.Lease.PID)
	codextest.GroupGone(t, after.Lease.PID)
}

// Explicit lease mode: the plugin ensures a lease for its thread (a second
// ensure reuses it); an enqueue through a lease of another thread is
// refused with lease_thread_mismatch, one whose assertions do not hold
// with ESTALE, one of an unknown lease with ENOENT, and none appends
// anything; an enqueue through the lease is delivered on its app-server.
// A turn accepted there and then lost with its app-server (killed) is
// parked, never resent; inspect needs the lease id to reconcile; the
// next ensure moves the lease to epoch 2.
func TestPluginTarget_ExplicitLease(t *testing.T) {
	t.Parallel()
	r := newDeliveryRig(t, "", "")
	shapes := pluginShapes(t)
	defer r.model.Release()
	thread := r.execThread("[mark:earlier]")
	r.ok(nil, "plugin", "handshake", "--plugin-id", "plug", "--plugin-instance-id", "inst-1", "--plugin-pid", strconv.Itoa(os.Getpid()))
	ensure := func(th string) lease {
		t.Helper()
		var l lease
		r.shaped(shapes, "plugin-ensure", &l, "plugin", "ensure", "--plugin-id", "plug", "--plugin-instance-id", "inst-1", "--thread-id", th, "--codex-binary", r.codex)
		return l
	}
	l := ensure(thread)
	if l.Outcome != "started" || l.Ownership != "explicit_lease" || l.Thread != thread || l.SessionEpoch != 1 || l.PID == 0 {
		t.Fatalf("ensure: %+v", l)
	}
	if again := ensure(thread); again.Outcome != "reused" || again.LeaseID != l.LeaseID || again.Instance != l.Instance {
		t.Fatalf("a second ensure: %+v, want lease %s reused", again, l.LeaseID)
	}
	other := ensure("another-thread")
	if other.LeaseID == l.LeaseID || other.Instance != l.Instance {
		t.Fatalf("another thread's lease %+v: want its own lease on the same app-server", other)
	}
	head := len(r.events("job.submitted"))
	for _, c := range []struct {
		code string
		args []string
	}{
		{"lease_thread_mismatch", []string{"--lease-id", other.LeaseID}},
		{"ESTALE", []string{"--lease-id", l.LeaseID, "--session-epoch", "2"}},
		{"ESTALE", []string{"--lease-id", l.LeaseID, "--managed-session-id", other.ManagedSessionID}},
		{"ENOENT", []string{"--lease-id", "asl-unknown"}},
		{"EINVAL", nil}, // neither a lease nor a codex binary
	} {
		f := r.fails(codextest.Guard, append([]string{"plugin", "enqueue", "--plugin-id", "plug", "--thread-id", thread,
			"--idempotency-key", "x", "--task-kind", "ci", "--summary", "s"}, c.args...)...)
		if f.Code != c.code {
			t.Errorf("enqueue %v: %s (%s), want %s", c.args, f.Code, f.Message, c.code)
		}
	}
	if n := len(r.events("job.submitted")); n != head {
		t.Fatalf("refused enqueues appended %d jobs", n-head)
	}

	e := r.enqueue(thread, "e1", "--lease-id", l.LeaseID, "--managed-session-id", l.ManagedSessionID, "--session-epoch", "1")
	if dt := e.Target; dt.Ownership != "explicit_lease" || dt.LeaseID != l.LeaseID || dt.ManagedSessionID != l.ManagedSessionID ||
		dt.SessionEpoch != 1 || dt.CodexBinary != r.codex {
		t.Fatalf("resolved target %+v", dt)
	}
	r.ok(nil, "job", "complete", "--job-id", e.JobID, "--summary", "[mark:pe1] reviewed")
	in := r.waitBatch(thread, "the batch to close delivered", closedDelivered)
	if in.Head.ManagedSessionID != l.ManagedSessionID || r.model.Count(in.Head.Marker) != 1 {
		t.Fatalf("delivered head %+v; the model saw its marker %d times", in.Head, r.model.Count(in.Head.Marker))
	}

	// A turn accepted on the lease's app-server, which is then killed.
	e2 := r.enqueue(thread, "e2", "--lease-id", l.LeaseID)
	r.ok(nil, "job", "complete", "--job-id", e2.JobID, "--summary", "[fake:hang] [mark:pe2] a long answer")
	in = r.nthBatch(thread, 2, "the turn to be accepted", func(in inspection) bool {
		return in.Head != nil && in.Head.TurnID != "" && in.Head.ObservationState == "tracking"
	})
	if got := r.inspectDelivery("--job-id", e2.JobID); got.Reconcile.Outcome != "lease_required" {
		t.Fatalf("inspect of an explicit lease target without its lease: %+v", got.Reconcile)
	}
	if got := r.inspectDelivery("--job-id", e2.JobID, "--lease-id", l.LeaseID); got.Reconcile.Outcome != "followed" || got.Lease == nil || got.Lease.PID != l.PID {
		t.Fatalf("inspect with the lease: %+v", got)
	}
	// The turn's model call is under way (it hangs until released) before
	// the app-server dies: acceptance alone comes before the call.
	waitFor(t, "the delivered turn's model call", codextest.Guard, func() bool { return r.model.Count("[mark:pe2]") == 1 })
	if err := syscall.Kill(l.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r.nthBatch(thread, 2, "the batch to park", parked)
	r.model.Release()
	if n := r.model.Count("[mark:pe2]"); n != 1 {
		t.Fatalf("the model got the lost delivery %d times, want 1", n)
	}
	if again := ensure(thread); again.LeaseID != l.LeaseID || again.SessionEpoch != 2 || again.Instance == l.Instance {
		t.Fatalf("ensure after the app-server died: %+v, want lease %s at epoch 2 on a new instance", again, l.LeaseID)
	}
	pid := ensure(thread).PID
	r.ok(nil, "daemon", "stop")
	codextest.GroupGone(t, pid)
}

// A target that cannot be acquired once the batch is head: the
// accept-pending attempt is rejected durably and the batch goes to
// manual resolution, for a codex that does not exist and for one that
// exits at once. No real Codex is needed: nothing gets that far.
func TestPluginTarget_AcquisitionFailureParks(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	if err := os.MkdirAll(h.root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.root, "config.toml"), []byte(deliveryConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	quits := filepath.Join(t.TempDir(), "codex-quits")
	if err := os.WriteFile(quits, []byte("#!/bin/sh\nexit 3\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	for i, bin := range []string{filepath.Join(t.TempDir(), "no-such-codex"), quits} {
		thread := "plugin-thread-" + string(rune('a'+i))
		e := h.enqueue(thread, "key", "--codex-binary", bin)
		h.ok(nil, "job", "complete", "--job-id", e.JobID, "--summary", "done")
		var in inspection
		waitFor(t, "the batch to park", codextest.Guard, func() bool {
			bs := h.batches(thread)
			if len(bs) != 1 {
				return false
			}
			h.ok(&in, "batch", "inspect", "--batch-id", bs[0].ID)
			return parked(in)
		})
		if in.Head == nil || in.Head.Rejected != 1 || in.Head.RPCState != "rejected_before_accept" || in.Head.TurnID != "" || in.Batch.Count != 0 {
			t.Fatalf("%s: parked batch %+v, head %+v", bin, in.Batch, in.Head)
		}
		if got := h.inspectDelivery("--batch-id", in.Batch.ID); got.Batch == nil || !strings.Contains(got.Batch.Batch.Replay, "manual") {
			t.Fatalf("%s: inspect %+v", bin, got)
		}
	}
}

// The service boundary checks a plugin instance: an ensure (or an enqueue
// naming the instance) needs its handshake, as the same plugin, with its
// process still running; each refusal starts and appends nothing.
func TestPluginTarget_InstanceValidation(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.endedInstance("plug", "ended")
	h.ok(nil, "plugin", "handshake", "--plugin-id", "other", "--plugin-instance-id", "theirs", "--plugin-pid", strconv.Itoa(os.Getpid()))
	if f := h.fails(codextest.Guard, "plugin", "handshake", "--plugin-id", "plug", "--plugin-instance-id", "theirs", "--plugin-pid", strconv.Itoa(os.Getpid())); f.Code != "EACCES" {
		t.Errorf("taking another plugin's instance: %s (%s)", f.Code, f.Message)
	}
	for _, c := range []struct{ instance, code string }{{"never-shook-hands", "ESTATE"}, {"ended", "ESTALE"}, {"theirs", "EACCES"}} {
		f := h.fails(codextest.Guard, "plugin", "ensure", "--plugin-id", "plug", "--plugin-instance-id", c.instance, "--thread-id", "T", "--codex-binary", "codex")
		if f.Code != c.code {
			t.Errorf("ensure as %s: %s (%s), want %s", c.instance, f.Code, f.Message, c.code)
		}
		f = h.fails(codextest.Guard, "plugin", "enqueue", "--plugin-id", "plug", "--plugin-instance-id", c.instance, "--thread-id", "T",
			"--idempotency-key", "k", "--codex-binary", "codex", "--task-kind", "ci", "--summary", "s")
		if f.Code != c.code {
			t.Errorf("enqueue as %s: %s (%s), want %s", c.instance, f.Code, f.Message, c.code)
		}
	}
	var jobs []any
	h.ok(&jobs, "job", "list")
	if len(jobs) != 0 {
		t.Fatalf("refused requests appended %d jobs", len(jobs))
	}
}

// endedInstance makes the handshake of an instance whose plugin is a
// shell that runs cbth plugin handshake and exits: the declared pid is
// the client's parent, and then gone.
func (h *homeDir) endedInstance(plugin, instance string) {
	h.t.Helper()
	sh := exec.Command("sh", "-c", cbthBin+` plugin handshake --plugin-id `+plugin+` --plugin-instance-id `+instance+` --plugin-pid $$ --json`)
	sh.Env = append(os.Environ(), h.env...)
	if out, err := sh.CombinedOutput(); err != nil {
		h.t.Fatalf("handshake from a shell: %v\n%s", err, out)
	}
}

// The pid a handshake declares is checked against the socket's peer as
// the kernel records it: it must be the client or one of its ancestors,
// of this user, not init; an instance needs one; an instance that ended
// is never revived by a new handshake. Each refusal registers nothing.
func TestPluginHandshakeChecksTheDeclaredPID(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	stranger := exec.Command("sleep", "60")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stranger.Process.Kill(); stranger.Wait() }()
	for _, c := range []struct {
		pid, code string
	}{
		{"0", "EINVAL"}, {"1", "EINVAL"}, {strconv.Itoa(stranger.Process.Pid), "EACCES"},
	} {
		f := h.fails(codextest.Guard, "plugin", "handshake", "--plugin-id", "plug", "--plugin-instance-id", "i-"+c.pid, "--plugin-pid", c.pid)
		if f.Code != c.code {
			t.Errorf("plugin_pid %s: %s (%s), want %s", c.pid, f.Code, f.Message, c.code)
		}
		if g := h.fails(codextest.Guard, "plugin", "ensure", "--plugin-id", "plug", "--plugin-instance-id", "i-"+c.pid, "--thread-id", "T", "--codex-binary", "codex"); g.Code != "ESTATE" {
			t.Errorf("the refused instance i-%s was registered: %s (%s)", c.pid, g.Code, g.Message)
		}
	}
	// This test process is an ancestor of the client: accepted.
	h.ok(nil, "plugin", "handshake", "--plugin-id", "plug", "--plugin-instance-id", "mine", "--plugin-pid", strconv.Itoa(os.Getpid()))
	h.endedInstance("plug", "ended")
	if f := h.fails(codextest.Guard, "plugin", "handshake", "--plugin-id", "plug", "--plugin-instance-id", "ended", "--plugin-pid", strconv.Itoa(os.Getpid())); f.Code != "ESTALE" {
		t.Errorf("re-handshake of an ended instance: %s (%s), want ESTALE", f.Code, f.Message)
	}
}

// The daemon's own environment (that of whichever command first started
// it) does not reach the Codex app-servers it starts: they get the
// allow-list (PATH, HOME, LANG, ...) and [cli] pass_env, nothing else.
// The codex binary is a wrapper that records its environment.
func TestCodexAppServerGetsAnAllowListedEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "codex")
	script := fmt.Sprintf("#!/bin/sh\nenv > %s/env.$$\nexec %s \"$@\"\n", dir, codextest.Binary(t))
	if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	h := newHome(t, "CBTH_LEAK_CANARY=from-the-first-command", "CBTH_PASSED=yes")
	h.codexConfig(wrapper, codextest.TUIHome(t, "http://127.0.0.1:9", t.TempDir()), "[cli]\npass_env = [\"CBTH_PASSED\"]\n")
	h.ok(nil, "plugin", "handshake", "--plugin-id", "plug", "--plugin-instance-id", "inst-1", "--plugin-pid", strconv.Itoa(os.Getpid()))
	h.run("plugin", "ensure", "--plugin-id", "plug", "--plugin-instance-id", "inst-1", "--thread-id", "T", "--codex-binary", wrapper, "--json")
	files, _ := filepath.Glob(filepath.Join(dir, "env.*"))
	if len(files) == 0 {
		t.Fatal("the daemon never ran codex")
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		env := "\n" + string(b)
		if strings.Contains(env, "CBTH_LEAK_CANARY") || strings.Contains(env, "\nCBTH_HOME=") {
			t.Errorf("codex got the daemon's environment:\n%s", b)
		}
		for _, w := range []string{"\nPATH=", "\nHOME=", "\nCBTH_PASSED=yes\n", "\nCODEX_HOME="} {
			if !strings.Contains(env, w) {
				t.Errorf("codex lacks %q:\n%s", w, b)
			}
		}
	}
}
