package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/internal/execfile"
	"github.com/cbth-dev/cbth/internal/testkit/desktopsim"
	"github.com/cbth-dev/cbth/projections/inbox"
)

// The simulated Codex Desktop (internal/testkit/desktopsim) drives the real
// binary: the bridge heartbeat runs its helpers in the emulated sandbox
// and writes back only through the transcript relay, whose lines the
// daemon publishes in the snapshot and its scanner reads from the bridge
// thread's rollout.

// relaySim is a home whose daemon runs on a manual clock started at the
// real time (a sandboxed preflight compares the manifest's fresh_until
// with the real clock), with a validated installation, bound threads and
// the bridge's scanner bound to the simulated rollout.
type relaySim struct {
	*homeDir
	desk *desktopsim.Desktop
	sim  *desktopsim.Bridge
}

func newRelaySim(t *testing.T, threads ...string) *relaySim {
	t.Helper()
	if err := desktopsim.Tools(); err != nil {
		t.Fatal(err)
	}
	h := newHome(t, "CBTH_TEST_CLOCK="+time.Now().UTC().Truncate(time.Second).Format(time.RFC3339))
	h.config("[delivery]\nmax_wait_window = \"0s\"\nmin_send_interval = \"0s\"\n\n[desktop]\nsnapshot_max_age = \"1h\"\nrelay_scan_interval = \"50ms\"\n")
	h.validate()
	for _, th := range threads {
		h.bind(th, "automation-"+th)
	}
	h.preflight()
	desk, err := desktopsim.NewDesktop(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h.ok(nil, "desktop", "relay", "scanner", "bind", "--bridge-thread-id", bridge, "--rollout-path", desk.Rollout)
	return &relaySim{homeDir: h, desk: desk,
		sim: &desktopsim.Bridge{Bin: cbthBin, Home: h.root, ThreadID: bridge, Sandbox: desktopsim.Sandbox{Home: h.root, Dir: t.TempDir()}}}
}

// wake runs one relay wake of the bridge in the sandbox.
func (s *relaySim) wake(crash desktopsim.Step) (desktopsim.Wake, []string) {
	s.t.Helper()
	w, printed, err := s.sim.RelayWake(s.desk, crash)
	// A revision published between the wake's read and its print (the
	// daemon republishes when a time it named passes) moves the marker
	// on: the print refuses it (marker_not_published), and the bridge
	// reads the snapshot again on its next wake, as a real one does.
	for try := 0; err != nil && strings.Contains(err.Error(), "marker_not_published") && try < 5; try++ {
		w, printed, err = s.sim.RelayWake(s.desk, crash)
	}
	if err != nil {
		s.t.Fatal(err)
	}
	if w.Failed != nil {
		s.t.Fatalf("the bridge's preflight failed closed: %s", w.Failed)
	}
	return w, printed
}

// headState is the thread's head attempt state and the batch's count.
func (s *relaySim) headState(thread string) (string, int) {
	s.t.Helper()
	var in batchState
	s.ok(&in, "batch", "inspect-head", "--source-thread-id", thread)
	if in.Head == nil {
		return "", in.Batch.Count
	}
	return in.Head.State, in.Batch.Count
}

// published waits until the current revision satisfies ok.
func (s *relaySim) published(what string, ok func(desktopsim.DirectRead) bool) desktopsim.DirectRead {
	s.t.Helper()
	var d desktopsim.DirectRead
	waitFor(s.t, what, 20*time.Second, func() bool {
		var err error
		d, err = desktopsim.ReadDirect(s.root+"/inbox", bridge)
		return err == nil && ok(d)
	})
	return d
}

func quiescedAt(s *relaySim, thread string) string {
	s.t.Helper()
	var list []struct {
		Thread   string  `json:"source_thread_id"`
		Quiesced *string `json:"armed_generation_quiesced_at"`
		Armed    *uint64 `json:"armed_generation"`
	}
	s.ok(&list, "desktop", "binding", "list")
	for _, b := range list {
		if b.Thread == thread && b.Quiesced != nil {
			return *b.Quiesced
		}
	}
	return ""
}

// A sandboxed bridge runs the whole relay on its own: every line it
// prints is in the published snapshot (ready: arm-pending; arm-pending:
// arm-accepted and paused; pause-due: paused), none carries the arm
// lease, the same text in the prompt counts for nothing, and the daemon's
// scanner applies each CAS once: prepared -> arm_pending -> cooldown
// (counted once) -> crossed by the caller -> the generation's pause
// recorded (the pause proof as a relay kind).
func TestDesktop_RelayBridgeInTheSandbox(t *testing.T) {
	t.Parallel()
	s := newRelaySim(t, "S")
	s.desktopJob("S")
	d := s.published("a ready entry with its relay marker", func(d desktopsim.DirectRead) bool {
		return len(d.Ready.Entries) == 1 && d.Ready.Entries[0].RelayMarker != ""
	})
	ready := d.Ready.Entries[0]
	readyLine := s.line("arm-pending", ready.RelayMarker)
	if !strings.HasPrefix(readyLine, "CBTH-RELAY/1 {") || !strings.Contains(readyLine, `"kind":"arm-pending"`) ||
		!strings.Contains(readyLine, ready.AttemptID) || strings.Contains(readyLine, "lease") {
		t.Fatalf("ready entry: %+v, line %s", ready, readyLine)
	}
	// The line only in a prompt: nothing moves, however long the scanner
	// reads (it reads it before the wake's tool output below).
	if err := s.desk.Print("Bridge: print " + readyLine); err != nil {
		t.Fatal(err)
	}

	// Wake 1: the arm-pending line, printed from the sandbox.
	_, printed := s.wake(desktopsim.StepNone)
	if len(printed) != 1 || printed[0] != readyLine {
		t.Fatalf("wake 1 printed %q", printed)
	}
	waitFor(t, "the scanner to apply note-arm-pending", 20*time.Second, func() bool { st, _ := s.headState("S"); return st == "arm_pending" })
	d = s.published("the arm-pending entry with its markers", func(d desktopsim.DirectRead) bool {
		return len(d.ArmPending.Entries) == 1 && d.ArmPending.Entries[0].RelayMarker != "" && d.ArmPending.Entries[0].RelayPausedMarker != ""
	})
	pend := d.ArmPending.Entries[0]
	acceptedLine, pausedLine := s.line("arm-accepted", pend.RelayMarker), s.line("paused", pend.RelayPausedMarker)
	if len(d.Ready.Entries) != 0 || !strings.Contains(acceptedLine, `"kind":"arm-accepted"`) || !strings.Contains(pausedLine, `"kind":"paused"`) ||
		strings.Contains(acceptedLine+pausedLine, "lease") || !strings.Contains(acceptedLine, pend.BridgeRequestID) {
		t.Fatalf("after the arm-pending envelope: %+v", d)
	}
	s.noLinesPublished()

	// Wake 2: arm the caller automation, print the accepted line.
	_, printed = s.wake(desktopsim.StepNone)
	if len(printed) != 1 || printed[0] != acceptedLine || s.desk.Automations["automation-S"].Status != "ACTIVE" {
		t.Fatalf("wake 2 printed %q, automation %+v", printed, s.desk.Automations["automation-S"])
	}
	waitFor(t, "the scanner to apply note-arm", 20*time.Second, func() bool { st, _ := s.headState("S"); return st == "cooldown" })
	if _, n := s.headState("S"); n != 1 {
		t.Fatalf("armed through the relay: count %d", n)
	}
	// The same lines printed again (a heartbeat re-emits): counted once.
	if err := s.desk.Print("", readyLine, acceptedLine); err != nil {
		t.Fatal(err)
	}
	// The caller's wake crosses the boundary (outside the sandbox: the
	// caller path needs the daemon).
	code, out, err := s.desk.CallerWake(cbthBin, s.root, s.env, "automation-S")
	if err != nil || code != 0 || !strings.Contains(out, `"crossed"`) || !strings.Contains(out, "CI is green") {
		t.Fatalf("caller wake: %d %v %s", code, err, out)
	}
	var in batchState
	s.ok(&in, "batch", "inspect", "--batch-id", ready.BatchID)
	if in.Batch.CloseReason != "handoff_recorded" || in.Batch.Count != 1 {
		t.Fatalf("after the crossing: %+v", in.Batch)
	}

	// Past pause_not_before: the pause-due entry carries its paused line.
	s.advance("91s")
	d = s.published("the pause-due entry with its marker", func(d desktopsim.DirectRead) bool {
		return len(d.PauseDue.Entries) == 1 && d.PauseDue.Entries[0].RelayMarker != ""
	})
	if due := d.PauseDue.Entries[0]; !strings.Contains(s.line("paused", due.RelayMarker), `"kind":"paused"`) ||
		!strings.Contains(s.line("paused", due.RelayMarker), `"attempt_id":""`) {
		t.Fatalf("pause-due entry: %+v", due)
	}
	s.noLinesPublished()
	_, printed = s.wake(desktopsim.StepNone)
	if len(printed) != 1 || s.desk.Automations["automation-S"].Status != "PAUSED" {
		t.Fatalf("wake 3 printed %q", printed)
	}
	waitFor(t, "the scanner to record the pause", 20*time.Second, func() bool { return quiescedAt(s, "S") != "" })
	s.published("no pause due any more", func(d desktopsim.DirectRead) bool { return len(d.PauseDue.Entries) == 0 })
}

// line is the relay line `cbth desktop relay print` prints for a marker
// of the current revision: one line, the only place a line exists.
func (s *relaySim) line(kind, marker string) string {
	s.t.Helper()
	r := s.run("desktop", "relay", "print", "--bridge-thread-id", bridge, "--kind", kind, "--marker", marker)
	if r.code != 0 || strings.Count(r.stdout, "\n") != 1 {
		s.t.Fatalf("relay print --kind %s --marker %s: exit %d\n%s%s", kind, marker, r.code, r.stdout, r.stderr)
	}
	return strings.TrimSuffix(r.stdout, "\n")
}

// noLinesPublished fails the test if any file of the inbox holds a
// relay line, or the relay prefix at all: a file read or shown must
// never be taken for a decision to print.
func (s *relaySim) noLinesPublished() {
	s.t.Helper()
	filepath.WalkDir(filepath.Join(s.root, "inbox"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), "CBTH-RELAY/") {
				s.t.Fatalf("%s holds a relay line:\n%s", p, b)
			}
		}
		return nil
	})
}

