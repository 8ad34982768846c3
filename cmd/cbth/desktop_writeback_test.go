package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/internal/execfile"
	"github.com/cbth-dev/cbth/internal/testkit/desktopsim"
	"github.com/cbth-dev/cbth/projections/inbox"
)

// Codex Desktop, part 2, through the real binary: the bridge's arm CAS,
// the pause proof and the caller's note-boundary-crossed.

type armPending struct {
	Outcome  string `json:"outcome"`
	Lease    string `json:"bridge_arm_lease_id"`
	Deadline string `json:"arm_pending_deadline"`
}

type armed struct {
	Outcome        string    `json:"outcome"`
	ArmedGen       uint64    `json:"armed_generation"`
	Count          int       `json:"delivery_attempt_count"`
	PauseNotBefore time.Time `json:"pause_not_before"`
	PauseDeadline  time.Time `json:"pause_deadline"`
}

type crossed struct {
	Outcome      string `json:"outcome"`
	Thread       string `json:"source_thread_id"`
	BatchID      string `json:"batch_id"`
	AttemptID    string `json:"attempt_id"`
	Generation   uint64 `json:"generation"`
	Revision     uint64 `json:"snapshot_revision"`
	Boundary     string `json:"continuation_boundary_state"`
	Replay       string `json:"replay_policy"`
	CloseReason  string `json:"close_reason"`
	Continuation struct {
		Summary string   `json:"summary"`
		JobIDs  []string `json:"job_ids"`
	} `json:"continuation"`
}

func tokenArgs(r *inbox.ReadyEntry, request string) []string {
	return []string{"--source-thread-id", r.SourceThreadID, "--attempt-id", r.AttemptID,
		"--generation", strconv.FormatUint(r.Generation, 10), "--bridge-request-id", request}
}

func crossArgs(r *inbox.ReadyEntry) []string {
	return []string{"desktop", "note-boundary-crossed", "--source-thread-id", r.SourceThreadID, "--batch-id", r.BatchID,
		"--attempt-id", r.AttemptID, "--generation", strconv.FormatUint(r.Generation, 10),
		"--expected-snapshot-revision", strconv.FormatUint(r.SnapshotRevision, 10)}
}

