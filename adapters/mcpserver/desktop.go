package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
	"github.com/cbth-dev/cbth/projections/inbox"
)

// The Desktop heartbeats' tools (spec/desktop.md, "Writeback
// transports"): the same requests, answers and outcome classes as the
// CLI helpers, with the bridge or the source thread taken from the call's
// _meta. A heartbeat is a Codex thread: the bridge heartbeat's calls come
// from the bridge thread, a caller heartbeat's from its bound source
// thread.

type desktopNone struct{}

type armIn struct {
	SourceThreadID   string `json:"source_thread_id" jsonschema:"the thread whose head the bridge arms, from desktop_claim_next_ready"`
	AttemptID        string `json:"attempt_id"`
	Generation       uint64 `json:"generation"`
	BridgeRequestID  string `json:"bridge_request_id" jsonschema:"a new id for this arm, kept for its retries and for note_arm"`
	BridgeArmLeaseID string `json:"bridge_arm_lease_id,omitempty" jsonschema:"desktop_note_arm only: the lease desktop_note_arm_pending answered"`
}

type pausedIn struct {
	SourceThreadID  string `json:"source_thread_id"`
	Generation      uint64 `json:"generation"`
	BridgeRequestID string `json:"bridge_request_id"`
}

type boundaryIn struct {
	SourceThreadID           string `json:"source_thread_id,omitempty" jsonschema:"the calling thread itself (default)"`
	BatchID                  string `json:"batch_id"`
	AttemptID                string `json:"attempt_id"`
	Generation               uint64 `json:"generation"`
	ExpectedSnapshotRevision uint64 `json:"expected_snapshot_revision"`
}

type readArtifactIn struct {
	ArtifactID string `json:"artifact_id"`
	LeaseID    string `json:"artifact_read_lease_id"`
	Offset     int64  `json:"offset,omitempty"`
	MaxBytes   int64  `json:"max_bytes,omitempty" jsonschema:"at most this many bytes (default and most 1 MiB)"`
}

type validateIn struct {
	Token string `json:"token" jsonschema:"the token cbth desktop validate-mcp printed"`
}

// addDesktop registers the Desktop tools with add.
func (t tools) addDesktop(add func(string, string, *jsonschema.Schema, *sdk.ToolAnnotations, func(context.Context, caller, json.RawMessage) (string, any, error))) {
	no, yes := false, true
	ro := &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}
	writes := &sdk.ToolAnnotations{DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no}
	add("desktop_bridge_preflight", "Bridge heartbeat, first call of each wake: cbth sweeps, prepares the ready threads and publishes the snapshot for this bridge thread.",
		schemaFor[desktopNone](), writes, t.preflight)
	add("desktop_claim_next_ready", "Bridge heartbeat: the next thread whose caller heartbeat should be armed, with the tokens its prompt carries (a peek: nothing is reserved).",
		schemaFor[desktopNone](), ro, t.claim)
	add("desktop_list_arm_pending", "Bridge heartbeat: the arms left pending by an earlier wake, to settle first.",
		schemaFor[desktopNone](), ro, t.listArmPending)
	add("desktop_list_pause_due", "Bridge heartbeat: the armed caller heartbeats to pause now.",
		schemaFor[desktopNone](), ro, t.listPauseDue)
	add("desktop_note_arm_pending", "Bridge heartbeat, before it arms a caller heartbeat: record the arm as pending and get its lease.",
		schemaFor[armIn](), writes, t.noteArmPending)
	add("desktop_note_arm", "Bridge heartbeat, after Codex accepted the automation update that armed the caller heartbeat: record the arm.",
		schemaFor[armIn](), writes, t.noteArm)
	add("desktop_note_paused", "Bridge heartbeat, after the caller heartbeat of a generation is paused: record the proof.",
		schemaFor[pausedIn](), writes, t.notePaused)
	add("desktop_note_boundary_crossed", "Caller heartbeat, in its own thread, before anything else: cross the continuation boundary and receive the continuation, once.",
		schemaFor[boundaryIn](), &sdk.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &no}, t.crossBoundary)
	add("desktop_read_artifact", "Read one chunk of an artifact of this thread's jobs under its recovery lease.",
		schemaFor[readArtifactIn](), ro, t.readArtifact)
	add("desktop_validate_mcp", "Prove that this Desktop thread reaches cbth's tools: call it with the token cbth desktop validate-mcp printed.",
		schemaFor[validateIn](), writes, t.validate)
}

