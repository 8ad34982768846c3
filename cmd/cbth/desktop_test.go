package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/internal/execfile"
	"github.com/cbth-dev/cbth/internal/testkit/desktopsim"
	"github.com/cbth-dev/cbth/projections/inbox"
)

// Codex Desktop, part 1, through the real binary: the installation state,
// bindings, the daemon-published snapshots and the sandbox-safe readers.
// spec/desktop.md names the test of every rule.

const bridge = "bridge-thread"

// desktopHome is a home whose daemon runs on the manual clock, with no
// merge window, so a completed job's batch is a head at once.
func desktopHome(t *testing.T, extra ...string) *homeDir {
	t.Helper()
	h := newHome(t, append([]string{"CBTH_TEST_CLOCK=" + testClock}, extra...)...)
	h.config("[delivery]\nmax_wait_window = \"0s\"\nmin_send_interval = \"0s\"\n")
	return h
}

// liveDesktopHome is a home whose daemon runs on the system clock (the
// sandbox fallback compares the manifest's freshness with the real time).
func liveDesktopHome(t *testing.T, desktop string) *homeDir {
	t.Helper()
	h := newHome(t)
	h.config("[delivery]\nmax_wait_window = \"0s\"\nmin_send_interval = \"0s\"\n\n[desktop]\n" + desktop)
	return h
}

// freshUntil is the published manifest's fresh_until.
func (h *homeDir) freshUntil() time.Time {
	h.t.Helper()
	var m inbox.Manifest
	b, err := os.ReadFile(filepath.Join(h.root, "inbox", inbox.ManifestName))
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil || m.FreshUntil.IsZero() {
		h.t.Fatalf("the manifest's fresh_until: %v (%s)", err, b)
	}
	return m.FreshUntil
}

func (h *homeDir) config(toml string) {
	h.t.Helper()
	if err := os.MkdirAll(h.root, 0o700); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.root, "config.toml"), []byte(toml), 0o600); err != nil {
		h.t.Fatal(err)
	}
}

type installationView struct {
	Outcome               string   `json:"outcome"`
	Configured            bool     `json:"configured"`
	ReadTransport         string   `json:"read_transport"`
	Generation            uint64   `json:"read_transport_generation"`
	ReadCap               string   `json:"read_transport_capability"`
	ArtifactCap           string   `json:"artifact_read_capability"`
	WritebackCap          string   `json:"writeback_capability"`
	Fingerprint           string   `json:"validation_fingerprint"`
	ValidatedAt           *string  `json:"validated_at"`
	Observed              string   `json:"observed_validation_fingerprint"`
	FingerprintMatch      bool     `json:"fingerprint_match"`
	AutomaticContinuation bool     `json:"automatic_continuation"`
	Degraded              []string `json:"degraded_bindings"`
}

func (h *homeDir) repair(args ...string) installationView {
	h.t.Helper()
	var v installationView
	h.ok(&v, append([]string{"desktop", "installation-state", "repair"}, args...)...)
	return v
}

// validate sets the installation up as a live validation would leave it.
func (h *homeDir) validate() installationView {
	h.t.Helper()
	return h.repair("--read-transport", "direct_file_read", "--read-transport-capability", "validated", "--writeback-capability", "validated")
}

type bindingView struct {
	Outcome             string `json:"outcome"`
	BindingID           string `json:"binding_id"`
	State               string `json:"binding_state"`
	Automation          string `json:"caller_automation_id"`
	ReadCap             string `json:"read_transport_capability"`
	ArtifactCap         string `json:"artifact_read_capability"`
	WritebackCap        string `json:"writeback_capability"`
	Generation          uint64 `json:"read_transport_generation"`
	MirrorMatches       bool   `json:"mirror_matches"`
	DegradedReason      string `json:"degraded_reason"`
	Replaced            bool   `json:"replaced_automation"`
	OldQuiesced         bool   `json:"old_automation_quiesced"`
	ForcedFreshAttempt  bool   `json:"forced_fresh_attempt"`
	SupersededAttemptID string `json:"superseded_attempt_id"`
}

func (h *homeDir) bind(thread, automation string) bindingView {
	h.t.Helper()
	var v bindingView
	h.ok(&v, "desktop", "binding", "repair", "--source-thread-id", thread, "--caller-automation-id", automation)
	return v
}