// The whole v1 flow for one batch, with every refusal of the two arm
// helpers and of note-boundary-crossed appending nothing.
func TestDesktop_ArmCASAndBoundary(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.readyDesktop("S")
	c := h.claim()
	r := c.Ready
	if r == nil {
		t.Fatalf("nothing ready: %+v", c)
	}
	// A caller woken before any arm: transient, nothing appended.
	head := h.head()
	h.fails(time.Minute, crossArgs(r)...).want(t, "transient_not_ready", 1)

	// note-arm-pending: once; the same request id gets the same lease.
	var p1, p2 armPending
	h.ok(&p1, append([]string{"desktop", "note-arm-pending"}, tokenArgs(r, "wake-1")...)...)
	if p1.Outcome != "arm_pending" || p1.Lease == "" {
		t.Fatalf("note-arm-pending: %+v", p1)
	}
	afterPending := h.head()
	if afterPending != head+1 {
		t.Fatalf("note-arm-pending appended %d events, want 1", afterPending-head)
	}
	h.ok(&p2, append([]string{"desktop", "note-arm-pending"}, tokenArgs(r, "wake-1")...)...)
	if p2.Outcome != "already_pending" || p2.Lease != p1.Lease {
		t.Fatalf("retry: %+v, want the same lease %s", p2, p1.Lease)
	}
	// Another bridge request: busy, and the lease never in its answer.
	f := h.fails(time.Minute, append([]string{"desktop", "note-arm-pending"}, tokenArgs(r, "wake-2")...)...)
	f.want(t, "EBUSY", 1, "lease_held")
	if strings.Contains(f.Message, p1.Lease) || strings.Contains(f.Stderr, p1.Lease) {
		t.Fatalf("the busy answer leaks the lease: %+v", f)
	}
	// A stale token (every kind of it is in adapters/daemon/desktopmod's
	// TestArmCASAndBoundary): ESTALE, exit 1.
	stale := *r
	stale.Generation++
	h.fails(time.Minute, append([]string{"desktop", "note-arm-pending"}, tokenArgs(&stale, "wake-1")...)...).want(t, "ESTALE", 1)
	// The caller woken while arm_pending: transient.
	h.fails(time.Minute, crossArgs(r)...).want(t, "transient_not_ready", 1)
	if got := h.head(); got != afterPending {
		t.Fatalf("refusals appended %d events", got-afterPending)
	}

	// note-arm: once; counts once; a retry is already_armed.
	var a1, a2 armed
	h.ok(&a1, append([]string{"desktop", "note-arm"}, append(tokenArgs(r, "wake-1"), "--bridge-arm-lease-id", p1.Lease)...)...)
	if a1.Outcome != "armed" || a1.Count != 1 || a1.ArmedGen != r.Generation {
		t.Fatalf("note-arm: %+v", a1)
	}
	now, _ := time.Parse(time.RFC3339, testClock)
	if a1.PauseNotBefore.Sub(now) < 90*time.Second || a1.PauseDeadline.Sub(a1.PauseNotBefore) < 90*time.Second {
		t.Fatalf("pause window %s .. %s after an arm at %s", a1.PauseNotBefore, a1.PauseDeadline, now)
	}
	armedHead := h.head()
	h.ok(&a2, append([]string{"desktop", "note-arm"}, append(tokenArgs(r, "wake-1"), "--bridge-arm-lease-id", p1.Lease)...)...)
	if a2.Outcome != "already_armed" || a2.Count != 1 || h.head() != armedHead {
		t.Fatalf("retry: %+v, head %d -> %d", a2, armedHead, h.head())
	}
	var bd struct {
		ArmedGeneration uint64  `json:"armed_generation"`
		Quiesced        *string `json:"armed_generation_quiesced_at"`
	}
	var list []json.RawMessage
	h.ok(&list, "desktop", "binding", "list")
	json.Unmarshal(list[0], &bd)
	if bd.ArmedGeneration != r.Generation || bd.Quiesced != nil {
		t.Fatalf("binding after the arm: %+v", bd)
	}

	// note-boundary-crossed checks the token before any write (each part
	// of it in desktopmod's TestArmCASAndBoundary).
	e := *r
	e.SnapshotRevision++
	if f := h.fails(time.Minute, crossArgs(&e)...); f.Code != "stale_or_superseded" {
		t.Fatalf("revision mismatch: %+v", f)
	}
	if got := h.head(); got != armedHead {
		t.Fatalf("stale crossings appended %d events", got-armedHead)
	}
	var x crossed
	h.ok(&x, crossArgs(r)...)
	if x.Outcome != "crossed" || x.Thread != r.SourceThreadID || x.BatchID != r.BatchID || x.AttemptID != r.AttemptID ||
		x.Generation != r.Generation || x.Revision != r.SnapshotRevision || x.Boundary != "crossed_unacknowledged" ||
		x.Replay != "manual_resolution_only" || x.CloseReason != "handoff_recorded" || !strings.Contains(x.Continuation.Summary, "CI is green") {
		t.Fatalf("crossing: %+v", x)
	}
	crossedHead := h.head()
	// A second crossing (a lost response retried): never a second
	// authorization.
	h.fails(time.Minute, crossArgs(r)...).want(t, "already_crossed_or_handoff_recorded", 1, "cbth batch inspect --batch-id")
	if h.head() != crossedHead {
		t.Fatal("a second crossing appended")
	}
	// The operator recovers the lost answer by batch id.
	var in struct {
		Batch struct {
			CloseReason string `json:"close_reason"`
			Boundary    string `json:"continuation_boundary_state"`
			Replay      string `json:"replay_policy"`
			EnvelopeRef string `json:"boundary_recovery_envelope_ref"`
		} `json:"batch"`
		Envelope *struct {
			BatchID   string    `json:"batch_id"`
			AttemptID string    `json:"attempt_id"`
			Summary   string    `json:"inline_payload_summary"`
			Retention time.Time `json:"retention_until"`
		} `json:"boundary_recovery_envelope"`
	}
	h.ok(&in, "batch", "inspect", "--batch-id", r.BatchID)
	if in.Batch.CloseReason != "handoff_recorded" || in.Batch.Boundary != "crossed_unacknowledged" || in.Batch.Replay != "manual_resolution_only" ||
		in.Envelope == nil || in.Envelope.AttemptID != r.AttemptID || in.Envelope.Summary != x.Continuation.Summary ||
		in.Envelope.Retention.Sub(now) < 72*time.Hour {
		t.Fatalf("inspect after the handoff: %+v %+v", in.Batch, in.Envelope)
	}
	// boundary_recovery_envelope_ref names the event that recorded it.
	ref, ok := strings.CutPrefix(in.Batch.EnvelopeRef, "log:")
	var recorded struct {
		Type    string `json:"type"`
		Payload struct {
			Envelope struct {
				AttemptID string `json:"attempt_id"`
			} `json:"boundary_recovery_envelope"`
		} `json:"payload"`
	}
	if ex := h.run("events", "export", "--from", ref); !ok || ex.code != 0 || json.Unmarshal([]byte(strings.SplitN(ex.stdout, "\n", 2)[0]), &recorded) != nil ||
		recorded.Type != "batch.handoff_recorded" || recorded.Payload.Envelope.AttemptID != r.AttemptID {
		t.Fatalf("boundary_recovery_envelope_ref %q does not name the handoff event: %+v", in.Batch.EnvelopeRef, recorded)
	}
	// The FIFO moved on: the thread's next batch is offered (once the
	// armed generation is proven paused).
	h.desktopJob("S")
	if got := h.claim(); got.Ready != nil {
		t.Fatalf("offered while generation %d is not proven paused: %+v", r.Generation, got.Ready)
	}
	h.fails(time.Minute, "desktop", "note-paused", "--source-thread-id", "S", "--generation", strconv.FormatUint(r.Generation, 10),
		"--bridge-request-id", "wake-3").want(t, "EAGAIN", 69, "pause_too_early")
	h.advance("91s")
	var paused struct{ Outcome string }
	h.ok(&paused, "desktop", "note-paused", "--source-thread-id", "S", "--generation", strconv.FormatUint(r.Generation, 10), "--bridge-request-id", "wake-3")
	if paused.Outcome != "quiesced" {
		t.Fatalf("note-paused: %+v", paused)
	}
	h.preflight()
	next := h.claim().Ready
	if next == nil || next.BatchID == r.BatchID {
		t.Fatalf("the next batch is not offered: %+v", next)
	}
	// An older generation's pause is a no-op.
	h.fails(time.Minute, "desktop", "note-paused", "--source-thread-id", "S", "--generation", "0", "--bridge-request-id", "wake-4").want(t, "ESTALE", 1)
	// The envelope is kept until its retention (closed + post_close_ttl
	// here), then collected by the batch.recovery_gc sweep.
	h.advance("71h")
	h.ok(&in, "batch", "inspect", "--batch-id", r.BatchID)
	if in.Envelope == nil {
		t.Fatal("the envelope went before its retention")
	}
	h.advance("2h")
	var gone struct {
		Envelope *json.RawMessage `json:"boundary_recovery_envelope"`
	}
	h.ok(&gone, "batch", "inspect", "--batch-id", r.BatchID)
	if gone.Envelope != nil {
		t.Fatalf("the envelope outlived its retention: %s", *gone.Envelope)
	}
}

