package desktopsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/projections/inbox"
)

// Desktop plays what Codex Desktop itself does around the heartbeats: it
// keeps the caller automations the bridge arms and pauses, and records
// what the bridge heartbeat's commands print in the bridge thread's
// rollout file, as a function_call_output response_item (research notes,
// upstream-facts.md B1). The pinned Codex CLI writing such a record is
// proven in cmd/cbth (TestDesktop_RelayOnARealRollout); here the record
// is written directly so that many wakes stay cheap.
type Desktop struct {
	// Rollout is the bridge thread's rollout file.
	Rollout     string
	Automations map[string]*Automation
	calls       int
}

// Automation is one caller heartbeat automation.
type Automation struct {
	Status string // ACTIVE or PAUSED
	// Token is the caller prompt's five tokens, written at each arm.
	Token inbox.ReadyEntry
	// Wakes counts the arms that were not yet followed by a caller wake.
	Wakes int
}

// NewDesktop starts an empty rollout file in dir.
func NewDesktop(dir string) (*Desktop, error) {
	path := filepath.Join(dir, "rollout-bridge.jsonl")
	meta := `{"timestamp":"2026-11-21T10:00:00.000Z","type":"session_meta","payload":{"id":"bridge"}}` + "\n"
	if err := os.WriteFile(path, []byte(meta), 0o600); err != nil {
		return nil, err
	}
	return &Desktop{Rollout: path, Automations: map[string]*Automation{}}, nil
}

