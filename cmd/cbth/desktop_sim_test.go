package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/internal/desktopsim"
)

// The simulated Codex Desktop (internal/desktopsim) drives the real
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
	s := newRelaySim(t, "S")
	s.desktopJob("S")
	d := s.published("a ready entry with its relay line", func(d desktopsim.DirectRead) bool {
		return len(d.Ready.Entries) == 1 && d.Ready.Entries[0].RelayLine != ""
	})
	ready := d.Ready.Entries[0]
	if !strings.HasPrefix(ready.RelayLine, "CBTH-RELAY/1 {") || !strings.Contains(ready.RelayLine, `"kind":"arm-pending"`) ||
		!strings.Contains(ready.RelayLine, ready.AttemptID) || strings.Contains(ready.RelayLine, "lease") {
		t.Fatalf("ready entry: %+v", ready)
	}
	// The line only in a prompt: nothing moves, however long the scanner
	// reads (it reads it before the wake's tool output below).
	if err := s.desk.Print("Bridge: print " + ready.RelayLine); err != nil {
		t.Fatal(err)
	}

	// Wake 1: the arm-pending line, printed from the sandbox.
	_, printed := s.wake(desktopsim.StepNone)
	if len(printed) != 1 || printed[0] != ready.RelayLine {
		t.Fatalf("wake 1 printed %q", printed)
	}
	waitFor(t, "the scanner to apply note-arm-pending", 20*time.Second, func() bool { st, _ := s.headState("S"); return st == "arm_pending" })
	d = s.published("the arm-pending entry with its lines", func(d desktopsim.DirectRead) bool {
		return len(d.ArmPending.Entries) == 1 && d.ArmPending.Entries[0].RelayLine != "" && d.ArmPending.Entries[0].RelayPausedLine != ""
	})
	pend := d.ArmPending.Entries[0]
	if len(d.Ready.Entries) != 0 || !strings.Contains(pend.RelayLine, `"kind":"arm-accepted"`) || !strings.Contains(pend.RelayPausedLine, `"kind":"paused"`) ||
		strings.Contains(pend.RelayLine+pend.RelayPausedLine, "lease") || !strings.Contains(pend.RelayLine, pend.BridgeRequestID) {
		t.Fatalf("after the arm-pending envelope: %+v", d)
	}

	// Wake 2: arm the caller automation, print the accepted line.
	_, printed = s.wake(desktopsim.StepNone)
	if len(printed) != 1 || printed[0] != pend.RelayLine || s.desk.Automations["automation-S"].Status != "ACTIVE" {
		t.Fatalf("wake 2 printed %q, automation %+v", printed, s.desk.Automations["automation-S"])
	}
	waitFor(t, "the scanner to apply note-arm", 20*time.Second, func() bool { st, _ := s.headState("S"); return st == "cooldown" })
	if _, n := s.headState("S"); n != 1 {
		t.Fatalf("armed through the relay: count %d", n)
	}
	// The same lines printed again (a heartbeat re-emits): counted once.
	if err := s.desk.Print("", ready.RelayLine, pend.RelayLine); err != nil {
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
	d = s.published("the pause-due entry with its line", func(d desktopsim.DirectRead) bool {
		return len(d.PauseDue.Entries) == 1 && d.PauseDue.Entries[0].RelayLine != ""
	})
	if due := d.PauseDue.Entries[0]; !strings.Contains(due.RelayLine, `"kind":"paused"`) || !strings.Contains(due.RelayLine, `"attempt_id":""`) {
		t.Fatalf("pause-due entry: %+v", due)
	}
	_, printed = s.wake(desktopsim.StepNone)
	if len(printed) != 1 || s.desk.Automations["automation-S"].Status != "PAUSED" {
		t.Fatalf("wake 3 printed %q", printed)
	}
	waitFor(t, "the scanner to record the pause", 20*time.Second, func() bool { return quiescedAt(s, "S") != "" })
	s.published("no pause due any more", func(d desktopsim.DirectRead) bool { return len(d.PauseDue.Entries) == 0 })
}