// armReady arms the ready entry through the two helpers, as a bridge
// wake does around its automation_update.
func (h *homeDir) armReady(r *inbox.ReadyEntry, request string) armed {
	h.t.Helper()
	var p armPending
	h.ok(&p, append([]string{"desktop", "note-arm-pending"}, tokenArgs(r, request)...)...)
	var a armed
	h.ok(&a, append([]string{"desktop", "note-arm"}, append(tokenArgs(r, request), "--bridge-arm-lease-id", p.Lease)...)...)
	return a
}

type batchState struct {
	Batch struct {
		Replay      string `json:"replay_policy"`
		Reason      string `json:"replay_policy_reason"`
		CloseReason string `json:"close_reason"`
		Count       int    `json:"delivery_attempt_count"`
	} `json:"batch"`
	Head *struct {
		State string `json:"state"`
	} `json:"head_attempt"`
}

func (h *homeDir) bindingState(thread string) (state, reason string) {
	h.t.Helper()
	var list []struct {
		Thread string `json:"source_thread_id"`
		State  string `json:"binding_state"`
		Reason string `json:"degraded_reason"`
	}
	h.ok(&list, "desktop", "binding", "list")
	for _, b := range list {
		if b.Thread == thread {
			return b.State, b.Reason
		}
	}
	return "", ""
}

