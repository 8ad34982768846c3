package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
	"github.com/cbth-dev/cbth/projections/inbox"
)

// DesktopCmd groups the Codex Desktop commands (spec/desktop.md): the
// operator's installation-state and binding repairs, and the helpers a
// Desktop bridge heartbeat runs. bridge-preflight, list-arm-pending,
// list-pause-due and claim-next-ready work inside the heartbeat's sandbox:
// the last three only ever read the published files (cmd_desktop_read.go).
type DesktopCmd struct {
	InstallationState   DesktopInstallationCmd        `cmd:"" name:"installation-state" help:"Show or repair the Desktop installation state (transport and capabilities)."`
	Binding             DesktopBindingCmd             `cmd:"" help:"Bind Desktop threads to their caller heartbeat automations."`
	BridgePreflight     DesktopPreflightCmd           `cmd:"" name:"bridge-preflight" help:"Every bridge wake: sweep and publish through the daemon, or in a sandbox check the published snapshot is fresh."`
	ListArmPending      DesktopListArmPendingCmd      `cmd:"" name:"list-arm-pending" help:"Read the published arm-pending bindings (sandbox-safe: reads files only)."`
	ListPauseDue        DesktopListPauseDueCmd        `cmd:"" name:"list-pause-due" help:"Read the published pause-due bindings (sandbox-safe: reads files only)."`
	ClaimNextReady      DesktopClaimNextReadyCmd      `cmd:"" name:"claim-next-ready" help:"Peek at the next ready thread in fair order (sandbox-safe: reads files only, reserves nothing)."`
	NoteArmPending      DesktopNoteArmPendingCmd      `cmd:"" name:"note-arm-pending" help:"Bridge: the durable barrier before arming the caller heartbeat (prepared -> arm_pending, with a bridge arm lease)."`
	NoteArm             DesktopNoteArmCmd             `cmd:"" name:"note-arm" help:"Bridge: the caller heartbeat is armed (arm_pending -> cooldown; counts the attempt once)."`
	NotePaused          DesktopNotePausedCmd          `cmd:"" name:"note-paused" help:"Bridge: the caller heartbeat of a generation is verified paused or quiesced."`
	NoteBoundaryCrossed DesktopNoteBoundaryCrossedCmd `cmd:"" name:"note-boundary-crossed" help:"Caller: cross the continuation boundary once and receive the inline continuation."`
	Relay               DesktopRelayCmd               `cmd:"" help:"The transcript relay: markers, the rollout scanner, one-shot consumption."`
	IssueArtifactLeases DesktopIssueArtifactLeasesCmd `cmd:"" name:"issue-artifact-leases" help:"Operator: issue the recovery leases of a batch's artifacts too large to be inline (a lease still valid is kept unless --rotate)."`
	ReadArtifact        DesktopReadArtifactCmd        `cmd:"" name:"read-artifact" help:"Operator: read a large artifact by chunks under its recovery lease."`
	RevokeArtifactLease DesktopRevokeArtifactLeaseCmd `cmd:"" name:"revoke-artifact-lease" help:"Operator: end an artifact's recovery lease now."`
	ValidateMCP         DesktopValidateMCPCmd         `cmd:"" name:"validate-mcp" help:"Prove live that Desktop threads reach cbth's MCP tools: prints a prompt to paste into a Desktop thread; its tool call validates the mcp writeback transport."`
	ValidateQueue       DesktopValidateQueueCmd       `cmd:"" name:"validate-queue" help:"Prove live that Codex drains the queue cbth adds to (experimental): queues a marker for a bound thread; seen drained in its rollout, it validates the queue writeback transport."`
}

// DesktopInstallationCmd is `cbth desktop installation-state`.
type DesktopInstallationCmd struct {
	Show   DesktopInstallationShowCmd   `cmd:"" default:"1" hidden:"" help:"Show the installation state."`
	Repair DesktopInstallationRepairCmd `cmd:"" help:"Set the read transport and the capabilities a live validation proved (the only writer)."`
}

