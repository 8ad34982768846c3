package desktopmod

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	desktopcmd "github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/engine/command/mcp"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The Desktop heartbeats' writeback through the MCP tools (spec/desktop.md,
// "Writeback transports"). A heartbeat is a Codex thread: the bridge's is
// the bridge thread, a caller's is its bound source thread. Codex names
// the calling thread in each call, so here a call is bound to who made it,
// which the transcript relay cannot do: a line shown in a transcript can
// do nothing. Every refusal appends nothing, as every Desktop refusal.

func (m *Module) mcpDesktopOps(t api.Table) {
	api.Handle(t, api.MCPDesktopPreflight, func(ctx context.Context, a api.MCPDesktopArgs) (api.PreflightReply, error) {
		if err := m.checkMCPPreflight(a.Caller); err != nil {
			return api.PreflightReply{}, err
		}
		return m.preflight(ctx, api.PreflightArgs{BridgeThreadID: a.Caller.ThreadID, Fingerprints: a.Fingerprints})
	})
	api.Handle(t, api.MCPDesktopNoteArmPending, func(ctx context.Context, a api.MCPArmArgs) (api.ArmPendingReply, error) {
		if err := m.checkMCPBridge(a.Caller, a.SourceThreadID); err != nil {
			return api.ArmPendingReply{}, err
		}
		return m.noteArmPending(ctx, a.ArmArgs, recordAs(a.Caller, "desktop_note_arm_pending"))
	})
	api.Handle(t, api.MCPDesktopNoteArm, func(ctx context.Context, a api.MCPArmArgs) (api.ArmReply, error) {
		if err := m.checkMCPBridge(a.Caller, a.SourceThreadID); err != nil {
			return api.ArmReply{}, err
		}
		return m.noteArm(ctx, a.ArmArgs, recordAs(a.Caller, "desktop_note_arm"))
	})
	api.Handle(t, api.MCPDesktopNotePaused, func(ctx context.Context, a api.MCPPausedArgs) (api.PausedReply, error) {
		if err := m.checkMCPBridge(a.Caller, a.SourceThreadID); err != nil {
			return api.PausedReply{}, err
		}
		return m.notePaused(ctx, a.PausedArgs, recordAs(a.Caller, "desktop_note_paused"))
	})
	api.Handle(t, api.MCPDesktopNoteBoundaryCrossed, func(ctx context.Context, a api.MCPBoundaryArgs) (api.BoundaryReply, error) {
		if err := a.Caller.Check(); err != nil {
			return api.BoundaryReply{}, err
		}
		if a.SourceThreadID == "" {
			a.SourceThreadID = a.Caller.ThreadID
		}
		if a.SourceThreadID != a.Caller.ThreadID {
			return api.BoundaryReply{}, errs.New(errs.ThreadMismatch,
				"desktop_note_boundary_crossed crosses the calling thread's own boundary: the call comes from %s, not from %s", a.Caller.ThreadID, a.SourceThreadID)
		}
		return m.crossBoundary(ctx, a.BoundaryArgs, desktopcmd.WritebackMCP, recordAs(a.Caller, "desktop_note_boundary_crossed"))
	})
	api.Handle(t, api.MCPDesktopReadArtifact, func(ctx context.Context, a api.MCPReadArtifactArgs) (api.ReadArtifactReply, error) {
		if err := a.Caller.Check(); err != nil {
			return api.ReadArtifactReply{}, err
		}
		if err := m.checkArtifactThread(a.Caller, a.ArtifactID); err != nil {
			return api.ReadArtifactReply{}, err
		}
		return m.readArtifact(ctx, a.ReadArtifactArgs)
	})
	api.Handle(t, api.MCPDesktopValidate, m.validateMCP)
	api.Handle(t, api.DesktopMCPValidationRequest, m.requestMCPValidation)
}

// recordAs records a Desktop tool's call on the calling thread's mcp
// stream, in the append of the command it ran.
func recordAs(c api.MCPCaller, tool string) func(engine.Decider) engine.Decider {
	return func(inner engine.Decider) engine.Decider {
		return mcp.RecordMCPCall{ThreadID: c.ThreadID, Call: c.Record(tool), Inner: inner}
	}
}

// checkMCPPreflight lets a preflight through MCP select the bridge
// thread only while none is selected; once one is, only that thread's
// preflight counts. A preflight selects the bridge, so any thread that
// could call it would otherwise take the bridge over, and the real bridge
// would be answered ESTALE: moving the bridge is the operator's step
// (`cbth desktop bridge-preflight --bridge-thread-id`), from outside any
// thread's sandbox.
func (m *Module) checkMCPPreflight(c api.MCPCaller) error {
	if err := c.Check(); err != nil {
		return err
	}
	var bridge string
	if err := m.h.Eng.Read(func(s engine.Snapshot) error {
		inst, err := command.Installation(s)
		if inst != nil {
			bridge = inst.BridgeThreadID
		}
		return err
	}); err != nil {
		return err
	}
	if bridge != "" && bridge != c.ThreadID {
		return errs.New(errs.ThreadMismatch, "the bridge thread is %s; this call comes from %s, and a preflight through MCP never moves the bridge. "+
			"To make this thread the bridge, the operator runs: cbth desktop bridge-preflight --bridge-thread-id %s", bridge, c.ThreadID, c.ThreadID)
	}
	return nil
}