// snapshot opens the published snapshot for the calling bridge thread.
func (t tools) snapshot(c caller) (*inbox.Snapshot, error) {
	if t.cfg.Inbox == "" {
		return nil, errs.New(errs.ENOTCONF, "no Desktop inbox configured for this server")
	}
	return inbox.Reader{Dir: t.cfg.Inbox, Bridge: c.ThreadID}.Open()
}

func noArgs(args json.RawMessage) error {
	var in desktopNone
	_, err := decode(args, &in, nil)
	return err
}

func (t tools) preflight(ctx context.Context, c caller, args json.RawMessage) (string, any, error) {
	if err := noArgs(args); err != nil {
		return "", nil, err
	}
	rep, err := t.d.DesktopPreflight(ctx, api.MCPDesktopArgs{Caller: c, Fingerprints: t.cfg.Fingerprints})
	if err != nil {
		return "", nil, err
	}
	if !rep.AutomaticContinuation {
		return fmt.Sprintf("Snapshot %d published for this bridge thread, but automatic continuation is off: arm nothing this wake.", rep.SnapshotRevision), rep, nil
	}
	return fmt.Sprintf("Snapshot %d published for this bridge thread: settle desktop_list_arm_pending, then desktop_list_pause_due, then desktop_claim_next_ready.", rep.SnapshotRevision), rep, nil
}

func (t tools) claim(_ context.Context, c caller, args json.RawMessage) (string, any, error) {
	return t.read(c, args, func(s *inbox.Snapshot) (string, any, error) {
		out, err := s.Claim(func(transport string) (string, error) { return t.cfg.Fingerprints[transport], nil })
		switch {
		case err != nil:
			return "", nil, err
		case out.Ready == nil:
			return fmt.Sprintf("Nothing to arm (%s).", out.NotReadyReason), out, nil
		}
		r := out.Ready
		return fmt.Sprintf("Arm caller automation %s for thread %s: batch %s, attempt %s, generation %d, snapshot revision %d.",
			out.Binding.CallerAutomationID, r.SourceThreadID, r.BatchID, r.AttemptID, r.Generation, r.SnapshotRevision), out, nil
	})
}

func (t tools) listArmPending(_ context.Context, c caller, args json.RawMessage) (string, any, error) {
	return t.read(c, args, func(s *inbox.Snapshot) (string, any, error) {
		out, err := s.ArmPendingList()
		return plural.Count(len(out.Entries), "arm", "arms") + " pending.", out, err
	})
}

func (t tools) listPauseDue(_ context.Context, c caller, args json.RawMessage) (string, any, error) {
	return t.read(c, args, func(s *inbox.Snapshot) (string, any, error) {
		out, err := s.PauseDueList()
		return plural.Count(len(out.Entries), "caller heartbeat", "caller heartbeats") + " to pause.", out, err
	})
}

// read runs a reader tool, which takes no arguments, on the published
// snapshot of the calling bridge thread.
func (t tools) read(c caller, args json.RawMessage, fn func(*inbox.Snapshot) (string, any, error)) (string, any, error) {
	if err := noArgs(args); err != nil {
		return "", nil, err
	}
	s, err := t.snapshot(c)
	if err != nil {
		return "", nil, err
	}
	defer s.Close()
	text, out, err := fn(s)
	if err != nil {
		return "", nil, err
	}
	return text, out, nil
}

func (in armIn) args() api.ArmArgs {
	return api.ArmArgs{SourceThreadID: in.SourceThreadID, AttemptID: in.AttemptID, Generation: in.Generation,
		BridgeRequestID: in.BridgeRequestID, BridgeArmLeaseID: in.BridgeArmLeaseID}
}

func (in armIn) check(lease bool) error {
	switch {
	case in.SourceThreadID == "" || in.AttemptID == "" || in.Generation == 0 || in.BridgeRequestID == "":
		return errs.New(errs.EINVAL, "source_thread_id, attempt_id, generation and bridge_request_id are required")
	case lease && in.BridgeArmLeaseID == "":
		return errs.New(errs.EINVAL, "bridge_arm_lease_id is required: the lease desktop_note_arm_pending answered")
	case !lease && in.BridgeArmLeaseID != "":
		return errs.New(errs.EINVAL, "desktop_note_arm_pending takes no bridge_arm_lease_id")
	}
	return nil
}

func (t tools) noteArmPending(ctx context.Context, c caller, args json.RawMessage) (string, any, error) {
	var in armIn
	if _, err := decode(args, &in, nil); err != nil {
		return "", nil, err
	}
	if err := in.check(false); err != nil {
		return "", nil, err
	}
	rep, err := t.d.DesktopNoteArmPending(ctx, api.MCPArmArgs{Caller: c, ArmArgs: in.args()})
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("%s: arm the caller automation now, then call desktop_note_arm with bridge_arm_lease_id %s.", rep.Outcome, rep.BridgeArmLeaseID), rep, nil
}