// DesktopInstallationShowCmd is `cbth desktop installation-state`.
type DesktopInstallationShowCmd struct{}

// observedFingerprints are this cbth's validation fingerprints, by read
// transport.
func observedFingerprints() (map[string]string, error) {
	fps := map[string]string{}
	for _, t := range desktop.ReadTransports {
		fp, err := inbox.Observe(Version, t)
		if err != nil {
			return nil, errs.Wrap(errs.EINTERNAL, err, "observe this cbth's validation fingerprint")
		}
		fps[t] = fp
	}
	return fps, nil
}

// Run shows the state.
func (c *DesktopInstallationShowCmd) Run(env *Env) error {
	fps, err := observedFingerprints()
	if err != nil {
		return err
	}
	v, err := call(env, api.DesktopInstallation, api.InstallationArgs{Fingerprints: fps})
	if err != nil {
		return err
	}
	return env.emit(v, func(w io.Writer) { printInstallation(w, "", v) })
}

func printInstallation(w io.Writer, outcome engine.Outcome, v query.InstallationView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if outcome != "" {
		fmt.Fprintf(tw, "outcome\t%s\n", outcome)
	}
	if !v.Configured {
		fmt.Fprintf(tw, "installation\tnot set up (cbth desktop installation-state repair --read-transport direct_file_read)\n")
	}
	fmt.Fprintf(tw, "read transport\t%s, generation %d\n", v.ReadTransport, v.ReadTransportGeneration)
	fmt.Fprintf(tw, "capabilities\tread %s, artifact read %s, writeback %s\n", v.ReadTransportCapability, v.ArtifactReadCapability, v.WritebackCapability)
	fmt.Fprintf(tw, "fingerprint\t%s (this cbth: %s, match %t)\n", v.ValidationFingerprint, v.ObservedFingerprint, v.FingerprintMatch)
	if v.ValidatedAt != nil {
		fmt.Fprintf(tw, "validated at\t%s\n", v.ValidatedAt.Local().Format(time.RFC3339))
	}
	fmt.Fprintf(tw, "bridge thread\t%s\n", v.BridgeThreadID)
	fmt.Fprintf(tw, "writeback transports\tmcp %s, relay %s, direct %s, queue %s (in use: %s)\n", v.WritebackTransports["mcp"], v.WritebackTransports["relay"],
		v.WritebackTransports["direct"], v.WritebackTransports["queue"], orNone(v.WritebackTransport))
	if m := v.MCPValidation; m != nil {
		fmt.Fprintf(tw, "mcp validated\tby thread %s (%s) at %s, current %t\n", m.ThreadID, m.SandboxMode, m.ValidatedAt.Local().Format(time.RFC3339), m.Current)
	}
	if q := v.QueueValidation; q != nil {
		fmt.Fprintf(tw, "queue validated\tdrained in thread %s (item %s) at %s, for %s, current %t (experimental)\n", q.ThreadID, q.QueuedItemID,
			q.ValidatedAt.Local().Format(time.RFC3339), q.CodexHome, q.Current)
	}
	if q := v.QueueValidationOpen; q != nil {
		fmt.Fprintf(tw, "queue validation\twaiting for thread %s to drain item %s until %s\n", q.ThreadID, q.QueuedItemID, q.Deadline.Local().Format(time.RFC3339))
	}
	if f := v.QueueValidationFailure; f != nil {
		fmt.Fprintf(tw, "queue validation failed\t%s at %s (thread %s): %s\n", f.Reason, f.FailedAt.Local().Format(time.RFC3339), f.ThreadID, f.Detail)
	}
	fmt.Fprintf(tw, "automatic continuation\t%t\n", v.AutomaticContinuation)
	fmt.Fprintf(tw, "manifest\t%s\n", v.SnapshotManifestPath)
	tw.Flush()
}