func (h *homeDir) preflight() {
	h.t.Helper()
	var p struct {
		Source string `json:"source"`
	}
	h.ok(&p, "desktop", "bridge-preflight", "--bridge-thread-id", bridge)
	if p.Source != "daemon" {
		h.t.Fatalf("preflight outside the sandbox answered from %q, want the daemon", p.Source)
	}
}

// desktopJob submits and completes a read-only, low-risk Desktop job.
func (h *homeDir) desktopJob(thread string, extra ...string) string {
	h.t.Helper()
	var res struct {
		JobID string `json:"job_id"`
	}
	h.ok(&res, append([]string{"job", "submit", "--target", "desktop", "--thread-id", thread, "--task-kind", "ci", "--summary", "wait",
		"--delivery-read-only", "true", "--delivery-requires-approval", "false", "--delivery-requires-network", "false",
		"--delivery-requires-write-access", "false"}, extra...)...)
	h.ok(nil, "job", "complete", "--job-id", res.JobID, "--summary", "CI is green")
	return res.JobID
}

func (h *homeDir) claim() inbox.Claim {
	h.t.Helper()
	var c inbox.Claim
	h.ok(&c, "desktop", "claim-next-ready", "--bridge-thread-id", bridge)
	return c
}

// readyThreads reads the current revision's ready entries directly.
func (h *homeDir) readyThreads() []string {
	h.t.Helper()
	d, err := desktopsim.ReadDirect(filepath.Join(h.root, "inbox"), bridge)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, e := range d.Ready.Entries {
		out = append(out, e.SourceThreadID)
	}
	return out
}

func (h *homeDir) head() uint64 { h.t.Helper(); return h.status().LogHeadSeq }

// A bound, validated thread with a low-risk ready job is offered to the
// bridge: prepared (never armed), in the published ready set.
func (h *homeDir) readyDesktop(threads ...string) {
	h.t.Helper()
	h.validate()
	for _, th := range threads {
		h.bind(th, "automation-"+th)
	}
	h.preflight()
	for _, th := range threads {
		h.desktopJob(th)
	}
}

func TestDesktop_RepeatedRepairAppendsNothing(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	var before installationView
	h.ok(&before, "desktop", "installation-state")
	if before.Configured || before.Generation != 0 || before.ReadCap != "unknown" || before.Observed == "" {
		t.Fatalf("before any repair: %+v", before)
	}
	first := h.validate()
	if first.Outcome != "repaired" || first.Generation != 1 || first.ValidatedAt == nil || !first.FingerprintMatch || first.Fingerprint != before.Observed {
		t.Fatalf("first repair: %+v", first)
	}
	head := h.head()
	h.advance("1h")
	again := h.validate()
	if again.Outcome != "unchanged" || again.Generation != 1 || *again.ValidatedAt != *first.ValidatedAt || h.head() != head {
		t.Fatalf("repeated repair: %+v, log head %d -> %d", again, head, h.head())
	}
}

func TestDesktop_TransportChangeResetsToUnknownAndBumps(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.repair("--read-transport", "direct_file_read", "--read-transport-capability", "validated",
		"--artifact-read-capability", "unavailable", "--writeback-capability", "validated")
	v := h.repair("--read-transport", "helper_cli_read")
	if v.Outcome != "repaired" || v.ReadTransport != "helper_cli_read" || v.Generation != 2 || v.ValidatedAt != nil ||
		v.ReadCap != "unknown" || v.ArtifactCap != "unknown" || v.WritebackCap != "unknown" || v.AutomaticContinuation {
		t.Fatalf("transport change without capabilities: %+v", v)
	}
	if r := h.run("desktop", "installation-state", "repair", "--read-transport", "carrier_pigeon", "--json"); r.code != 2 {
		t.Fatalf("an unknown transport: exit %d %s", r.code, r.stdout)
	}
}