// readyFor waits for the thread's ready entry with its relay marker and
// returns it with its line.
func (s *relaySim) readyFor(thread string) (inbox.ReadyEntry, string) {
	s.t.Helper()
	var e inbox.ReadyEntry
	s.published(thread+"'s ready entry with its relay marker", func(d desktopsim.DirectRead) bool {
		for _, r := range d.Ready.Entries {
			if r.SourceThreadID == thread && r.RelayMarker != "" {
				e = r
				return true
			}
		}
		return false
	})
	return e, s.line("arm-pending", e.RelayMarker)
}

// relayArm arms the thread's ready head through the relay: two bridge
// wakes (the second, when crash1 is set, crashing after that step and a
// third making it good), each followed by the scanner. It returns
// the ready entry armed, its arm-pending line and the arm-accepted line.
func (s *relaySim) relayArm(thread string, crash1 desktopsim.Step) (e inbox.ReadyEntry, pending, accepted string) {
	s.t.Helper()
	e, pending = s.readyFor(thread)
	s.wake(desktopsim.StepNone)
	waitFor(s.t, "note-arm-pending through the relay", 20*time.Second, func() bool { st, _ := s.headState(thread); return st == "arm_pending" })
	d := s.published("the arm-pending entry's markers", func(d desktopsim.DirectRead) bool {
		return len(d.ArmPending.Entries) == 1 && d.ArmPending.Entries[0].RelayMarker != ""
	})
	accepted = s.line("arm-accepted", d.ArmPending.Entries[0].RelayMarker)
	if crash1 != desktopsim.StepNone {
		s.wake(crash1)
	}
	s.wake(desktopsim.StepNone)
	waitFor(s.t, "note-arm through the relay", 20*time.Second, func() bool { st, _ := s.headState(thread); return st == "cooldown" })
	return e, pending, accepted
}

