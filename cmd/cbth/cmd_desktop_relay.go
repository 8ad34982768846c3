package main

import (
	"fmt"
	"io"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/internal/plural"
)

// DesktopRelayCmd groups the transcript relay's commands (spec/desktop.md,
// "The transcript relay"): a heartbeat writes back by running `relay
// print`, whose one line of output Codex records in the thread's rollout
// as tool output; the daemon reads it there and applies the CAS. `relay
// print` runs in the heartbeat's sandbox (cmd_desktop_read.go); these
// run outside it.
type DesktopRelayCmd struct {
	Print             DesktopRelayPrintCmd   `cmd:"" help:"Heartbeat (sandbox-safe): print the one relay line of a marker in the published snapshot. Printing it is the decision: its scanner applies what it stands for."`
	Marker            DesktopRelayMarkerCmd  `cmd:"" help:"Relay markers."`
	Scanner           DesktopRelayScannerCmd `cmd:"" help:"The daemon's rollout scanner."`
	ConsumeTranscript DesktopRelayConsumeCmd `cmd:"" name:"consume-transcript" help:"Operator: consume the envelopes carrying one marker in a rollout file, once."`
}

// DesktopRelayMarkerCmd groups the marker commands.
type DesktopRelayMarkerCmd struct {
	Issue DesktopRelayMarkerIssueCmd `cmd:"" help:"Issue a marker for one envelope kind and show its relay line (labelled: showing it applies nothing; .line under --json)."`
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
	// Labelled, so that this output, shown in a heartbeat's tool output,
	// is not itself a relay line: only a line that starts with the
	// prefix counts.
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "marker %s (%s): %s, expires %s\n", res.Marker, res.Kind, res.Outcome, res.ExpiresAt.Local().Format(time.RFC3339))
		fmt.Fprintf(w, "relay line: %s\n", res.Line)
	})
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
	BridgeThreadID string `help:"The bridge thread whose rollout this is: only markers issued for it are consumed." required:"" name:"bridge-thread-id"`
	RolloutPath    string `help:"The rollout JSONL to read." required:"" name:"rollout-path" type:"path"`
	Marker         string `help:"The marker whose envelopes to consume." required:""`
}

// Run consumes.
func (c *DesktopRelayConsumeCmd) Run(env *Env) error {
	res, err := call(env, api.DesktopRelayConsume, api.ConsumeArgs{BridgeThreadID: c.BridgeThreadID, RolloutPath: c.RolloutPath, Marker: c.Marker})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "%s: %s (%s)\n", res.Marker, res.Outcome, plural.Count(len(res.Results), "envelope", "envelopes"))
		for _, r := range res.Results {
			fmt.Fprintf(w, "  line %d %s: %s %s %s\n", r.Line, r.Kind, r.Outcome, r.Applied, r.Reason)
		}
	})
}
