package main

import (
	"fmt"
	"io"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The Desktop writeback helpers (spec/desktop.md, part 2): the bridge's
// note-arm-pending, note-arm and note-paused, and the caller's
// note-boundary-crossed. They reach the daemon, which a heartbeat's
// sandbox refuses: inside Desktop the bridge writes back through the
// transcript relay instead (cmd_desktop_relay.go).

// DesktopArmToken is the token every arm helper takes.
type DesktopArmToken struct {
	SourceThreadID  string `help:"The caller's Desktop thread (ready entry .source_thread_id)." required:"" name:"source-thread-id"`
	AttemptID       string `help:"The attempt (ready entry .attempt_id)." required:"" name:"attempt-id"`
	Generation      uint64 `help:"The attempt's generation (ready entry .generation)." required:"" name:"generation"`
	BridgeRequestID string `help:"This bridge wake's own unique request id." required:"" name:"bridge-request-id"`
}

func (t DesktopArmToken) args() api.ArmArgs {
	return api.ArmArgs{SourceThreadID: t.SourceThreadID, AttemptID: t.AttemptID, Generation: t.Generation, BridgeRequestID: t.BridgeRequestID}
}

// DesktopNoteArmPendingCmd is `cbth desktop note-arm-pending`.
type DesktopNoteArmPendingCmd struct {
	DesktopArmToken
}

// Run notes the barrier.
func (c *DesktopNoteArmPendingCmd) Run(env *Env) error {
	res, err := call(env, api.DesktopNoteArmPending, c.args())
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "attempt %s generation %d: %s, lease %s until %s\n", res.AttemptID, res.Generation, res.Outcome,
			res.BridgeArmLeaseID, res.BridgeArmLeaseDeadline.Local().Format(time.RFC3339))
	})
}

// DesktopNoteArmCmd is `cbth desktop note-arm`.
type DesktopNoteArmCmd struct {
	DesktopArmToken
	BridgeArmLeaseID string `help:"The lease note-arm-pending answered (.bridge_arm_lease_id)." required:"" name:"bridge-arm-lease-id"`
}

// Run notes the arm.
func (c *DesktopNoteArmCmd) Run(env *Env) error {
	a := c.args()
	a.BridgeArmLeaseID = c.BridgeArmLeaseID
	res, err := call(env, api.DesktopNoteArm, a)
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "attempt %s generation %d: %s (attempt %d); pause between %s and %s\n", res.AttemptID, res.Generation, res.Outcome,
			res.DeliveryAttemptCount, res.PauseNotBefore.Local().Format(time.RFC3339), res.PauseDeadline.Local().Format(time.RFC3339))
	})
}

// DesktopNotePausedCmd is `cbth desktop note-paused`.
type DesktopNotePausedCmd struct {
	SourceThreadID  string `help:"The caller's Desktop thread." required:"" name:"source-thread-id"`
	Generation      uint64 `help:"The generation whose caller heartbeat the bridge verified PAUSED (pause-due entry .armed_generation, or the arm_pending entry's .generation)." required:"" name:"generation"`
	BridgeRequestID string `help:"This bridge wake's own unique request id (for an arm_pending attempt: the one it was noted with)." required:"" name:"bridge-request-id"`
}

// Run records the proof.
func (c *DesktopNotePausedCmd) Run(env *Env) error {
	res, err := call(env, api.DesktopNotePaused, api.PausedArgs{SourceThreadID: c.SourceThreadID, Generation: c.Generation, BridgeRequestID: c.BridgeRequestID})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "thread %s generation %d: %s\n", res.SourceThreadID, res.Generation, res.Outcome)
	})
}

// DesktopNoteBoundaryCrossedCmd is `cbth desktop note-boundary-crossed`.
type DesktopNoteBoundaryCrossedCmd struct {
	SourceThreadID           string `help:"The caller prompt's source_thread_id." required:"" name:"source-thread-id"`
	BatchID                  string `help:"The caller prompt's batch_id." required:"" name:"batch-id"`
	AttemptID                string `help:"The caller prompt's attempt_id." required:"" name:"attempt-id"`
	Generation               uint64 `help:"The caller prompt's generation." required:"" name:"generation"`
	ExpectedSnapshotRevision uint64 `help:"The caller prompt's snapshot_revision." required:"" name:"expected-snapshot-revision"`
}