// DesktopInstallationRepairCmd is `cbth desktop installation-state repair`.
type DesktopInstallationRepairCmd struct {
	ReadTransport           string `help:"direct_file_read or helper_cli_read." required:"" enum:"direct_file_read,helper_cli_read" name:"read-transport"`
	ReadTransportCapability string `help:"unknown, validated or unavailable (left out: unknown)." enum:",unknown,validated,unavailable" default:"" name:"read-transport-capability"`
	ArtifactReadCapability  string `help:"unknown, validated or unavailable (left out: unknown)." enum:",unknown,validated,unavailable" default:"" name:"artifact-read-capability"`
	WritebackCapability     string `help:"unknown, validated or unavailable (left out: unknown)." enum:",unknown,validated,unavailable" default:"" name:"writeback-capability"`
}

// Run repairs.
func (c *DesktopInstallationRepairCmd) Run(env *Env) error {
	fp, err := inbox.Observe(Version, c.ReadTransport)
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "observe this cbth's validation fingerprint")
	}
	res, err := call(env, api.DesktopInstallationRepair, api.InstallationRepairArgs{ReadTransport: c.ReadTransport,
		ReadTransportCapability: c.ReadTransportCapability, ArtifactReadCapability: c.ArtifactReadCapability,
		WritebackCapability: c.WritebackCapability, Fingerprint: fp})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		printInstallation(w, res.Outcome, res.InstallationView)
		if len(res.DegradedBindings) > 0 {
			fmt.Fprintf(w, "%s degraded (cbth desktop binding repair each)\n", plural.Count(len(res.DegradedBindings), "binding", "bindings"))
		}
	})
}

// DesktopBindingCmd groups the binding commands.
type DesktopBindingCmd struct {
	Repair DesktopBindingRepairCmd `cmd:"" help:"Bind a thread to its caller automation, or repair a degraded binding."`
	Unbind DesktopBindingUnbindCmd `cmd:"" help:"Unbind a thread: it is never armed again until bound."`
	List   DesktopBindingListCmd   `cmd:"" help:"List bindings."`
}

// DesktopBindingRepairCmd is `cbth desktop binding repair`.
type DesktopBindingRepairCmd struct {
	SourceThreadID     string `help:"The Desktop thread." required:"" name:"source-thread-id"`
	CallerAutomationID string `help:"Its caller heartbeat automation (left out: none, for the queue writeback transport only)." name:"caller-automation-id"`
	BridgeThreadID     string `help:"Pin the binding to this bridge thread (default: whichever bridge the installation publishes for)." name:"bridge-thread-id"`
}

// Run repairs.
func (c *DesktopBindingRepairCmd) Run(env *Env) error {
	res, err := call(env, api.DesktopBindingRepair, api.BindingRepairArgs{SourceThreadID: c.SourceThreadID,
		CallerAutomationID: c.CallerAutomationID, BridgeThreadID: c.BridgeThreadID})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		to := res.CallerAutomationID
		if to == "" {
			to = "no caller automation (the queue writeback transport only)"
		}
		fmt.Fprintf(w, "thread %s: %s to %s (%s)\n", c.SourceThreadID, res.Outcome, to, res.BindingState)
		fmt.Fprintf(w, "capabilities: read %s, artifact read %s, writeback %s\n", res.ReadTransportCapability, res.ArtifactReadCapability, res.WritebackCapability)
		if res.ReplacedAutomation {
			fmt.Fprintf(w, "replaced %s (proven quiesced: %t)\n", res.PreviousAutomationID, res.OldAutomationQuiesced)
		}
		if res.ForcedFreshAttempt {
			fmt.Fprintln(w, "automatic delivery goes on with a fresh attempt and generation")
		}
	})
}

// DesktopBindingUnbindCmd is `cbth desktop binding unbind`.
type DesktopBindingUnbindCmd struct {
	SourceThreadID   string `help:"The Desktop thread." required:"" name:"source-thread-id"`
	DeleteAutomation string `help:"true if the caller automation is (to be) deleted, false if it stays." required:"" enum:"true,false" name:"delete-automation"`
}

