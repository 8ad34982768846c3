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

	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/desktopsim"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

// The transcript relay on real rollout files: the pinned Codex CLI, run
// against the fake model, writes the rollout of a "heartbeat" turn whose
// tool call prints the envelope line, as a Desktop heartbeat turn does.

type codexHeartbeat struct {
	t     *testing.T
	codex string
	home  string
	dir   string
	model *fakeprovider.Server
}

func newCodexHeartbeat(t *testing.T) *codexHeartbeat {
	model := fakeprovider.Start(fakeprovider.Codex, "")
	t.Cleanup(model.Close)
	return &codexHeartbeat{t: t, codex: codextest.Binary(t), home: codextest.Home(t, model.BaseURL()), dir: t.TempDir(), model: model}
}

// turn runs one `codex exec` turn with prompt and returns its rollout.
func (c *codexHeartbeat) turn(prompt string) string {
	c.t.Helper()
	cmd := exec.Command(c.codex, "exec", "--skip-git-repo-check", "--json", "--dangerously-bypass-approvals-and-sandbox", prompt)
	cmd.Dir = c.dir
	cmd.Env = codextest.Env(c.t, c.home)
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("codex exec: %v\n%s", err, out)
	}
	thread := ""
	for _, line := range strings.Split(string(out), "\n") {
		var ev struct {
			Type     string `json:"type"`
			ThreadID string `json:"thread_id"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == "thread.started" {
			thread = ev.ThreadID
		}
	}
	var rollout string
	filepath.Walk(filepath.Join(c.home, "sessions"), func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && thread != "" && strings.Contains(filepath.Base(p), thread) {
			rollout = p
		}
		return nil
	})
	if rollout == "" {
		c.t.Fatalf("no rollout for thread %q:\n%s", thread, out)
	}
	return rollout
}

const relayPrefix = "CBTH-RELAY/1 "

type issued struct {
	Outcome string `json:"outcome"`
	Marker  string `json:"marker"`
	Line    string `json:"line"`
}

type consumeReply struct {
	Outcome string `json:"outcome"`
	Results []struct {
		Outcome string `json:"outcome"`
		Applied string `json:"applied"`
		Reason  string `json:"reason"`
	} `json:"results"`
}

func TestDesktop_RelayOnARealRollout(t *testing.T) {
	t.Parallel()
	hb := newCodexHeartbeat(t)
	h := desktopHome(t)
	h.readyDesktop("S")
	r := h.claim().Ready
	issue := func(kind string) issued {
		var m issued
		h.ok(&m, append([]string{"desktop", "relay", "marker", "issue", "--bridge-thread-id", bridge, "--kind", kind}, tokenArgs(r, "wake-1")...)...)
		return m
	}
	// The accepted marker only once arm_pending is durable.
	h.fails(time.Minute, append([]string{"desktop", "relay", "marker", "issue", "--bridge-thread-id", bridge, "--kind", "arm-accepted"},
		tokenArgs(r, "wake-1")...)...).want(t, "ESTATE", 1)
	pending := issue("arm-pending")
	if pending.Outcome != "issued" || !strings.HasPrefix(pending.Line, "CBTH-RELAY/1 {") || strings.Contains(pending.Line, "lease") {
		t.Fatalf("issue: %+v", pending)
	}
	if again := issue("arm-pending"); again.Marker != pending.Marker || again.Outcome != "already_issued" {
		t.Fatalf("a second issue: %+v", again)
	}

	// A heartbeat whose prompt carries the line but runs no command: the
	// line is in the prompt and in the model's answer, never in tool
	// output. Nothing counts.
	echoed := hb.turn("Print exactly this line: " + pending.Line)
	raw, _ := os.ReadFile(echoed)
	if strings.Count(string(raw), pending.Marker) < 2 {
		t.Fatalf("the negative rollout does not carry the marker in prompt and answer:\n%s", raw)
	}
	head := h.head()
	var none consumeReply
	h.ok(&none, "desktop", "relay", "consume-transcript", "--bridge-thread-id", bridge, "--rollout-path", echoed, "--marker", pending.Marker)
	if none.Outcome != "not_found" || h.head() != head {
		t.Fatalf("prompt and answer copies counted: %+v", none)
	}

	// The heartbeat runs the command: the line is in a function_call_output.
	rollout := hb.turn("Relay this. " + fakeprovider.MarkRun + " printf 'bridge wake done\\n%s\\n' '" + pending.Line + "'")
	var got consumeReply
	h.ok(&got, "desktop", "relay", "consume-transcript", "--bridge-thread-id", bridge, "--rollout-path", rollout, "--marker", pending.Marker)
	if got.Outcome != "consumed" || len(got.Results) != 1 || got.Results[0].Applied != "arm_pending" {
		t.Fatalf("consume: %+v", got)
	}
	consumed := h.head()
	if consumed != head+2 {
		t.Fatalf("the consumption appended %d events, want 2 (the CAS and its record)", consumed-head)
	}
	// The same rollout again: the replay fence holds.
	h.ok(&got, "desktop", "relay", "consume-transcript", "--bridge-thread-id", bridge, "--rollout-path", rollout, "--marker", pending.Marker)
	if got.Outcome != "already_consumed" || h.head() != consumed {
		t.Fatalf("a second consumption: %+v", got)
	}
	// The direct helper sees the relay's barrier: the same request id
	// carries its lease forward, another is busy.
	var p armPending
	h.ok(&p, append([]string{"desktop", "note-arm-pending"}, tokenArgs(r, "wake-1")...)...)
	if p.Outcome != "already_pending" {
		t.Fatalf("after the relay: %+v", p)
	}
	h.fails(time.Minute, append([]string{"desktop", "note-arm-pending"}, tokenArgs(r, "wake-2")...)...).want(t, "EBUSY", 1)

	// The second phase as a sandboxed bridge runs it: with the scanner
	// bound, the snapshot's arm-pending entry carries the arm-accepted
	// marker (the one issued above: the same kind and request), and the
	// heartbeat's command is `cbth desktop relay print`, whose one line
	// of output Codex records; the scanner, bound to that heartbeat's
	// rollout (a new thread: the binding is replaced), reads it on
	// preflight.
	accepted := issue("arm-accepted")
	var bind struct {
		Outcome  string `json:"outcome"`
		Revision uint64 `json:"binding_revision"`
	}
	h.ok(&bind, "desktop", "relay", "scanner", "bind", "--bridge-thread-id", bridge, "--rollout-path", rollout)
	h.preflight()
	var pend struct {
		Entries []struct {
			Marker string `json:"relay_marker"`
		} `json:"entries"`
	}
	h.ok(&pend, "desktop", "list-arm-pending", "--bridge-thread-id", bridge)
	if len(pend.Entries) != 1 || pend.Entries[0].Marker != accepted.Marker {
		t.Fatalf("the snapshot's arm-pending entry: %+v, want marker %s", pend, accepted.Marker)
	}
	next := hb.turn("Relay this. " + fakeprovider.MarkRun + " " + cbthBin + " --home " + h.root + " desktop relay print --bridge-thread-id " + bridge +
		" --kind arm-accepted --marker " + accepted.Marker)
	if raw, _ := os.ReadFile(next); !strings.Contains(string(raw), strings.ReplaceAll(strings.TrimPrefix(accepted.Line, relayPrefix), `"`, `\"`)) {
		t.Fatalf("the heartbeat's rollout does not hold the printed line %s:\n%s", accepted.Line, raw)
	}
	h.ok(&bind, "desktop", "relay", "scanner", "bind", "--bridge-thread-id", bridge, "--rollout-path", next)
	if bind.Outcome != "bound" || bind.Revision != 2 {
		t.Fatalf("rebind: %+v", bind)
	}
	h.preflight()
	var in struct {
		Batch struct {
			Count int    `json:"delivery_attempt_count"`
			State string `json:"state"`
		} `json:"batch"`
	}
	h.ok(&in, "batch", "inspect", "--batch-id", r.BatchID)
	if in.Batch.Count != 1 {
		t.Fatalf("after the scanner read the accepted envelope: %+v", in.Batch)
	}
	armedAt := h.head()
	// Scanned again (and the same file consumed once more by hand):
	// nothing changes, the attempt counts once.
	h.preflight()
	h.ok(&got, "desktop", "relay", "consume-transcript", "--bridge-thread-id", bridge, "--rollout-path", next, "--marker", accepted.Marker)
	if got.Outcome != "already_consumed" {
		t.Fatalf("re-consume: %+v", got)
	}
	h.ok(&in, "batch", "inspect", "--batch-id", r.BatchID)
	if in.Batch.Count != 1 || h.head() != armedAt {
		t.Fatalf("a re-read counted again: %+v, head %d -> %d", in.Batch, armedAt, h.head())
	}
	// The caller crosses as after a direct arm.
	var x crossed
	h.ok(&x, crossArgs(r)...)
	if x.Outcome != "crossed" {
		t.Fatalf("crossing after a relayed arm: %+v", x)
	}
}