// Run crosses the boundary, or says which of the five classes kept it.
func (c *DesktopNoteBoundaryCrossedCmd) Run(env *Env) error {
	fps, err := observedFingerprints()
	if err != nil {
		return err
	}
	req := api.BoundaryArgs{SourceThreadID: c.SourceThreadID, BatchID: c.BatchID, AttemptID: c.AttemptID,
		Generation: c.Generation, ExpectedSnapshotRevision: c.ExpectedSnapshotRevision, Fingerprints: fps}
	// Not call: a version mismatch or a replaced daemon must not send the
	// request twice, and every failure must land in one of the classes.
	// As bridge-preflight: inside a heartbeat's sandbox the socket and
	// the start-up lock are refused, and nothing is tried beyond them.
	h, err := env.Home()
	if err != nil {
		return err
	}
	client, err := ipc.Dial(h.Socket(), Version)
	if err != nil && ipc.Absent(err) && mayStart(h) {
		client, err = env.Client()
	}
	if err != nil {
		// Nothing was sent: positive proof that nothing crossed.
		return errs.Wrap(errs.TransientNotReady, err, "the daemon could not be reached, nothing was sent")
	}
	defer client.Close()
	res, err := api.DesktopNoteBoundaryCrossed.Call(client, req)
	if err != nil {
		switch errs.CodeOf(err) {
		case errs.TransientNotReady, errs.StaleOrSuperseded, errs.AlreadyCrossed, errs.BindingOrCapabilityInvalid, errs.EINVAL:
			return err
		case errs.EVERSION:
			// The daemon refused the frame before reading it.
			return errs.Wrap(errs.TransientNotReady, err, "the daemon speaks another protocol, nothing was done")
		}
		return errs.Wrap(errs.UnknownAfterHelperFailure, err, "the request was sent and its answer lost: reconcile with cbth batch inspect --batch-id %s", c.BatchID)
	}
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "batch %s: %s (attempt %s generation %d revision %d)\n%s\n", res.BatchID, res.Outcome, res.AttemptID,
			res.Generation, res.SnapshotRevision, res.Continuation.Summary)
	})
}

// DesktopIssueArtifactLeasesCmd is `cbth desktop issue-artifact-leases`:
// the operator's explicit request for the recovery leases of a batch's
// large artifacts (batch inspect, a read, only shows the valid ones).
type DesktopIssueArtifactLeasesCmd struct {
	BatchID string `help:"The batch." required:"" name:"batch-id"`
	Rotate  bool   `help:"Replace leases still valid (the old ones end)."`
}

// Run issues.
func (c *DesktopIssueArtifactLeasesCmd) Run(env *Env) error {
	res, err := call(env, api.DesktopIssueLeases, api.IssueLeasesArgs{BatchID: c.BatchID, Rotate: c.Rotate})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "batch %s: %s\n", res.BatchID, res.Outcome)
		for _, l := range res.Leases {
			fmt.Fprintf(w, "  artifact %s: lease %s until %s\n", l.ArtifactID, l.LeaseID, l.Deadline.Local().Format(time.RFC3339))
		}
	})
}

// DesktopReadArtifactCmd is `cbth desktop read-artifact`: operator
// recovery of a large artifact, by chunks, under the recovery lease
// `cbth desktop issue-artifact-leases` issued. Never a path to read.
type DesktopReadArtifactCmd struct {
	ArtifactID          string `help:"The artifact." required:"" name:"artifact-id"`
	ArtifactReadLeaseID string `help:"Its lease (.artifact_recovery_leases[].artifact_recovery_lease_id of desktop issue-artifact-leases, or of batch inspect while it is valid)." required:"" name:"artifact-read-lease-id"`
	Offset              int64  `help:"Where the chunk starts." default:"0"`
	MaxBytes            int64  `help:"The chunk's size, at most 1 MiB." default:"65536" name:"max-bytes"`
}

// Run reads one chunk; without --json it writes the raw bytes.
func (c *DesktopReadArtifactCmd) Run(env *Env) error {
	res, err := call(env, api.DesktopReadArtifact, api.ReadArtifactArgs{ArtifactID: c.ArtifactID, LeaseID: c.ArtifactReadLeaseID,
		Offset: c.Offset, MaxBytes: c.MaxBytes})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) { w.Write(res.Data) })
}

// DesktopRevokeArtifactLeaseCmd is `cbth desktop revoke-artifact-lease`.
type DesktopRevokeArtifactLeaseCmd struct {
	ArtifactID string `help:"The artifact whose recovery lease ends now." required:"" name:"artifact-id"`
}

// Run revokes.
func (c *DesktopRevokeArtifactLeaseCmd) Run(env *Env) error {
	res, err := call(env, api.DesktopRevokeLease, api.ArtifactLeaseArgs{ArtifactID: c.ArtifactID})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) { fmt.Fprintf(w, "artifact %s: %s\n", c.ArtifactID, res.Outcome) })
}