// The arm_pending reconcile settles an unfinished arm in exactly one of
// the seed's three ways: armed (note-arm came), abandoned with the batch
// still automatic (the bridge proved the heartbeat paused), or, with no
// proof by arm_pending_deadline, abandoned + manual_resolution_only +
// binding degraded; a repair then gives a fresh generation.
func TestDesktop_ArmPendingReconcile(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.readyDesktop("P", "N")
	// Proven paused: abandoned, the batch stays automatic and is offered
	// again with a fresh generation.
	var p armPending
	c := h.claim().Ready
	for c.SourceThreadID != "P" {
		h.ok(nil, "batch", "skip-head", "--source-thread-id", c.SourceThreadID)
		h.preflight()
		c = h.claim().Ready
	}
	h.ok(&p, append([]string{"desktop", "note-arm-pending"}, tokenArgs(c, "wake-p")...)...)
	var paused struct{ Outcome string }
	h.ok(&paused, "desktop", "note-paused", "--source-thread-id", "P", "--generation", "1", "--bridge-request-id", "wake-p")
	if paused.Outcome != "arm_abandoned" {
		t.Fatalf("paused proof: %+v", paused)
	}
	var in batchState
	h.ok(&in, "batch", "inspect-head", "--source-thread-id", "P")
	if in.Batch.Replay != "automatic" || in.Batch.Count != 0 {
		t.Fatalf("after the paused proof: %+v", in.Batch)
	}
	// No proof by the deadline: the default outcome.
	var n *inbox.ReadyEntry
	for range 3 {
		h.preflight()
		if n = h.claim().Ready; n != nil && n.SourceThreadID == "N" {
			break
		}
		h.ok(nil, "batch", "skip-head", "--source-thread-id", n.SourceThreadID)
	}
	if n == nil || n.SourceThreadID != "N" {
		t.Fatalf("N never offered: %+v", n)
	}
	h.ok(&p, append([]string{"desktop", "note-arm-pending"}, tokenArgs(n, "wake-n")...)...)
	h.advance("6m") // past arm_pending_deadline (arm_lease 5m)
	h.ok(&in, "batch", "inspect-head", "--source-thread-id", "N")
	if in.Batch.Replay != "manual_resolution_only" || !strings.Contains(in.Batch.Reason, "arm_pending_deadline") {
		t.Fatalf("after the deadline: %+v", in.Batch)
	}
	if st, why := h.bindingState("N"); st != "degraded" || !strings.Contains(why, "arm_pending_deadline") {
		t.Fatalf("binding after the deadline: %s %s", st, why)
	}
	// A late note-arm finds the attempt settled: stale.
	h.fails(time.Minute, append([]string{"desktop", "note-arm"}, append(tokenArgs(n, "wake-n"), "--bridge-arm-lease-id", p.Lease)...)...).want(t, "ESTALE", 1)
}

// A generation armed and never proven paused by its pause_deadline
// degrades the binding; the live attempt is abandoned; the head stays
// open for the operator; a binding repair brings a fresh generation.
func TestDesktop_PauseDeadlineDegradesThenRepair(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.readyDesktop("S")
	r := h.claim().Ready
	a := h.armReady(r, "wake-1")
	if a.Outcome != "armed" {
		t.Fatalf("arm: %+v", a)
	}
	h.advance("3m1s") // past pause_deadline (90s + 90s)
	if st, why := h.bindingState("S"); st != "degraded" || !strings.Contains(why, "pause_deadline") {
		t.Fatalf("binding after the pause deadline: %s %s", st, why)
	}
	var in batchState
	h.ok(&in, "batch", "inspect-head", "--source-thread-id", "S")
	if in.Batch.CloseReason != "" || in.Head == nil || in.Head.State != "abandoned" {
		t.Fatalf("head after the degrade: %+v %+v", in.Batch, in.Head)
	}
	// The caller's late wake: the binding is no longer valid.
	f := h.fails(time.Minute, crossArgs(r)...)
	if f.Code != "stale_or_superseded" && f.Code != "binding_or_capability_invalid" {
		t.Fatalf("a wake after the degrade: %+v", f)
	}
	h.bind("S", "automation-S")
	h.preflight()
	if got := h.claim().Ready; got != nil {
		t.Fatalf("offered while generation %d is not proven paused: %+v", r.Generation, got)
	}
	var paused struct{ Outcome string }
	h.ok(&paused, "desktop", "note-paused", "--source-thread-id", "S", "--generation", "1", "--bridge-request-id", "wake-2")
	h.preflight()
	fresh := h.claim().Ready
	if fresh == nil || fresh.BatchID != r.BatchID || fresh.Generation <= r.Generation {
		t.Fatalf("after the repair: %+v (was %+v)", fresh, r)
	}
}

type leaseInspection struct {
	Leases []struct {
		ArtifactID string `json:"artifact_id"`
		LeaseID    string `json:"artifact_recovery_lease_id"`
	} `json:"artifact_recovery_leases"`
}