func TestDesktop_MismatchedBindingsGoDegraded(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.readyDesktop("S1", "S2")
	if got := h.readyThreads(); strings.Join(got, ",") != "S1,S2" {
		t.Fatalf("ready %v", got)
	}
	b := h.bind("S1", "automation-S1")
	if b.Outcome != "unchanged" || b.ReadCap != "validated" || b.WritebackCap != "validated" || b.ArtifactCap != "unknown" || !b.MirrorMatches {
		t.Fatalf("repeated binding repair must echo the mirrors and change nothing: %+v", b)
	}
	// Any real change of the installation state bumps its generation, so
	// every binding made under the old one no longer matches.
	v := h.repair("--read-transport", "direct_file_read", "--read-transport-capability", "validated",
		"--writeback-capability", "validated", "--artifact-read-capability", "unavailable")
	if v.Generation != 2 || strings.Join(v.Degraded, ",") != "S1,S2" {
		t.Fatalf("repair: %+v", v)
	}
	var list []bindingView
	h.ok(&list, "desktop", "binding", "list")
	for _, b := range list {
		if b.State != "degraded" || b.MirrorMatches || !strings.Contains(b.DegradedReason, "generation 2") {
			t.Fatalf("binding after the repair: %+v", b)
		}
	}
	if got := h.readyThreads(); len(got) != 0 {
		t.Fatalf("degraded threads still ready: %v", got)
	}
	if b := h.bind("S2", "automation-S2"); b.State != "bound" || b.Generation != 2 || !b.MirrorMatches {
		t.Fatalf("repaired binding: %+v", b)
	}
	if got := h.readyThreads(); strings.Join(got, ",") != "S2" {
		t.Fatalf("ready after repairing S2: %v", got)
	}
}

func TestDesktop_UnboundThreadNeverReady(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.readyDesktop("S")
	h.desktopJob("U") // submitting works without a binding
	if got := h.readyThreads(); strings.Join(got, ",") != "S" {
		t.Fatalf("ready %v, want only the bound thread", got)
	}
	var in struct {
		Gate string `json:"delivery_gate"`
	}
	h.ok(&in, "batch", "inspect-head", "--source-thread-id", "U")
	if !strings.Contains(in.Gate, "not bound") {
		t.Fatalf("gate of the unbound thread: %q", in.Gate)
	}
	h.bind("U", "automation-U")
	if got := h.readyThreads(); strings.Join(got, ",") != "S,U" {
		t.Fatalf("ready after binding U: %v", got)
	}
	var un struct {
		Outcome string `json:"outcome"`
		State   string `json:"binding_state"`
	}
	h.ok(&un, "desktop", "binding", "unbind", "--source-thread-id", "U", "--delete-automation", "false")
	if un.Outcome != "unbound" || un.State != "unbound" {
		t.Fatalf("unbind: %+v", un)
	}
	if got := h.readyThreads(); strings.Join(got, ",") != "S" {
		t.Fatalf("ready after unbinding U: %v", got)
	}
}

func TestDesktop_PeekAppendsNothing(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.readyDesktop("S")
	manifest := filepath.Join(h.root, "inbox", inbox.ManifestName)
	before, _ := os.ReadFile(manifest)
	head := h.head()
	first := h.claim()
	if first.Ready == nil || first.Ready.SourceThreadID != "S" || first.Binding.CallerAutomationID != "automation-S" || first.NotReadyReason != "" {
		t.Fatalf("claim: %+v", first)
	}
	for range 3 {
		if c := h.claim(); !reflect.DeepEqual(c, first) {
			t.Fatalf("a second peek differs: %+v", c)
		}
		h.ok(nil, "desktop", "list-arm-pending", "--bridge-thread-id", bridge)
		h.ok(nil, "desktop", "list-pause-due", "--bridge-thread-id", bridge)
	}
	after, _ := os.ReadFile(manifest)
	if h.head() != head || string(before) != string(after) {
		t.Fatalf("peeking changed the log (%d -> %d) or the manifest", head, h.head())
	}
	var in struct {
		Attempts []struct {
			State string `json:"state"`
		} `json:"attempts"`
		Batch struct {
			Count int `json:"delivery_attempt_count"`
		} `json:"batch"`
	}
	h.ok(&in, "batch", "inspect-head", "--source-thread-id", "S")
	if len(in.Attempts) != 1 || in.Attempts[0].State != "prepared" || in.Batch.Count != 0 {
		t.Fatalf("after the peeks: %+v", in)
	}
}

