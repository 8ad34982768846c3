package main

import (
	"fmt"
	"io"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
)

// DesktopRelayCmd groups the transcript relay's commands (spec/desktop.md,
// "The transcript relay"): a heartbeat writes back by printing an
// envelope line, which Codex records in the thread's rollout as tool
// output; the daemon reads it there and applies the CAS. These commands
// run outside the sandbox.
type DesktopRelayCmd struct {
	Marker            DesktopRelayMarkerCmd  `cmd:"" help:"Relay markers."`
	Scanner           DesktopRelayScannerCmd `cmd:"" help:"The daemon's rollout scanner."`
	ConsumeTranscript DesktopRelayConsumeCmd `cmd:"" name:"consume-transcript" help:"Operator: consume the envelopes carrying one marker in a rollout file, once."`
}

// DesktopRelayMarkerCmd groups the marker commands.
type DesktopRelayMarkerCmd struct {
	Issue DesktopRelayMarkerIssueCmd `cmd:"" help:"Issue a marker for one envelope kind and print the line the heartbeat must print."`
}

// DesktopRelayMarkerIssueCmd is `cbth desktop relay marker issue`.
type DesktopRelayMarkerIssueCmd struct {
	BridgeThreadID string `help:"The bridge thread whose heartbeat prints the envelope." required:"" name:"bridge-thread-id"`
	Kind           string `help:"arm-pending (before the arm), arm-accepted (after automation_update was accepted; only once the attempt is arm_pending) or paused (note-paused's proof: --attempt-id '' for the armed generation, or the arm_pending attempt whose arm never took effect)." required:"" enum:"arm-pending,arm-accepted,paused"`
	DesktopArmToken
}

// Run issues.
func (c *DesktopRelayMarkerIssueCmd) Run(env *Env) error {
	res, err := call(env, api.DesktopRelayMarkerIssue, api.MarkerIssueArgs{BridgeThreadID: c.BridgeThreadID, Kind: c.Kind,
		SourceThreadID: c.SourceThreadID, AttemptID: c.AttemptID, Generation: c.Generation, BridgeRequestID: c.BridgeRequestID})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) { fmt.Fprintln(w, res.Line) })
}

// DesktopRelayScannerCmd groups the scanner commands.
type DesktopRelayScannerCmd struct {
	Bind DesktopRelayScannerBindCmd `cmd:"" help:"Bind (or rebind) a bridge thread's scanner to its rollout file."`
}

// DesktopRelayScannerBindCmd is `cbth desktop relay scanner bind`.
type DesktopRelayScannerBindCmd struct {
	BridgeThreadID string `help:"The bridge thread." required:"" name:"bridge-thread-id"`
	RolloutPath    string `help:"The bridge thread's rollout JSONL (under CODEX_HOME/sessions)." required:"" name:"rollout-path" type:"path"`
}

// Run binds.
func (c *DesktopRelayScannerBindCmd) Run(env *Env) error {
	res, err := call(env, api.DesktopRelayScannerBind, api.ScannerBindArgs{BridgeThreadID: c.BridgeThreadID, RolloutPath: c.RolloutPath})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "bridge %s: %s to %s (revision %d)\n", res.BridgeThreadID, res.Outcome, res.RolloutPath, res.BindingRevision)
	})
}

// DesktopRelayConsumeCmd is `cbth desktop relay consume-transcript`.
type DesktopRelayConsumeCmd struct {
	RolloutPath string `help:"The rollout JSONL to read." required:"" name:"rollout-path" type:"path"`
	Marker      string `help:"The marker whose envelopes to consume." required:""`
}

// Run consumes.
func (c *DesktopRelayConsumeCmd) Run(env *Env) error {
	res, err := call(env, api.DesktopRelayConsume, api.ConsumeArgs{RolloutPath: c.RolloutPath, Marker: c.Marker})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "%s: %s (%d envelopes)\n", res.Marker, res.Outcome, len(res.Results))
		for _, r := range res.Results {
			fmt.Fprintf(w, "  line %d %s: %s %s %s\n", r.Line, r.Kind, r.Outcome, r.Applied, r.Reason)
		}
	})
}