// changedSince lists the types of the events appended after seq head,
// leaving out the scanner's position records and the publisher's
// revision reservations: reading a rollout records how far it read
// (spec/desktop.md, "The scanner's position and health"), publishing
// reserves revision numbers now and then ("Revisions"), and neither
// changes a batch, an attempt or a binding.
func (s *relaySim) changedSince(head uint64) []string {
	s.t.Helper()
	r := s.run("events", "export", "--from", strconv.FormatUint(head+1, 10))
	if r.code != 0 {
		s.t.Fatalf("events export: exit %d %s", r.code, r.stderr)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var e struct {
			Type string `json:"type"`
		}
		if l == "" {
			continue
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			s.t.Fatalf("events export line %q: %v", l, err)
		}
		if e.Type != "installation.relay_scanner_advanced" && e.Type != "installation.snapshot_revisions_reserved" {
			out = append(out, e.Type)
		}
	}
	return out
}

// markerOf is the marker of a relay line.
func markerOf(t *testing.T, line string) string {
	t.Helper()
	var env struct {
		Marker string `json:"marker"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "CBTH-RELAY/1 ")), &env); err != nil || env.Marker == "" {
		t.Fatalf("relay line %q: %v", line, err)
	}
	return env.Marker
}

// consumeAgain runs consume-transcript for the line's marker over the
// whole rollout: what the scanner did or will do with it, for certain.
func (s *relaySim) consumeAgain(line string) consumeReply {
	s.t.Helper()
	var got consumeReply
	s.ok(&got, "desktop", "relay", "consume-transcript", "--bridge-thread-id", bridge, "--rollout-path", s.desk.Rollout, "--marker", markerOf(s.t, line))
	return got
}

// caller fires the thread's caller automation once.
func (s *relaySim) caller(thread string) (int, string) {
	s.t.Helper()
	code, out, err := s.desk.CallerWake(cbthBin, s.root, s.env, "automation-"+thread)
	if err != nil {
		s.t.Fatal(err)
	}
	return code, out
}

// pauseThroughRelay lets pause_not_before pass and has the bridge pause
// the thread's caller automation (crashing first after crash, then again
// cleanly), until the generation is recorded quiesced.
func (s *relaySim) pauseThroughRelay(thread string, crash desktopsim.Step) {
	s.t.Helper()
	s.advance("91s")
	s.published("the pause-due line", func(d desktopsim.DirectRead) bool {
		return len(d.PauseDue.Entries) > 0 && d.PauseDue.Entries[0].RelayMarker != ""
	})
	if crash != desktopsim.StepNone {
		s.wake(crash)
	}
	s.wake(desktopsim.StepNone)
	waitFor(s.t, "the pause recorded through the relay", 20*time.Second, func() bool { return quiescedAt(s, thread) != "" })
}

type inspected struct {
	Batch struct {
		Replay      string `json:"replay_policy"`
		Reason      string `json:"replay_policy_reason"`
		CloseReason string `json:"close_reason"`
		Count       int    `json:"delivery_attempt_count"`
		Boundary    string `json:"continuation_boundary_state"`
	} `json:"batch"`
	Envelope *struct {
		CloseReason   string `json:"close_reason"`
		InlinePayload string `json:"inline_payload_summary"`
	} `json:"boundary_recovery_envelope"`
}

func (s *relaySim) inspect(batch string) inspected {
	s.t.Helper()
	var in inspected
	s.ok(&in, "batch", "inspect", "--batch-id", batch)
	return in
}

// The writeback loop of the simulated Desktop against the real binary,
// the bridge sandboxed and writing back only through the relay, the
// caller outside the sandbox: the whole v1 flow once per row, through one
// failure the issue lists. After every row no batch was handed over twice
// and each counts the arms that succeeded.
func TestDesktopSim_WritebackLoop(t *testing.T) {
	t.Parallel()
	rows := []struct {
		name string
		run  func(t *testing.T, s *relaySim)
	}{
		{"bridge crash after each step", func(t *testing.T, s *relaySim) {
			// Crash after printing the pending line, after arming the
			// automation with nothing printed, after printing the accepted
			// line, after pausing with nothing printed: each next wake
			// makes it good, and the batch counts one arm.
			s.desktopJob("S")
			e, _ := s.readyFor("S")
			s.wake(desktopsim.StepPrintPending)
			waitFor(t, "arm_pending", 20*time.Second, func() bool { st, _ := s.headState("S"); return st == "arm_pending" })
			s.published("the arm-pending lines", func(d desktopsim.DirectRead) bool {
				return len(d.ArmPending.Entries) == 1 && d.ArmPending.Entries[0].RelayMarker != ""
			})
			s.wake(desktopsim.StepArm)
			s.wake(desktopsim.StepPrintArmed)
			waitFor(t, "armed", 20*time.Second, func() bool { st, _ := s.headState("S"); return st == "cooldown" })
			s.wake(desktopsim.StepNone) // nothing left to arm: prints nothing new that counts
			if code, out := s.caller("S"); code != 0 || !strings.Contains(out, `"crossed"`) {
				t.Fatalf("caller: %d %s", code, out)
			}
			// The automation was armed twice (crash after the arm): its
			// second wake finds the handoff recorded.
			if code, out := s.caller("S"); code == 0 || !strings.Contains(out, "already_crossed_or_handoff_recorded") {
				t.Fatalf("second caller wake: %d %s", code, out)
			}
			s.pauseThroughRelay("S", desktopsim.StepPause)
			if in := s.inspect(e.BatchID); in.Batch.CloseReason != "handoff_recorded" || in.Batch.Count != 1 {
				t.Fatalf("batch: %+v", in.Batch)
			}
		}},
		{"stale wake of an old generation", func(t *testing.T, s *relaySim) {
			// Generation 1 armed, its caller never woke; paused, cooled
			// down, re-offered as generation 2. The old automation's late
			// wake is stale and appends nothing; generation 2 crosses.
			s.desktopJob("S")
			old, _, _ := s.relayArm("S", desktopsim.StepNone)
			s.pauseThroughRelay("S", desktopsim.StepNone)
			s.advance("31s") // past cooldown_until (2m after the arm)
			s.preflight()
			fresh, _ := s.readyFor("S")
			if fresh.Generation != old.Generation+1 || fresh.BatchID != old.BatchID {
				t.Fatalf("re-offered: %+v after %+v", fresh, old)
			}
			head := s.head()
			stale := desktopsim.Automation{Status: "ACTIVE", Token: old, Wakes: 1}
			s.desk.Automations["automation-old"] = &stale
			code, out, err := s.desk.CallerWake(cbthBin, s.root, s.env, "automation-old")
			if err != nil || code == 0 || !strings.Contains(out, "stale_or_superseded") || len(s.changedSince(head)) != 0 {
				t.Fatalf("stale wake: %d %v %s (appended %v)", code, err, out, s.changedSince(head))
			}
			s.relayArm("S", desktopsim.StepNone)
			if code, out := s.caller("S"); code != 0 || !strings.Contains(out, `"crossed"`) || !strings.Contains(out, `"generation": 2`) {
				t.Fatalf("generation 2 caller: %d %s", code, out)
			}
			if in := s.inspect(old.BatchID); in.Batch.Count != 2 || in.Batch.CloseReason != "handoff_recorded" {
				t.Fatalf("batch: %+v", in.Batch)
			}
		}},
		{"two bridges with different request ids", func(t *testing.T, s *relaySim) {
			// A bridge that reaches the daemon takes the arm under its own
			// request; another request is busy and never sees the lease;
			// the relay's own pending line for the same attempt is refused
			// the same way; the holder's arm counts once.
			s.desktopJob("S")
			e, line := s.readyFor("S")
			var a armPending
			s.ok(&a, append([]string{"desktop", "note-arm-pending"}, tokenArgs(&e, "bridge-a")...)...)
			f := s.fails(time.Minute, append([]string{"desktop", "note-arm-pending"}, tokenArgs(&e, "bridge-b")...)...)
			f.want(t, "EBUSY", 1)
			if strings.Contains(f.Message, a.Lease) {
				t.Fatalf("the busy answer leaks the lease: %s", f.Message)
			}
			// The relay's own pending line (another request) is refused
			// busy, and its reason carries no lease either.
			if err := s.desk.Print("", line); err != nil {
				t.Fatal(err)
			}
			if got := s.consumeAgain(line); got.Outcome != "refused" || !strings.Contains(got.Results[0].Reason, "EBUSY") ||
				strings.Contains(got.Results[0].Reason, a.Lease) {
				t.Fatalf("the relay's line under another request: %+v", got)
			}
			// The arm-accepted line published for bridge-a's request arms it.
			s.published("the arm-pending entry's markers", func(d desktopsim.DirectRead) bool {
				return len(d.ArmPending.Entries) == 1 && d.ArmPending.Entries[0].RelayMarker != ""
			})
			s.wake(desktopsim.StepNone)
			waitFor(t, "armed", 20*time.Second, func() bool { st, _ := s.headState("S"); return st == "cooldown" })
			if _, n := s.headState("S"); n != 1 {
				t.Fatalf("count %d", n)
			}
		}},
		{"a retry counts once", func(t *testing.T, s *relaySim) {
			s.desktopJob("S")
			e, pending, accepted := s.relayArm("S", desktopsim.StepNone)
			head := s.head()
			// Both lines re-emitted, twice over, and direct retries.
			lines := []string{pending, accepted, pending, accepted}
			if err := s.desk.Print("", lines...); err != nil {
				t.Fatal(err)
			}
			for _, l := range lines[:2] {
				if got := s.consumeAgain(l); got.Outcome != "already_consumed" {
					t.Fatalf("a re-emitted line: %+v", got)
				}
			}
			if _, n := s.headState("S"); n != 1 || len(s.changedSince(head)) != 0 {
				t.Fatalf("count %d, appended %v after the re-emission", n, s.changedSince(head))
			}
			if code, out := s.caller("S"); code != 0 || !strings.Contains(out, e.BatchID) {
				t.Fatalf("caller: %d %s", code, out)
			}
		}},
		{"a pause window violation", func(t *testing.T, s *relaySim) {
			// A pause proof before pause_not_before is refused and records
			// nothing; no proof by pause_deadline degrades the binding.
			s.desktopJob("S")
			e, _, _ := s.relayArm("S", desktopsim.StepNone)
			var m issued
			s.ok(&m, "desktop", "relay", "marker", "issue", "--bridge-thread-id", bridge, "--kind", "paused", "--source-thread-id", "S",
				"--attempt-id", "", "--generation", strconv.FormatUint(e.Generation, 10), "--bridge-request-id", "too-early")
			s.desk.Print("", m.Line)
			s.preflight()
			var got consumeReply
			s.ok(&got, "desktop", "relay", "consume-transcript", "--bridge-thread-id", bridge, "--rollout-path", s.desk.Rollout, "--marker", m.Marker)
			if got.Outcome != "refused" || !strings.Contains(got.Results[0].Reason, "pause_too_early") || quiescedAt(s, "S") != "" {
				t.Fatalf("early pause: %+v", got)
			}
			s.advance("3m1s")
			if st, why := s.bindingState("S"); st != "degraded" || !strings.Contains(why, "pause_deadline") {
				t.Fatalf("binding: %s %s", st, why)
			}
			w, printed := s.wake(desktopsim.StepNone)
			if len(w.Direct.Ready.Entries) != 0 || len(printed) != 1 {
				t.Fatalf("a wake after the violation: ready %+v printed %q", w.Direct.Ready.Entries, printed)
			}
		}},
		{"fingerprint and transport changes", func(t *testing.T, s *relaySim) {
			s.desktopJob("S")
			_, line := s.readyFor("S")
			// A bridge running a cbth from elsewhere: not validated, arms
			// nothing.
			moved := filepath.Join(t.TempDir(), "elsewhere", "cbth")
			os.MkdirAll(filepath.Dir(moved), 0o700)
			if b, err := os.ReadFile(cbthBin); err != nil || execfile.Put(moved, b, 0o700) != nil {
				t.Fatalf("copy the binary: %v", err)
			}
			other := *s.sim
			other.Bin = moved
			w, printed, err := other.RelayWake(s.desk, desktopsim.StepNone)
			if err != nil || w.Failed != nil || w.Preflight.AutomaticContinuation || len(printed) != 0 {
				t.Fatalf("a moved bridge: %v %+v printed %q", err, w.Preflight, printed)
			}
			// A transport change: capabilities unknown, the binding
			// degraded, the published line no longer applies.
			s.repair("--read-transport", "helper_cli_read")
			if st, _ := s.bindingState("S"); st != "degraded" {
				t.Fatalf("binding after the transport change: %s", st)
			}
			s.preflight()
			if w, printed = s.wake(desktopsim.StepNone); w.Preflight.AutomaticContinuation || len(printed) != 0 {
				t.Fatalf("after the transport change: %+v %q", w.Preflight, printed)
			}
			head := s.head()
			if err := s.desk.Print("", line); err != nil {
				t.Fatal(err)
			}
			if got := s.consumeAgain(line); got.Outcome != "refused" || len(s.changedSince(head)) != 0 {
				t.Fatalf("a line published before the transport change: %+v, appended %v", got, s.changedSince(head))
			}
		}},
		{"degraded then repair", func(t *testing.T, s *relaySim) {
			s.desktopJob("S")
			e, _, _ := s.relayArm("S", desktopsim.StepNone)
			s.advance("3m1s") // no pause by pause_deadline: degraded
			if st, _ := s.bindingState("S"); st != "degraded" {
				t.Fatalf("binding: %s", st)
			}
			s.bind("S", "automation-S")
			// The armed generation must still be proven paused before a
			// fresh arm: the bridge pauses it through the relay.
			s.published("the pause-due line after the repair", func(d desktopsim.DirectRead) bool {
				return len(d.PauseDue.Entries) == 1 && d.PauseDue.Entries[0].RelayMarker != ""
			})
			s.wake(desktopsim.StepNone)
			waitFor(t, "quiesced", 20*time.Second, func() bool { return quiescedAt(s, "S") != "" })
			// The head never crossed (its caller did not wake): it stays
			// automatic and is armed again with a fresh generation.
			next, _, _ := s.relayArm("S", desktopsim.StepNone)
			if next.BatchID != e.BatchID || next.Generation != e.Generation+1 {
				t.Fatalf("after the repair: %+v, before %+v", next, e)
			}
			if code, out := s.caller("S"); code != 0 || !strings.Contains(out, `"crossed"`) {
				t.Fatalf("caller after the repair: %d %s", code, out)
			}
		}},
		{"a second note-boundary-crossed", func(t *testing.T, s *relaySim) {
			s.desktopJob("S")
			e, _, _ := s.relayArm("S", desktopsim.StepNone)
			if code, out := s.caller("S"); code != 0 {
				t.Fatalf("caller: %d %s", code, out)
			}
			head := s.head()
			f := s.fails(time.Minute, crossArgs(&e)...)
			f.want(t, "already_crossed_or_handoff_recorded", 1)
			if got := s.changedSince(head); len(got) != 0 {
				t.Fatalf("a second crossing appended %v", got)
			}
		}},
		{"a lost success response", func(t *testing.T, s *relaySim) {
			// The caller's answer is lost (its output dropped); its retry
			// is refused; the operator recovers the continuation from the
			// batch's recovery envelope.
			s.desktopJob("S")
			e, _, _ := s.relayArm("S", desktopsim.StepNone)
			s.caller("S") // the answer is dropped on the floor
			f := s.fails(time.Minute, crossArgs(&e)...)
			f.want(t, "already_crossed_or_handoff_recorded", 1)
			in := s.inspect(e.BatchID)
			if in.Batch.CloseReason != "handoff_recorded" || in.Envelope == nil || !strings.Contains(in.Envelope.InlinePayload, "CI is green") {
				t.Fatalf("recovery: %+v %+v", in.Batch, in.Envelope)
			}
		}},
		{"requires_artifact_read batches", func(t *testing.T, s *relaySim) {
			res := filepath.Join(t.TempDir(), "result.bin")
			if err := os.WriteFile(res, make([]byte, 64<<10), 0o600); err != nil {
				t.Fatal(err)
			}
			var sub struct {
				JobID string `json:"job_id"`
			}
			s.ok(&sub, "job", "submit", "--target", "desktop", "--thread-id", "S", "--task-kind", "ci", "--summary", "s",
				"--delivery-read-only", "true", "--delivery-requires-approval", "false", "--delivery-requires-network", "false", "--delivery-requires-write-access", "false")
			s.ok(nil, "job", "complete", "--job-id", sub.JobID, "--summary", "big result", "--result-file", res)
			s.preflight()
			w, printed := s.wake(desktopsim.StepNone)
			if len(w.Direct.Ready.Entries) != 0 || len(printed) != 0 {
				t.Fatalf("an artifact-read batch offered: %+v %q", w.Direct.Ready.Entries, printed)
			}
			var in inspected
			s.ok(&in, "batch", "inspect-head", "--source-thread-id", "S")
			if in.Batch.Replay != "manual_resolution_only" || !strings.Contains(in.Batch.Reason, "requires_artifact_read") {
				t.Fatalf("batch: %+v", in.Batch)
			}
		}},
	}
	for _, row := range rows {
		t.Run(strings.ReplaceAll(row.name, " ", "_"), func(t *testing.T) {
			s := newRelaySim(t, "S")
			row.run(t, s)
		})
	}
}

type scannerView struct {
	Bridge   string `json:"bridge_thread_id"`
	Revision uint64 `json:"binding_revision"`
	Offset   int64  `json:"offset"`
	State    string `json:"state"`
	Reason   string `json:"degraded_reason"`
}

func (h *homeDir) scanner() scannerView {
	h.t.Helper()
	var v struct {
		Scanners []scannerView `json:"relay_scanners"`
	}
	h.ok(&v, "desktop", "installation-state")
	if len(v.Scanners) != 1 {
		h.t.Fatalf("relay scanners: %+v", v.Scanners)
	}
	return v.Scanners[0]
}

// The scanner's read position is in the log: a restarted daemon resumes
// where the last one recorded, rather than reading the rollout again.
// Proof: while the daemon is down, the part already read is rewritten in
// place (same file, same size) to hold the arm-accepted line, and the
// paused line (the arm never took effect) is appended. Read again from
// the start, the attempt would be armed (and the pause refused); resumed,
// only the pause applies and the attempt is abandoned, the batch
// automatic and not counted.
func TestDesktop_RelayScannerResumesAfterRestart(t *testing.T) {
	t.Parallel()
	s := newRelaySim(t, "S")
	s.desktopJob("S")
	s.readyFor("S")
	if err := s.desk.Print("Bridge: " + strings.Repeat("read the snapshot, print the relay lines; ", 20)); err != nil {
		t.Fatal(err)
	}
	s.wake(desktopsim.StepNone)
	waitFor(t, "arm_pending", 20*time.Second, func() bool { st, _ := s.headState("S"); return st == "arm_pending" })
	st, err := os.Stat(s.desk.Rollout)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the position recorded", 20*time.Second, func() bool { return s.scanner().Offset == st.Size() })
	d := s.published("the arm-pending markers", func(d desktopsim.DirectRead) bool {
		return len(d.ArmPending.Entries) == 1 && d.ArmPending.Entries[0].RelayMarker != ""
	})
	pend := d.ArmPending.Entries[0]
	acceptedLine, pausedLine := s.line("arm-accepted", pend.RelayMarker), s.line("paused", pend.RelayPausedMarker)
	s.ok(nil, "daemon", "stop")

	rec, _ := json.Marshal(map[string]any{"type": "response_item", "payload": map[string]any{"type": "function_call_output",
		"call_id": "call_x", "output": acceptedLine + "\n"}})
	if int64(len(rec))+1 > st.Size() {
		t.Fatalf("the rewritten record (%d bytes) does not fit the %d read", len(rec)+1, st.Size())
	}
	prefix := append(rec, []byte(strings.Repeat(" ", int(st.Size())-len(rec)-1)+"\n")...)
	f, err := os.OpenFile(s.desk.Rollout, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(prefix, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := s.desk.Print("", pausedLine); err != nil {
		t.Fatal(err)
	}
	s.preflight() // starts the daemon; it scans
	waitFor(t, "the pause line applied", 20*time.Second, func() bool { st, _ := s.headState("S"); return st != "arm_pending" })
	var in batchState
	s.ok(&in, "batch", "inspect-head", "--source-thread-id", "S")
	if in.Batch.Replay != "automatic" || in.Batch.Count != 0 {
		t.Fatalf("the restarted scanner read the rollout again: %+v (head %+v)", in.Batch, in.Head)
	}
}

// A rollout that stops being the bound file degrades the scanner with a
// stable reason, visible in installation-state and doctor; a rebind
// starts it again.
func TestDesktop_RelayScannerDegradedThenRebound(t *testing.T) {
	t.Parallel()
	s := newRelaySim(t, "S")
	if v := s.scanner(); v.State != "reading" || v.Revision != 1 {
		t.Fatalf("bound: %+v", v)
	}
	// Another file takes the path (renamed over it: another inode).
	other := s.desk.Rollout + ".new"
	if err := os.WriteFile(other, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, s.desk.Rollout); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the scanner degraded", 20*time.Second, func() bool { return s.scanner().State == "degraded" })
	if v := s.scanner(); v.Reason != "rollout_replaced" {
		t.Fatalf("degraded: %+v", v)
	}
	rep, r := s.doctor()
	if f := rep.get("desktop.relay"); r.code != 1 || f.State != "fail" || !strings.Contains(f.Detail, "rollout_replaced") ||
		!strings.Contains(f.Fix, "relay scanner bind") {
		t.Fatalf("doctor: exit %d %+v", r.code, f)
	}
	var b struct {
		Outcome  string `json:"outcome"`
		Revision uint64 `json:"binding_revision"`
	}
	s.ok(&b, "desktop", "relay", "scanner", "bind", "--bridge-thread-id", bridge, "--rollout-path", s.desk.Rollout)
	if v := s.scanner(); b.Outcome != "bound" || v.State != "reading" || v.Revision != 2 {
		t.Fatalf("rebound: %+v %+v", b, v)
	}
	if rep, _ := s.doctor(); rep.get("desktop.relay").State != "ok" {
		t.Fatalf("doctor after the rebind: %+v", rep.get("desktop.relay"))
	}
}

// A rollout record longer than the scanner's round does not stop it: a
// 2 MiB tool output is read whole and its line applied; one over the 8
// MiB a record is read whole (relay.MaxRecord) is read through and
// skipped, the position moves past it, and the scanner shows degraded
// with the reason (doctor fails) while it reads on; a rebind to the same
// file acknowledges the skip and resumes where it was.
func TestDesktop_RelayScannerMovesPastLongRecords(t *testing.T) {
	t.Parallel()
	s := newRelaySim(t, "S")
	s.desktopJob("S")
	_, pending := s.readyFor("S")
	if err := s.desk.Print("", strings.Repeat("x", 2<<20), pending); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the line in a 2 MiB record applied", 20*time.Second, func() bool { st, _ := s.headState("S"); return st == "arm_pending" })
	if v := s.scanner(); v.State != "reading" {
		t.Fatalf("after a 2 MiB record: %+v", v)
	}
	d := s.published("the arm-pending marker", func(d desktopsim.DirectRead) bool {
		return len(d.ArmPending.Entries) == 1 && d.ArmPending.Entries[0].RelayMarker != ""
	})
	accepted := s.line("arm-accepted", d.ArmPending.Entries[0].RelayMarker)
	if err := s.desk.Print("", accepted, strings.Repeat("y", 9<<20)); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(s.desk.Rollout)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the 9 MiB record skipped", 20*time.Second, func() bool { return s.scanner().Offset == st.Size() })
	v := s.scanner()
	if v.State != "degraded" || v.Reason != "rollout_record_too_long" || v.Revision != 1 {
		t.Fatalf("after a 9 MiB record: %+v", v)
	}
	if head, _ := s.headState("S"); head != "arm_pending" {
		t.Fatalf("a line in a skipped record applied: %s", head)
	}
	rep, r := s.doctor()
	if f := rep.get("desktop.relay"); r.code != 1 || f.State != "fail" || !strings.Contains(f.Detail, "rollout_record_too_long") ||
		!strings.Contains(f.Detail, "line 3") || !strings.Contains(f.Fix, s.desk.Rollout) {
		t.Fatalf("doctor: exit %d %+v", r.code, f)
	}
	// It reads on: the same line printed again, in a record of its own.
	if err := s.desk.Print("", accepted); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the line after the skipped record applied", 20*time.Second, func() bool { st, _ := s.headState("S"); return st == "cooldown" })
	// The rebind acknowledges the skip: reading, from where it was.
	at := s.scanner().Offset
	s.ok(nil, "desktop", "relay", "scanner", "bind", "--bridge-thread-id", bridge, "--rollout-path", s.desk.Rollout)
	if v := s.scanner(); v.State != "reading" || v.Revision != 2 || v.Offset != at {
		t.Fatalf("rebound: %+v, was at %d", v, at)
	}
	if rep, _ := s.doctor(); rep.get("desktop.relay").State != "ok" {
		t.Fatalf("doctor after the rebind: %+v", rep.get("desktop.relay"))
	}
}