// Print records a command's output in the rollout. prompt, when not
// empty, is recorded first as the user's message: a copy of the same text
// outside any tool output, which must never count.
func (d *Desktop) Print(prompt string, lines ...string) error {
	if len(lines) == 0 && prompt == "" {
		return nil
	}
	f, err := os.OpenFile(d.Rollout, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	ts := time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	if prompt != "" {
		if err := enc.Encode(map[string]any{"timestamp": ts, "type": "response_item", "payload": map[string]any{
			"type": "message", "role": "user", "content": []map[string]string{{"type": "input_text", "text": prompt}}}}); err != nil {
			return err
		}
	}
	if len(lines) == 0 {
		return nil
	}
	d.calls++
	out := "bridge wake\n" + strings.Join(lines, "\n") + "\n"
	return enc.Encode(map[string]any{"timestamp": ts, "type": "response_item", "payload": map[string]any{
		"type": "function_call_output", "call_id": fmt.Sprintf("call_%d", d.calls), "output": out}})
}

// automation returns the automation id's state, creating it PAUSED.
func (d *Desktop) automation(id string) *Automation {
	a := d.Automations[id]
	if a == nil {
		a = &Automation{Status: "PAUSED"}
		d.Automations[id] = a
	}
	return a
}

// Step names the points of a relay wake after which a bridge may crash.
type Step int

// The steps of a relay wake, in order.
const (
	StepNone         Step = iota
	StepPrintPending      // printed the arm-pending line
	StepArm               // armed the caller automation (automation_update), nothing printed yet
	StepPrintArmed        // printed the arm-accepted line
	StepPause             // paused the caller automation, nothing printed yet
)

// RelayWake is one wake of a bridge that can write back only through
// the transcript relay, run as the bridge prompt in spec/desktop.md says:
// bridge-preflight in the sandbox (the wake stops if it fails or
// automatic continuation is off), the revision read as direct_file_read
// does, then, each line printed by `cbth desktop relay print` in the
// sandbox (the snapshot holds markers, never lines), the lines recorded
// as one command's output:
//
//   - each arm-pending entry: arm its caller automation with the entry's
//     token and print its arm-accepted line;
//   - else the first ready entry: print its arm-pending line (the arm
//     itself waits for the next wake, once arm_pending is durable);
//   - each pause-due entry: pause its automation and print its paused
//     line.
//
// crash, when not StepNone, ends the wake right after that step (what
// was printed before it is recorded). It returns the wake and the lines
// recorded.
func (b *Bridge) RelayWake(desk *Desktop, crash Step) (Wake, []string, error) {
	var w Wake
	r, err := b.Helper(&w.Preflight, b.PreflightAllow(), "bridge-preflight", "--bridge-thread-id", b.ThreadID)
	if err != nil {
		return w, nil, err
	}
	if r.Code != 0 {
		w.Failed = &r
		return w, nil, nil
	}
	if !w.Preflight.AutomaticContinuation {
		return w, nil, nil
	}
	if w.Direct, err = ReadDirect(filepath.Join(b.Home, "inbox"), b.ThreadID); err != nil {
		return w, nil, err
	}
	if w.Direct.Manifest.SnapshotRevision != w.Preflight.SnapshotRevision {
		// A newer revision came between preflight and the read: this
		// wake trusts only what preflight vouched for.
		return w, nil, nil
	}
	var printed []string
	done := func() (Wake, []string, error) { return w, printed, desk.Print("", printed...) }
	relayPrint := func(kind, marker string) error {
		line, err := b.RelayPrint(kind, marker)
		if err == nil {
			printed = append(printed, line)
		}
		return err
	}
	bindings := map[string]inbox.BindingEntry{}
	for _, e := range w.Direct.Bindings.Entries {
		bindings[e.SourceThreadID] = e
	}
	pending := map[string]bool{}
	for _, e := range w.Direct.ArmPending.Entries {
		pending[e.SourceThreadID] = true
		if e.RelayMarker == "" {
			continue
		}
		a := desk.automation(e.CallerAutomationID)
		a.Status, a.Wakes = "ACTIVE", a.Wakes+1
		a.Token = inbox.ReadyEntry{SourceThreadID: e.SourceThreadID, BatchID: e.BatchID, AttemptID: e.AttemptID,
			Generation: e.Generation, SnapshotRevision: e.SnapshotRevision}
		if crash == StepArm {
			return done()
		}
		if err := relayPrint("arm-accepted", e.RelayMarker); err != nil {
			return w, printed, err
		}
		if crash == StepPrintArmed {
			return done()
		}
	}
	if len(w.Direct.Ready.Entries) > 0 {
		e := w.Direct.Ready.Entries[0]
		if bd, ok := bindings[e.SourceThreadID]; ok && bd.BindingState == string(fsm.BindingBound) && !pending[e.SourceThreadID] &&
			!e.RequiresArtifactRead && e.RelayMarker != "" {
			if err := relayPrint("arm-pending", e.RelayMarker); err != nil {
				return w, printed, err
			}
			if crash == StepPrintPending {
				return done()
			}
		}
	}
	for _, e := range w.Direct.PauseDue.Entries {
		if e.RelayMarker == "" {
			continue
		}
		desk.automation(e.CallerAutomationID).Status = "PAUSED"
		if crash == StepPause {
			return done()
		}
		if err := relayPrint("paused", e.RelayMarker); err != nil {
			return w, printed, err
		}
	}
	return done()
}

// CallerWake fires the wake of an ACTIVE caller automation: its prompt
// runs note-boundary-crossed with the five tokens the bridge wrote. It
// runs outside the sandbox: the caller path exists only where a
// heartbeat reaches the daemon (spec/desktop.md, "Part 2: writeback").
// It returns the helper's exit code and output.
func (d *Desktop) CallerWake(bin, home string, env []string, id string) (int, string, error) {
	a := d.Automations[id]
	if a == nil || a.Status != "ACTIVE" || a.Wakes == 0 {
		return 0, "", fmt.Errorf("automation %s is not armed", id)
	}
	a.Wakes--
	t := a.Token
	cmd := exec.Command(bin, "--home", home, "desktop", "note-boundary-crossed", "--source-thread-id", t.SourceThreadID,
		"--batch-id", t.BatchID, "--attempt-id", t.AttemptID, "--generation", strconv.FormatUint(t.Generation, 10),
		"--expected-snapshot-revision", strconv.FormatUint(t.SnapshotRevision, 10), "--json")
	cmd.Env = append(append(os.Environ(), "CBTH_HOME="+home), env...)
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), string(out), nil
	}
	return 0, string(out), err
}