// bigArtifactBatch submits a Desktop job whose result (150 KiB) is over
// the inline limit and returns its bytes and the batch it joined.
func bigArtifactBatch(h *homeDir) ([]byte, string) {
	h.t.Helper()
	h.readyDesktop()
	h.bind("big", "automation-big")
	want := make([]byte, 150<<10)
	for i := range want {
		want[i] = byte(i * 7)
	}
	res := filepath.Join(h.t.TempDir(), "result.bin")
	if err := os.WriteFile(res, want, 0o600); err != nil {
		h.t.Fatal(err)
	}
	var sub struct {
		JobID string `json:"job_id"`
	}
	h.ok(&sub, "job", "submit", "--target", "desktop", "--thread-id", "big", "--task-kind", "ci", "--summary", "s",
		"--delivery-read-only", "true", "--delivery-requires-approval", "false", "--delivery-requires-network", "false", "--delivery-requires-write-access", "false")
	h.ok(nil, "job", "complete", "--job-id", sub.JobID, "--summary", "big result", "--result-file", res)
	var jv struct {
		Batch *struct {
			BatchID string `json:"batch_id"`
		}
	}
	h.ok(&jv, "job", "query", sub.JobID)
	if jv.Batch == nil {
		h.t.Fatal("the job joined no batch")
	}
	return want, jv.Batch.BatchID
}

// Reading a batch appends nothing, whatever its artifacts: inspect and
// inspect-head of a batch with an artifact too large to be inline issue
// no lease; one comes only from the explicit issue-artifact-leases,
// which inspect then shows, still appending nothing.
func TestBatchInspect_AppendsNothing(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	_, batch := bigArtifactBatch(h)
	head := h.head()
	var in leaseInspection
	for range 3 {
		h.ok(&in, "batch", "inspect", "--batch-id", batch)
		h.ok(nil, "batch", "inspect-head", "--source-thread-id", "big")
	}
	if len(in.Leases) != 0 || h.head() != head {
		t.Fatalf("inspecting appended %d events, showed leases %+v", h.head()-head, in.Leases)
	}
	var issued leaseInspection
	h.ok(&issued, "desktop", "issue-artifact-leases", "--batch-id", batch)
	if len(issued.Leases) != 1 || h.head() == head {
		t.Fatalf("issue-artifact-leases: %+v", issued)
	}
	head = h.head()
	h.ok(&in, "batch", "inspect", "--batch-id", batch)
	if len(in.Leases) != 1 || in.Leases[0].LeaseID != issued.Leases[0].LeaseID || h.head() != head {
		t.Fatalf("inspect after the issue: %+v, appended %d", in.Leases, h.head()-head)
	}
}

// A batch that needs an artifact read never takes the caller path; the
// operator recovers it: issue-artifact-leases issues a recovery lease
// (and the same one again while it is valid), read-artifact returns the
// bytes by chunks under it (never a path), and a lease ends when
// rotated, revoked or expired.
func TestDesktop_ArtifactRecoveryLeases(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	want, batch := bigArtifactBatch(h)
	var in leaseInspection
	h.ok(&in, "desktop", "issue-artifact-leases", "--batch-id", batch)
	if len(in.Leases) != 1 || in.Leases[0].LeaseID == "" {
		t.Fatalf("no recovery lease: %+v", in)
	}
	l := in.Leases[0]
	head := h.head()
	var again leaseInspection
	h.ok(&again, "desktop", "issue-artifact-leases", "--batch-id", batch)
	if again.Leases[0].LeaseID != l.LeaseID || h.head() != head {
		t.Fatal("a second issue replaced a valid lease")
	}
	read := func(lease string) []byte {
		var got []byte
		for off := int64(0); ; {
			var chunk struct {
				Data []byte `json:"data_base64"`
				Next int64  `json:"next_offset"`
				EOF  bool   `json:"eof"`
			}
			h.ok(&chunk, "desktop", "read-artifact", "--artifact-id", l.ArtifactID, "--artifact-read-lease-id", lease,
				"--offset", strconv.FormatInt(off, 10), "--max-bytes", "65536")
			got, off = append(got, chunk.Data...), chunk.Next
			if chunk.EOF {
				return got
			}
		}
	}
	if got := read(l.LeaseID); string(got) != string(want) {
		t.Fatalf("read %d bytes, not the artifact's %d", len(got), len(want))
	}
	readFails := func(lease string) {
		t.Helper()
		h.fails(time.Minute, "desktop", "read-artifact", "--artifact-id", l.ArtifactID, "--artifact-read-lease-id", lease,
			"--offset", "0", "--max-bytes", "10").want(t, "ESTALE", 1)
	}
	readFails("arl-guessed")
	var rot leaseInspection
	h.ok(&rot, "desktop", "issue-artifact-leases", "--batch-id", batch, "--rotate")
	if rot.Leases[0].LeaseID == l.LeaseID {
		t.Fatal("rotation kept the lease")
	}
	readFails(l.LeaseID)
	read(rot.Leases[0].LeaseID)
	h.ok(nil, "desktop", "revoke-artifact-lease", "--artifact-id", l.ArtifactID)
	readFails(rot.Leases[0].LeaseID)
	var after leaseInspection
	h.ok(&after, "batch", "inspect", "--batch-id", batch)
	if len(after.Leases) != 0 {
		t.Fatalf("inspect shows a revoked lease: %+v", after.Leases)
	}
	h.ok(&in, "desktop", "issue-artifact-leases", "--batch-id", batch)
	h.advance("16m") // past recovery_lease (15m)
	readFails(in.Leases[0].LeaseID)
}