func (t tools) noteArm(ctx context.Context, c caller, args json.RawMessage) (string, any, error) {
	var in armIn
	if _, err := decode(args, &in, nil); err != nil {
		return "", nil, err
	}
	if err := in.check(true); err != nil {
		return "", nil, err
	}
	rep, err := t.d.DesktopNoteArm(ctx, api.MCPArmArgs{Caller: c, ArmArgs: in.args()})
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("%s: generation %d armed; pause it from %s.", rep.Outcome, rep.ArmedGeneration, rep.PauseNotBefore.Format("15:04:05Z07:00")), rep, nil
}

func (t tools) notePaused(ctx context.Context, c caller, args json.RawMessage) (string, any, error) {
	var in pausedIn
	if _, err := decode(args, &in, nil); err != nil {
		return "", nil, err
	}
	if in.SourceThreadID == "" || in.Generation == 0 || in.BridgeRequestID == "" {
		return "", nil, errs.New(errs.EINVAL, "source_thread_id, generation and bridge_request_id are required")
	}
	rep, err := t.d.DesktopNotePaused(ctx, api.MCPPausedArgs{Caller: c, PausedArgs: api.PausedArgs{SourceThreadID: in.SourceThreadID,
		Generation: in.Generation, BridgeRequestID: in.BridgeRequestID}})
	if err != nil {
		return "", nil, err
	}
	return string(rep.Outcome) + ".", rep, nil
}

func (t tools) crossBoundary(ctx context.Context, c caller, args json.RawMessage) (string, any, error) {
	var in boundaryIn
	if _, err := decode(args, &in, nil); err != nil {
		return "", nil, err
	}
	if in.BatchID == "" || in.AttemptID == "" || in.Generation == 0 || in.ExpectedSnapshotRevision == 0 {
		return "", nil, errs.New(errs.EINVAL, "batch_id, attempt_id, generation and expected_snapshot_revision are required: the tokens of this heartbeat's prompt")
	}
	rep, err := t.d.DesktopNoteBoundaryCrossed(ctx, api.MCPBoundaryArgs{Caller: c, BoundaryArgs: api.BoundaryArgs{SourceThreadID: in.SourceThreadID,
		BatchID: in.BatchID, AttemptID: in.AttemptID, Generation: in.Generation, ExpectedSnapshotRevision: in.ExpectedSnapshotRevision,
		Fingerprints: t.cfg.Fingerprints}})
	if err != nil {
		return "", nil, err
	}
	return "crossed: compare the echoed tokens with your prompt's, then continue the conversation with these background job results:\n" + rep.Continuation.Summary, rep, nil
}

func (t tools) readArtifact(ctx context.Context, c caller, args json.RawMessage) (string, any, error) {
	var in readArtifactIn
	if _, err := decode(args, &in, nil); err != nil {
		return "", nil, err
	}
	if in.ArtifactID == "" || in.LeaseID == "" {
		return "", nil, errs.New(errs.EINVAL, "artifact_id and artifact_read_lease_id are required")
	}
	if in.MaxBytes == 0 {
		in.MaxBytes = api.MaxArtifactChunk
	}
	rep, err := t.d.DesktopReadArtifact(ctx, api.MCPReadArtifactArgs{Caller: c, ReadArtifactArgs: api.ReadArtifactArgs{ArtifactID: in.ArtifactID,
		LeaseID: in.LeaseID, Offset: in.Offset, MaxBytes: in.MaxBytes}})
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("%d bytes of artifact %s from offset %d (eof %t).", rep.Bytes, rep.ArtifactID, rep.Offset, rep.EOF), rep, nil
}

func (t tools) validate(ctx context.Context, c caller, args json.RawMessage) (string, any, error) {
	var in validateIn
	if _, err := decode(args, &in, nil); err != nil {
		return "", nil, err
	}
	if in.Token == "" {
		return "", nil, errs.New(errs.EINVAL, "token is required")
	}
	rep, err := t.d.DesktopValidate(ctx, api.MCPValidateArgs{Caller: c, Token: in.Token, Fingerprints: t.cfg.Fingerprints})
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("%s: this Desktop thread (%s) reaches cbth's tools; the mcp writeback transport is validated.", rep.Outcome, rep.ThreadID), rep, nil
}