// checkMCPBridge lets a bridge operation on thread's head through only
// from the bridge thread the snapshots are published for, which the
// thread's binding serves, and only while the mcp writeback transport is
// validated.
func (m *Module) checkMCPBridge(c api.MCPCaller, thread string) error {
	if err := c.Check(); err != nil {
		return err
	}
	var bd *aggregate.Binding
	var inst *aggregate.Installation
	err := m.h.Eng.Read(func(s engine.Snapshot) (err error) {
		if bd, err = command.BindingOf(s, thread); err != nil {
			return err
		}
		inst, err = command.Installation(s)
		return err
	})
	switch {
	case err != nil:
		return err
	case inst == nil || inst.BridgeThreadID == "":
		return errs.New(errs.ThreadMismatch, "no bridge thread has run bridge-preflight yet: the bridge's wake starts with desktop_bridge_preflight")
	case inst.BridgeThreadID != c.ThreadID:
		return errs.New(errs.ThreadMismatch, "the snapshots are published for bridge thread %s; this call comes from %s", inst.BridgeThreadID, c.ThreadID)
	case bd != nil && !bd.ServesBridge(c.ThreadID):
		return errs.New(errs.ThreadMismatch, "thread %s's binding is pinned to bridge thread %s; this call comes from %s", thread, bd.BridgeThreadID, c.ThreadID)
	case !inst.MCPWritebackValidated():
		return errs.New(errs.BindingOrCapabilityInvalid, "the mcp writeback transport is not validated for this cbth (cbth desktop validate-mcp)")
	}
	return nil
}

// checkArtifactThread lets a thread read only the artifacts of its own
// jobs.
func (m *Module) checkArtifactThread(c api.MCPCaller, id string) error {
	var thread string
	err := m.h.Eng.Read(func(s engine.Snapshot) error {
		art, err := engine.Artifact(s, id)
		if err != nil || art == nil {
			return err
		}
		j, err := engine.Job(s, art.SourceJobID)
		if j != nil {
			thread = j.SourceThreadID
		}
		return err
	})
	switch {
	case err != nil:
		return err
	case thread == "":
		return errs.New(errs.ENOENT, "no artifact %s", id)
	case thread != c.ThreadID:
		return errs.New(errs.ThreadMismatch, "artifact %s belongs to a job of thread %s, not of the calling thread", id, thread)
	}
	return nil
}

// mcpValidationTTL bounds a live validation when the request gives none.
const mcpValidationTTL = 30 * time.Minute

// requestMCPValidation opens a live validation: a fresh token and the
// prompt that carries it.
func (m *Module) requestMCPValidation(ctx context.Context, a api.MCPValidationRequestArgs) (api.MCPValidationRequestReply, error) {
	ttl := time.Duration(a.TTLMS) * time.Millisecond
	if ttl == 0 {
		ttl = mcpValidationTTL
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return api.MCPValidationRequestReply{}, errs.Wrap(errs.EINTERNAL, err, "validation token")
	}
	token := "mcpv-" + hex.EncodeToString(b)
	req, _, err := engine.Exec[events.InstallationMCPValidationRequested](ctx, m.h.Eng, engine.Meta{Actor: events.ActorOperator, CorrelationID: "validate-mcp"}, desktopcmd.RequestMCPValidation{Token: token, TTL: ttl})
	if err != nil {
		return api.MCPValidationRequestReply{}, err
	}
	return api.MCPValidationRequestReply{Token: token, ExpiresAt: req.ExpiresAt, Prompt: ValidationPrompt(token)}, nil
}

// ValidationPrompt is what the user pastes into a Codex Desktop thread to
// prove that Desktop threads reach cbth's MCP tools.
func ValidationPrompt(token string) string {
	return fmt.Sprintf("Call the tool desktop_validate_mcp of the cbth MCP server (namespace mcp__cbth) with the arguments {\"token\": %q}, then reply with its answer word for word. Do nothing else.", token)
}

func (m *Module) validateMCP(ctx context.Context, a api.MCPValidateArgs) (api.MCPValidateReply, error) {
	if err := a.Caller.Check(); err != nil {
		return api.MCPValidateReply{}, err
	}
	var transport string
	if err := m.h.Eng.Read(func(s engine.Snapshot) error {
		inst, err := command.Installation(s)
		if inst != nil {
			transport = inst.ReadTransport
		}
		return err
	}); err != nil {
		return api.MCPValidateReply{}, err
	}
	fps := a.Fingerprints
	if fps == nil {
		fps = m.fps
	}
	val, res, err := engine.Exec[events.InstallationMCPWritebackValidated](ctx, m.h.Eng, engine.Meta{Actor: events.ActorAgent, CorrelationID: "validate-mcp"},
		desktopcmd.ValidateMCPWriteback{Token: a.Token, ThreadID: a.Caller.ThreadID, SandboxMode: a.Caller.SandboxMode, Fingerprint: fps[transport]})
	if err != nil {
		return api.MCPValidateReply{}, err
	}
	m.h.Poke(ctx)
	p := val
	return api.MCPValidateReply{Outcome: res.Outcome, ThreadID: p.ThreadID, SandboxMode: p.SandboxMode, Fingerprint: p.Fingerprint}, nil
}