// The caller path stays off unless the binding and the installation are
// still the validated ones: a caller cbth from another place, or an
// installation repaired since the arm, gets binding_or_capability_invalid
// and nothing is appended.
func TestDesktop_CrossingNeedsValidatedCapabilities(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.readyDesktop("S")
	r := h.claim().Ready
	h.armReady(r, "wake-1")
	moved := filepath.Join(t.TempDir(), "elsewhere", "cbth")
	if err := os.MkdirAll(filepath.Dir(moved), 0o700); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(cbthBin); err != nil || execfile.Put(moved, b, 0o700) != nil {
		t.Fatalf("copy the binary: %v", err)
	}
	head := h.head()
	c := exec.Command(moved, append(crossArgs(r), "--json")...)
	c.Env = append(os.Environ(), h.env...)
	out, err := c.Output()
	if err == nil || !strings.Contains(string(out), `"binding_or_capability_invalid"`) {
		t.Fatalf("a caller from another place: %v\n%s", err, out)
	}
	h.repair("--read-transport", "direct_file_read", "--read-transport-capability", "validated", "--writeback-capability", "unavailable")
	afterRepair := h.head()
	h.fails(time.Minute, crossArgs(r)...).want(t, "binding_or_capability_invalid", 1)
	if afterRepair != head+3 || h.head() != afterRepair {
		t.Fatalf("refused crossings appended: head %d, %d after the repair, %d now", head, afterRepair, h.head())
	}
}

// A caller heartbeat inside the (emulated) Desktop sandbox cannot reach
// the daemon: note-boundary-crossed tries the socket and the start-up
// lock once each, is refused, and answers transient_not_ready with
// nothing sent; the batch stays as it was.
func TestDesktop_CallerInTheSandboxSendsNothing(t *testing.T) {
	t.Parallel()
	if err := desktopsim.Tools(); err != nil {
		t.Fatal(err)
	}
	h := liveDesktopHome(t, "snapshot_interval = \"1s\"\nsnapshot_max_age = \"3s\"\n")
	h.readyDesktop("S")
	waitFor(t, "the thread offered", 10*time.Second, func() bool { return len(h.readyThreads()) == 1 })
	r := h.claim().Ready
	h.armReady(r, "wake-1")
	head := h.head()
	sim := &desktopsim.Bridge{Bin: cbthBin, Home: h.root, ThreadID: bridge, Sandbox: desktopsim.Sandbox{Home: h.root, Dir: t.TempDir()}}
	var out any
	res, err := sim.Helper(&out, sim.PreflightAllow(), crossArgs(r)[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	if res.Code == 0 || !strings.Contains(res.Stdout, `"transient_not_ready"`) || !strings.Contains(res.Stdout, "nothing was sent") {
		t.Fatalf("a sandboxed caller: %s", res)
	}
	if h.head() != head {
		t.Fatal("a sandboxed caller changed the log")
	}
	var in batchState
	h.ok(&in, "batch", "inspect-head", "--source-thread-id", "S")
	if in.Batch.CloseReason != "" || in.Head == nil || in.Head.State != "cooldown" {
		t.Fatalf("the batch after a sandboxed caller: %+v %+v", in.Batch, in.Head)
	}
}