// A binding repair that replaces the caller automation supersedes the
// offered attempt: the bridge sees a fresh attempt and generation.
func TestDesktop_ReplacedAutomationGetsAFreshGeneration(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.readyDesktop("S")
	old := h.claim().Ready
	b := h.bind("S", "automation-new")
	if b.Outcome != "bound" || !b.Replaced || !b.OldQuiesced || !b.ForcedFreshAttempt || b.SupersededAttemptID != old.AttemptID {
		t.Fatalf("replace: %+v", b)
	}
	c := h.claim()
	if c.Ready == nil || c.Ready.AttemptID == old.AttemptID || c.Ready.Generation != old.Generation+1 || c.Binding.CallerAutomationID != "automation-new" {
		t.Fatalf("after the replace: %+v (was %+v)", c, old)
	}
}

// Batches Desktop v1 never continues automatically (one that needs an
// artifact read, one whose policy is not read-only and low-risk) go to
// manual resolution at once and are never offered.
func TestDesktop_OperatorPathBatchesAreParked(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.readyDesktop()
	h.bind("big", "automation-big")
	h.bind("risky", "automation-risky")
	res := filepath.Join(t.TempDir(), "result.bin")
	if err := os.WriteFile(res, make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	var sub struct {
		JobID string `json:"job_id"`
	}
	h.ok(&sub, "job", "submit", "--target", "desktop", "--thread-id", "big", "--task-kind", "ci", "--summary", "s",
		"--delivery-read-only", "true", "--delivery-requires-approval", "false", "--delivery-requires-network", "false", "--delivery-requires-write-access", "false")
	h.ok(nil, "job", "complete", "--job-id", sub.JobID, "--summary", "big result", "--result-file", res)
	h.ok(&sub, "job", "submit", "--target", "desktop", "--thread-id", "risky", "--task-kind", "ci", "--summary", "s")
	h.ok(nil, "job", "complete", "--job-id", sub.JobID, "--summary", "done")
	for th, want := range map[string]string{"big": "requires_artifact_read", "risky": "not read-only and low-risk"} {
		var in struct {
			Batch struct {
				Replay string `json:"replay_policy"`
				Reason string `json:"replay_policy_reason"`
			} `json:"batch"`
		}
		h.ok(&in, "batch", "inspect-head", "--source-thread-id", th)
		if in.Batch.Replay != "manual_resolution_only" || !strings.Contains(in.Batch.Reason, want) {
			t.Fatalf("%s: %+v", th, in.Batch)
		}
	}
	if got := h.readyThreads(); len(got) != 0 {
		t.Fatalf("operator-path batches offered: %v", got)
	}
}

// The fingerprint covers where the binary is: a cbth run from another
// place does not count as validated, whether it reads the snapshot or
// runs the daemon that publishes it.
func TestDesktop_FingerprintChangeUnvalidates(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.readyDesktop("S")
	moved := filepath.Join(t.TempDir(), "elsewhere", "cbth")
	if err := os.MkdirAll(filepath.Dir(moved), 0o700); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(cbthBin); err != nil || execfile.Put(moved, b, 0o700) != nil {
		t.Fatalf("copy the binary: %v", err)
	}
	other := func(out any, args ...string) {
		t.Helper()
		c := exec.Command(moved, append(args, "--json")...)
		c.Env = append(os.Environ(), h.env...)
		b, err := c.Output()
		if err != nil {
			t.Fatalf("moved cbth %v: %v\n%s", args, err, b)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
	var v installationView
	other(&v, "desktop", "installation-state")
	if v.FingerprintMatch || v.AutomaticContinuation || v.Observed == v.Fingerprint {
		t.Fatalf("installation-state from another place: %+v", v)
	}
	var c inbox.Claim
	other(&c, "desktop", "claim-next-ready", "--bridge-thread-id", bridge)
	if c.Ready != nil || c.NotReadyReason != "fingerprint_mismatch" {
		t.Fatalf("claim from another place: %+v", c)
	}
	// The daemon run from there publishes nothing ready either.
	h.ok(nil, "daemon", "stop")
	other(&v, "desktop", "installation-state") // starts the moved daemon
	d, err := desktopsim.ReadDirect(filepath.Join(h.root, "inbox"), bridge)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Ready.Entries) != 0 || d.Installation.AutomaticContinuation || d.Installation.ObservedValidationFingerprint != v.Observed {
		t.Fatalf("published by the moved daemon: ready %+v installation %+v", d.Ready.Entries, d.Installation)
	}
}

// The snapshot files are a projection: deleted, they come back.
func TestDesktop_InboxIsAProjection(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.readyDesktop("S1", "S2")
	before, err := desktopsim.ReadDirect(filepath.Join(h.root, "inbox"), bridge)
	if err != nil {
		t.Fatal(err)
	}
	h.ok(nil, "daemon", "stop")
	if err := os.RemoveAll(filepath.Join(h.root, "inbox")); err != nil {
		t.Fatal(err)
	}
	h.status() // restarts the daemon, which publishes again
	after, err := desktopsim.ReadDirect(filepath.Join(h.root, "inbox"), bridge)
	if err != nil {
		t.Fatalf("after a restart without an inbox: %v", err)
	}
	if !reflect.DeepEqual(before.Ready.Entries, after.Ready.Entries) || !reflect.DeepEqual(before.Bindings.Entries, after.Bindings.Entries) {
		t.Fatalf("republished content differs:\n%+v\n%+v", before.Ready.Entries, after.Ready.Entries)
	}
	// Deleted under a running daemon, the next publication writes it all.
	if err := os.RemoveAll(filepath.Join(h.root, "inbox")); err != nil {
		t.Fatal(err)
	}
	h.preflight()
	if got := h.readyThreads(); strings.Join(got, ",") != "S1,S2" {
		t.Fatalf("ready after deleting the inbox under the daemon: %v", got)
	}
}

// Snapshot revisions are never used twice, even when the inbox, which
// is a projection, is deleted: they come from the log, which reserves
// them by blocks, and each daemon start takes the next block.
func TestDesktop_RevisionsNeverReusedAfterTheInboxIsDeleted(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.readyDesktop("S1")
	rev := func() uint64 {
		t.Helper()
		d, err := desktopsim.ReadDirect(filepath.Join(h.root, "inbox"), bridge)
		if err != nil {
			t.Fatal(err)
		}
		return d.Manifest.SnapshotRevision
	}
	seen := rev()
	for i, restart := range []bool{true, true, false} {
		if restart {
			h.ok(nil, "daemon", "stop")
		}
		if err := os.RemoveAll(filepath.Join(h.root, "inbox")); err != nil {
			t.Fatal(err)
		}
		if restart {
			h.status() // restarts the daemon, which publishes again
		} else {
			h.preflight() // deleted under the running daemon
		}
		if got := rev(); got <= seen {
			t.Fatalf("round %d: revision %d published again after %d", i, got, seen)
		}
		seen = rev()
		th := "S" + strconv.Itoa(i+2) // the content moves on
		h.bind(th, "automation-"+th)
		h.desktopJob(th)
		h.preflight()
		if got := rev(); got <= seen {
			t.Fatalf("round %d: revision %d after %d", i, got, seen)
		}
		seen = rev()
	}
	if got := h.events("installation.snapshot_revisions_reserved"); len(got) < 3 {
		t.Fatalf("reservations in the log: %d, want one per start", len(got))
	}
}

// The readers fail closed through the binary: a refusal is a non-zero
// exit with its code in the JSON, and no reader starts the daemon. Every
// inconsistency and its code is projections/inbox's
// TestReadersFailClosed.
func TestDesktop_ReadersFailClosed(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.readyDesktop("S")
	h.ok(nil, "daemon", "stop")
	dir := filepath.Join(h.root, "inbox")
	d, err := desktopsim.ReadDirect(dir, bridge)
	if err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(dir, d.Manifest.Files.ReadyThreads)
	manifest := filepath.Join(dir, inbox.ManifestName)
	expect := func(name, code string, args ...string) {
		t.Helper()
		if len(args) == 0 {
			args = []string{"claim-next-ready", "--bridge-thread-id", bridge}
		}
		r := h.run(append(append([]string{"desktop"}, args...), "--json")...)
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		json.Unmarshal([]byte(r.stdout), &e)
		if r.code == 0 || e.Error.Code != code {
			t.Fatalf("%s: exit %d, code %q, want %s\n%s%s", name, r.code, e.Error.Code, code, r.stdout, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(h.root, "run", "cbth.sock")); err == nil {
			t.Fatalf("%s: a reader started the daemon", name)
		}
	}
	expect("bridge thread mismatch", "ESTALE", "claim-next-ready", "--bridge-thread-id", "another-bridge")
	os.Remove(ready)
	if err := syscall.Mkfifo(ready, 0o600); err != nil {
		t.Fatal(err)
	}
	expect("a FIFO in a file's place", "EACCES")
	os.Remove(manifest)
	expect("no manifest", "ENOENT", "list-pause-due", "--bridge-thread-id", bridge)
}

// bridge-preflight: through the daemon outside the sandbox (starting it if
// need be); inside, the published manifest if it is fresh, else it fails
// closed. Every helper of a bridge wake passes inside the emulated
// heartbeat sandbox: nothing written, locked, connected or started.
func TestDesktop_BridgeWakeInTheSandbox(t *testing.T) {
	t.Parallel()
	if err := desktopsim.Tools(); err != nil {
		t.Fatal(err)
	}
	h := liveDesktopHome(t, "snapshot_interval = \"1s\"\nsnapshot_max_age = \"3s\"\n")
	h.readyDesktop("S1", "S2")
	waitFor(t, "both threads offered", 10*time.Second, func() bool { return len(h.readyThreads()) == 2 })
	sim := &desktopsim.Bridge{Bin: cbthBin, Home: h.root, ThreadID: bridge,
		Sandbox: desktopsim.Sandbox{Home: h.root, Dir: t.TempDir()}}
	w, err := sim.Wake()
	if err != nil {
		t.Fatal(err)
	}
	if w.Failed != nil || w.Preflight.Source != "snapshot" || w.Preflight.Outcome != "fresh" || !w.Preflight.AutomaticContinuation ||
		w.Preflight.FallbackReason == "" || w.Claim.Ready == nil || w.Claim.Ready.SourceThreadID != "S1" || w.Claim.Binding.CallerAutomationID != "automation-S1" {
		t.Fatalf("wake: %+v", w)
	}
	// The trace is not blind: a command that reaches for the daemon shows
	// its attempts as violations.
	r, err := sim.Sandbox.Run([]string{"CBTH_HOME=" + h.root}, nil, cbthBin, "--home", h.root, "job", "list", "--json")
	if err != nil || r.Code == 0 || len(r.Violations) == 0 {
		t.Fatalf("job list in the sandbox: %v %s", err, r)
	}
	// The daemon keeps confirming the manifest while it runs: once the
	// first confirmation has run out, a later one stands.
	first := h.freshUntil()
	waitFor(t, "the manifest confirmed again past "+first.Format(time.RFC3339Nano), 20*time.Second, func() bool {
		return time.Now().After(first) && h.freshUntil().After(first)
	})
	if w, err = sim.Wake(); err != nil || w.Failed != nil {
		t.Fatalf("a wake after the first confirmation ran out, the daemon running: %v %+v", err, w.Failed)
	}
	// Without the daemon the manifest goes stale and preflight fails
	// closed, still inside the sandbox's rules. The readers judge it by
	// the system clock, so the test waits until that passes the last
	// confirmation's fresh_until, read from the manifest.
	h.ok(nil, "daemon", "stop")
	last := h.freshUntil()
	waitFor(t, "the manifest to go stale at "+last.Format(time.RFC3339Nano), 20*time.Second, func() bool { return time.Now().After(last) })
	if w, err = sim.Wake(); err != nil {
		t.Fatal(err)
	}
	if w.Failed == nil || !strings.Contains(w.Failed.Stdout, `"ESTALE"`) || !strings.Contains(w.Failed.Stdout, "stale") {
		t.Fatalf("a wake with a stale manifest did not fail closed: %+v", w)
	}
	// Outside the sandbox, preflight starts the daemon and publishes.
	h.preflight()
	if w, err = sim.Wake(); err != nil || w.Failed != nil {
		t.Fatalf("after a preflight outside: %v %+v", err, w.Failed)
	}
	// Stopped first: a running daemon republishes within its 1 s interval.
	h.ok(nil, "daemon", "stop")
	if err := os.RemoveAll(filepath.Join(h.root, "inbox")); err != nil {
		t.Fatal(err)
	}
	if w, err = sim.Wake(); err != nil || w.Failed == nil || !strings.Contains(w.Failed.Stdout, `"ENOENT"`) {
		t.Fatalf("a wake without any snapshot: %v %+v", err, w.Failed)
	}
}