// Run unbinds.
func (c *DesktopBindingUnbindCmd) Run(env *Env) error {
	res, err := call(env, api.DesktopBindingUnbind, api.BindingUnbindArgs{SourceThreadID: c.SourceThreadID, DeleteAutomation: c.DeleteAutomation == "true"})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) { fmt.Fprintf(w, "thread %s: %s\n", c.SourceThreadID, res.Outcome) })
}

// DesktopBindingListCmd is `cbth desktop binding list`.
type DesktopBindingListCmd struct {
	State string `help:"unbound, bound or degraded." enum:",unbound,bound,degraded" default:""`
	Paging
}

// Run lists.
func (c *DesktopBindingListCmd) Run(env *Env) error {
	list, err := allPages(c.Paging, func(after string, limit int) ([]query.BindingView, string, error) {
		page, err := call(env, api.DesktopBindingList, api.BindingListArgs{State: c.State, After: after, Limit: limit})
		return page.Bindings, page.Next, err
	})
	if err != nil {
		return err
	}
	return env.emit(list, func(w io.Writer) {
		if len(list) == 0 {
			fmt.Fprintln(w, "no bindings")
			return
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "THREAD\tSTATE\tAUTOMATION\tBRIDGE\tGENERATION\tMIRROR")
		for _, b := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%t\n", b.SourceThreadID, b.BindingState, b.CallerAutomationID, b.BridgeThreadID, b.ReadTransportGeneration, b.MirrorMatches)
		}
		tw.Flush()
	})
}

// BatchSkipHeadCmd is `cbth batch skip-head`: the operator's explicit
// skip, one of the moves of the durable fair-ready cursor.
type BatchSkipHeadCmd struct {
	SourceThreadID string `help:"The thread." required:"" name:"source-thread-id"`
}

// Run skips.
func (c *BatchSkipHeadCmd) Run(env *Env) error {
	res, err := call(env, api.BatchSkipHead, api.ThreadArgs{SourceThreadID: c.SourceThreadID})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) { fmt.Fprintf(w, "thread %s: %s %s\n", c.SourceThreadID, res.Outcome, res.BatchID) })
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// DesktopValidateMCPCmd is `cbth desktop validate-mcp`.
type DesktopValidateMCPCmd struct {
	TTL     time.Duration `name:"ttl" default:"30m" help:"How long the prompt's token stays valid."`
	Wait    bool          `help:"Wait until a Desktop thread's call validates it (or the token expires)."`
	Timeout time.Duration `default:"0s" help:"With --wait, give up after this long (default: when the token expires)."`
}

type validateMCPResult struct {
	api.MCPValidationRequestReply
	Validated  bool                     `json:"validated"`
	Validation *query.MCPValidationView `json:"mcp_validation"`
}

