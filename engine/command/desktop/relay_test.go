package desktop_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/internal/errs"
)

const testMarker = "m1-0123456789abcdef0123456789abcdef01234567"

// The paused relay kind (spec/desktop.md, "The transcript relay"): its
// marker is issued only for the generation note-paused would take, and
// consuming its envelope applies note-paused once, with the same refusals.
func TestRelayPausedKind(t *testing.T) {
	d := newDesk(t)
	d.validated()
	d.exec(desktop.RepairBinding{ThreadID: "S", AutomationID: "auto-S"})
	d.ready("S", lowRisk)
	d.exec(command.PrepareAttempt{Config: cfg, ThreadID: "S", DeliveryMode: command.ModeDesktop})
	a := d.live("S")
	fps := map[string]string{desktop.TransportDirect: fpA}
	tok := desktop.ArmToken{ThreadID: "S", AttemptID: a.ID, Generation: a.Generation, BridgeRequestID: "wake-1"}
	l, _ := deskAnswer[desktop.ArmLease](d, desktop.NoteArmPending{Config: armCfg, ArmToken: tok, Fingerprints: fps})
	lease := l.LeaseID
	d.exec(desktop.NoteArm{Config: armCfg, ArmToken: tok, LeaseID: lease})

	paused := func(gen uint64, attempt, marker string) desktop.IssueRelayMarker {
		return desktop.IssueRelayMarker{Kind: aggregate.RelayPaused, BridgeThreadID: "B", Marker: marker, TTL: time.Hour,
			ArmToken: desktop.ArmToken{ThreadID: "S", AttemptID: attempt, Generation: gen, BridgeRequestID: "pause-1"}}
	}
	// Only the armed generation (attempt id empty) or an arm in flight.
	d.fail(paused(a.Generation+1, "", testMarker), errs.ESTALE)
	d.fail(paused(a.Generation, a.ID, testMarker), errs.ESTALE)
	if res := d.exec(paused(a.Generation, "", testMarker)); res.Outcome != "issued" {
		t.Fatalf("issue: %+v", res)
	}
	head := d.e.Head()
	if m, res := deskAnswer[desktop.IssuedMarker](d, paused(a.Generation, "", testMarker+"x")); res.Outcome != "already_issued" || m.Marker != testMarker || d.e.Head() != head {
		t.Fatalf("issue again: %+v", res)
	}

	consume := func(sha string, gen uint64) string {
		t.Helper()
		c, res := deskAnswer[desktop.Consumed](d, desktop.ConsumeRelay{Config: armCfg, BridgeThreadID: "B", Marker: testMarker, Kind: aggregate.RelayPaused, ThreadID: "S",
			Generation: gen, RequestID: "pause-1", SHA256: sha})
		return string(res.Outcome) + " " + string(c.Applied) + " " + c.Reason
	}
	// Before pause_not_before: refused as note-paused refuses, nothing
	// recorded, the marker still open.
	if got := consume("h1", a.Generation); !strings.HasPrefix(got, "refused") || !strings.Contains(got, "pause_too_early") || d.e.Head() != head {
		t.Fatalf("too early: %s", got)
	}
	if got := consume("h1", a.Generation+1); !strings.HasPrefix(got, "mismatch") {
		t.Fatalf("another generation: %s", got)
	}
	d.clock.Advance(91 * time.Second)
	if got := consume("h1", a.Generation); got != "consumed quiesced " || d.binding("S").ArmedGenerationQuiesced.IsZero() {
		t.Fatalf("consume: %s", got)
	}
	head = d.e.Head()
	if got := consume("h1", a.Generation); !strings.HasPrefix(got, "already_consumed") || d.e.Head() != head {
		t.Fatalf("again: %s", got)
	}
	if got := consume("h2", a.Generation); !strings.HasPrefix(got, "conflict") || d.e.Head() != head {
		t.Fatalf("another envelope: %s", got)
	}
}

// The scanner's position only moves forward under its binding revision;
// a degraded scanner stops recording until a rebind, which starts a new
// revision from the start even for the same file.
func TestRelayScannerPositionAndDegradation(t *testing.T) {
	d := newDesk(t)
	d.validated()
	bind := desktop.BindRelayScanner{BridgeThreadID: "B", RolloutPath: "/r.jsonl", Device: 1, Inode: 2}
	if res := d.exec(bind); res.Outcome != "bound" {
		t.Fatalf("bind: %+v", res)
	}
	if res := d.exec(desktop.AdvanceRelayScanner{BridgeThreadID: "B", Revision: 1, Offset: 100, Line: 3}); res.Outcome != "advanced" {
		t.Fatalf("advance: %+v", res)
	}
	head := d.e.Head()
	for _, c := range []desktop.AdvanceRelayScanner{{BridgeThreadID: "B", Revision: 1, Offset: 50, Line: 1},
		{BridgeThreadID: "B", Revision: 2, Offset: 500, Line: 9}, {BridgeThreadID: "C", Revision: 1, Offset: 500, Line: 9}} {
		if res := d.exec(c); res.Outcome != "unchanged" || d.e.Head() != head {
			t.Fatalf("%+v: %+v", c, res)
		}
	}
	if sc := d.installation().RelayScanners["B"]; sc.Offset != 100 || sc.Line != 3 {
		t.Fatalf("position: %+v", sc)
	}
	if res := d.exec(desktop.DegradeRelayScanner{BridgeThreadID: "B", Revision: 1, Reason: "rollout_truncated"}); res.Outcome != "degraded" {
		t.Fatalf("degrade: %+v", res)
	}
	head = d.e.Head()
	if res := d.exec(desktop.DegradeRelayScanner{BridgeThreadID: "B", Revision: 1, Reason: "rollout_replaced"}); res.Outcome != "unchanged" {
		t.Fatalf("degrade again: %+v", res)
	}
	if res := d.exec(desktop.AdvanceRelayScanner{BridgeThreadID: "B", Revision: 1, Offset: 200, Line: 5}); res.Outcome != "unchanged" || d.e.Head() != head {
		t.Fatalf("advance while degraded: %+v", res)
	}
	if sc := d.installation().RelayScanners["B"]; sc.DegradedReason != "rollout_truncated" || sc.DegradedAt.IsZero() {
		t.Fatalf("degraded: %+v", sc)
	}
	if res := d.exec(bind); res.Outcome != "bound" {
		t.Fatalf("rebind of the same file while degraded: %+v", res)
	}
	if sc := d.installation().RelayScanners["B"]; sc.Revision != 2 || sc.Offset != 0 || sc.DegradedReason != "" {
		t.Fatalf("rebound: %+v", sc)
	}
	if res := d.exec(bind); res.Outcome != "unchanged" {
		t.Fatalf("the same bind again: %+v", res)
	}
}