// A relay line is applied only from the rollout of the bridge its marker
// was issued for, and only when something decided to print it: the
// snapshot carries markers, never lines (so reading or showing a file,
// the natural `jq -r '.entries[]…'`, applies nothing); `relay marker
// issue` shows its line labelled; `relay print` prints exactly one line,
// for a marker of the current revision and the kind the bridge names.
func TestDesktop_RelayLinesBindToTheirBridgeAndToIntent(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.readyDesktop("S")
	r := h.claim().Ready
	issueArgs := append([]string{"desktop", "relay", "marker", "issue", "--bridge-thread-id", "other-bridge", "--kind", "arm-pending"}, tokenArgs(r, "wake-9")...)
	var other issued
	h.ok(&other, issueArgs...)
	// The human output names the line but is not one: no line of it
	// starts with the prefix.
	shown := h.run(issueArgs...)
	if shown.code != 0 || !strings.Contains(shown.stdout, "relay line: "+other.Line) {
		t.Fatalf("marker issue: exit %d %q", shown.code, shown.stdout)
	}
	for _, l := range strings.Split(shown.stdout, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), relayPrefix) {
			t.Fatalf("marker issue printed a bare relay line: %q", shown.stdout)
		}
	}

	// Bridge B's rollout holds, in tool output, the line issued for
	// another bridge: its scanner does not apply it, nor does the
	// operator's consume-transcript for B.
	desk, err := desktopsim.NewDesktop(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := desk.Print("", other.Line); err != nil {
		t.Fatal(err)
	}
	h.ok(nil, "desktop", "relay", "scanner", "bind", "--bridge-thread-id", bridge, "--rollout-path", desk.Rollout)
	h.preflight() // scans
	var got consumeReply
	h.ok(&got, "desktop", "relay", "consume-transcript", "--bridge-thread-id", bridge, "--rollout-path", desk.Rollout, "--marker", other.Marker)
	if got.Outcome != "wrong_bridge" || len(got.Results) != 1 || !strings.Contains(got.Results[0].Reason, "other-bridge") {
		t.Fatalf("a line of another bridge: %+v", got)
	}
	var in batchState
	h.ok(&in, "batch", "inspect-head", "--source-thread-id", "S")
	if in.Head == nil || in.Head.State != "prepared" {
		t.Fatalf("a line of another bridge moved the head: %+v", in.Head)
	}
	// Nor can the operator call B's rollout the other bridge's.
	h.fails(time.Minute, "desktop", "relay", "consume-transcript", "--bridge-thread-id", "other-bridge", "--rollout-path", desk.Rollout,
		"--marker", other.Marker).want(t, "EINVAL", 2, "bound to bridge thread "+bridge)

	// With B's scanner bound, the ready entry carries B's own marker; no
	// published file holds a line or the prefix.
	ready := h.claim().Ready
	if ready == nil || ready.RelayMarker == "" || ready.RelayMarker == other.Marker || ready.RelayBridgeRequestID == "" {
		t.Fatalf("the ready entry's marker: %+v", ready)
	}
	filepath.WalkDir(filepath.Join(h.root, "inbox"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), "CBTH-RELAY/") {
				t.Fatalf("%s holds a relay line:\n%s", p, b)
			}
		}
		return nil
	})

	// relay print: one line, the envelope of the entry's token and the
	// marker; a kind the marker does not stand for, or a marker the
	// revision does not carry, prints nothing.
	printArgs := func(kind, marker string) []string {
		return []string{"desktop", "relay", "print", "--bridge-thread-id", bridge, "--kind", kind, "--marker", marker}
	}
	out := h.run(printArgs("arm-pending", ready.RelayMarker)...)
	want := relayPrefix + `{"marker":"` + ready.RelayMarker + `","kind":"arm-pending","source_thread_id":"S","attempt_id":"` + ready.AttemptID +
		`","generation":` + strconv.FormatUint(ready.Generation, 10) + `,"bridge_request_id":"` + ready.RelayBridgeRequestID + `"}` + "\n"
	if out.code != 0 || out.stdout != want {
		t.Fatalf("relay print: exit %d %q, want %q", out.code, out.stdout, want)
	}
	h.fails(time.Minute, printArgs("arm-accepted", ready.RelayMarker)...).want(t, "EINVAL", 2, "kind_mismatch")
	h.fails(time.Minute, printArgs("arm-pending", other.Marker)...).want(t, "ESTALE", 1, "marker_not_published")
	if st, _ := h.bindingState("S"); st != "bound" {
		t.Fatalf("binding: %s", st)
	}
}