// Run opens the validation and prints the prompt; with --wait it waits
// for the proof.
func (c *DesktopValidateMCPCmd) Run(env *Env) error {
	if c.TTL <= 0 || c.TTL > desktop.MaxMCPValidationTTL {
		return errs.New(errs.EINVAL, "--ttl must be positive and at most %s", desktop.MaxMCPValidationTTL)
	}
	req, err := call(env, api.DesktopMCPValidationRequest, api.MCPValidationRequestArgs{TTLMS: c.TTL.Milliseconds()})
	if err != nil {
		return err
	}
	res := validateMCPResult{MCPValidationRequestReply: req}
	if !env.JSON || !c.Wait {
		fmt.Fprintf(env.Stderr, "Paste this into a Codex Desktop thread (any thread; cbth mcp install must have added cbth to Desktop's config) before %s:\n\n%s\n\n",
			req.ExpiresAt.Local().Format(time.RFC3339), req.Prompt)
	}
	if c.Wait {
		deadline := req.ExpiresAt
		if c.Timeout > 0 && time.Now().Add(c.Timeout).Before(deadline) {
			deadline = time.Now().Add(c.Timeout)
		}
		for {
			v, err := call(env, api.DesktopInstallation, api.InstallationArgs{})
			if err != nil {
				return err
			}
			if v.MCPValidationOpenUntil == nil && v.MCPValidation != nil && v.MCPValidation.ValidatedAt.After(req.ExpiresAt.Add(-c.TTL)) {
				res.Validated, res.Validation = true, v.MCPValidation
				break
			}
			if !time.Now().Before(deadline) {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	if err := env.emit(res, func(w io.Writer) {
		switch {
		case res.Validated:
			fmt.Fprintf(w, "validated: Desktop thread %s reached cbth's tools; the mcp writeback transport is validated\n", res.Validation.ThreadID)
		case c.Wait:
			fmt.Fprintln(w, "not validated: no Desktop thread called desktop_validate_mcp with the token in time")
		default:
			fmt.Fprintf(w, "waiting for the call (cbth desktop installation-state shows it); the token expires at %s\n", req.ExpiresAt.Local().Format(time.RFC3339))
		}
	}); err != nil {
		return err
	}
	if c.Wait && !res.Validated {
		return exitStatus(1)
	}
	return nil
}

// DesktopValidateQueueCmd is `cbth desktop validate-queue`.
type DesktopValidateQueueCmd struct {
	SourceThreadID string        `help:"A bound Desktop thread, open and idle in Codex Desktop (not one codex exec started)." required:"" name:"source-thread-id"`
	Window         time.Duration `default:"2m" help:"How long Codex has to drain the marker (at most 1h)."`
	Wait           bool          `help:"Wait until the marker is seen drained, or the window closes."`
}

type validateQueueResult struct {
	api.QueueValidateReply
	Validated  bool                          `json:"validated"`
	Validation *query.QueueValidationView    `json:"queue_validation"`
	Failure    *query.QueueValidationFailure `json:"queue_validation_failure"`
}

// Run queues the marker; with --wait it waits for the outcome.
func (c *DesktopValidateQueueCmd) Run(env *Env) error {
	if c.Window <= 0 || c.Window > desktop.MaxQueueValidationWindow {
		return errs.New(errs.EINVAL, "--window must be positive and at most %s", desktop.MaxQueueValidationWindow)
	}
	req, err := call(env, api.DesktopQueueValidate, api.QueueValidateArgs{SourceThreadID: c.SourceThreadID, WindowMS: c.Window.Milliseconds()})
	if err != nil {
		return err
	}
	res := validateQueueResult{QueueValidateReply: req}
	if c.Wait {
		// The daemon decides on the engine clock: the scan records the
		// proof, the sweep the failure at the deadline. Only this wait
		// runs on the wall clock, bounded by the window and a margin.
		deadline := time.Now().Add(c.Window + time.Minute)
		for {
			v, err := call(env, api.DesktopInstallation, api.InstallationArgs{})
			if err != nil {
				return err
			}
			if q := v.QueueValidation; q != nil && q.Marker == req.Marker {
				res.Validated, res.Validation = true, q
				break
			}
			if f := v.QueueValidationFailure; f != nil && f.Marker == req.Marker {
				res.Failure = f
				break
			}
			if !time.Now().Before(deadline) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	if err := env.emit(res, func(w io.Writer) {
		switch {
		case res.Validated:
			fmt.Fprintf(w, "validated: thread %s drained the marker from Codex's queue; the queue writeback transport is validated (experimental)\n", res.Validation.ThreadID)
		case res.Failure != nil:
			fmt.Fprintf(w, "not validated (%s): %s\n", res.Failure.Reason, res.Failure.Detail)
		case c.Wait:
			fmt.Fprintln(w, "not validated: no outcome was recorded in time (cbth desktop installation-state shows it)")
		default:
			fmt.Fprintf(w, "queued marker %s as item %s for thread %s; waiting until %s for Codex to drain it (cbth desktop installation-state shows the outcome)\n",
				req.Marker, req.QueuedItemID, req.SourceThreadID, req.Deadline.Local().Format(time.RFC3339))
		}
	}); err != nil {
		return err
	}
	if c.Wait && !res.Validated {
		return exitStatus(1)
	}
	return nil
}
