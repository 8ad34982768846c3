package desktopmod_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/daemontest"
)

func caller(thread string) api.MCPCaller {
	return api.MCPCaller{ThreadID: thread, TurnID: "turn-1", SandboxMode: "read-only"}
}

// eventsSince are the log's events after seq.
func (r rig) eventsSince(seq uint64) []events.Envelope {
	r.T.Helper()
	return daemontest.Call(r.Daemon, api.EventsRead, api.ReadArgs{From: seq + 1}).Events
}

// The Desktop MCP tools are bound to the thread that calls them: a bridge
// operation only from the bridge thread the snapshots are published for,
// and only once the mcp writeback transport is validated; a crossing
// only of the calling thread's own boundary; an artifact only of the
// calling thread's own jobs. Every refusal appends nothing; an accepted
// call is recorded on the calling thread's mcp stream in the same
// append as what it did.
func TestMCPToolsAreBoundToTheCallingThread(t *testing.T) {
	r := start(t)
	r.validate()
	r.bind("S")
	armPending := func(c api.MCPCaller, e api.ArmArgs) func() error {
		return func() error {
			_, err := api.MCPDesktopNoteArmPending.Call(r.Client, api.MCPArmArgs{Caller: c, ArmArgs: e})
			return err
		}
	}
	r.refused("a bridge call before any preflight", errs.ThreadMismatch, "no bridge thread", armPending(caller(bridge), api.ArmArgs{SourceThreadID: "S"}))
	if p := daemontest.Call(r.Daemon, api.MCPDesktopPreflight, api.MCPDesktopArgs{Caller: caller(bridge)}); p.BridgeThreadID != bridge || p.Source != "daemon" {
		t.Fatalf("the bridge's preflight: %+v", p)
	}
	r.job("S")
	e := r.ready()
	if e == nil {
		t.Fatal("nothing ready")
	}
	tok := armArgs(e, "wake-1", "")
	r.refused("a call naming no thread", errs.ThreadUnidentified, "", armPending(api.MCPCaller{}, tok))
	r.refused("a bridge call from another thread", errs.ThreadMismatch, "published for bridge thread", armPending(caller("X"), tok))
	r.refused("a bridge call before the mcp transport is validated", errs.BindingOrCapabilityInvalid, "validate-mcp", armPending(caller(bridge), tok))

	// The live validation: a token, answered from a Desktop thread.
	req := daemontest.Call(r.Daemon, api.DesktopMCPValidationRequest, api.MCPValidationRequestArgs{})
	if req.Token == "" || req.Prompt == "" || !req.ExpiresAt.After(r.Clock.Now()) {
		t.Fatalf("validation request: %+v", req)
	}
	r.refused("a validation with another token", errs.ESTALE, "not the one", func() error {
		_, err := api.MCPDesktopValidate.Call(r.Client, api.MCPValidateArgs{Caller: caller("V"), Token: req.Token + "x"})
		return err
	})
	if v := daemontest.Call(r.Daemon, api.MCPDesktopValidate, api.MCPValidateArgs{Caller: caller("V"), Token: req.Token}); v.Outcome != "validated" || v.ThreadID != "V" {
		t.Fatalf("validation: %+v", v)
	}

	before := r.head()
	p := daemontest.Call(r.Daemon, api.MCPDesktopNoteArmPending, api.MCPArmArgs{Caller: caller(bridge), ArmArgs: tok})
	if p.Outcome != "arm_pending" {
		t.Fatalf("arm-pending from the bridge: %+v", p)
	}
	var recorded, armed bool
	for _, ev := range r.eventsSince(before) {
		recorded = recorded || ev.Type == events.TypeMCPToolCalled && ev.Stream.ID == bridge
		armed = armed || ev.Type == events.TypeAttemptArmPendingNoted
	}
	if !recorded || !armed || r.head() != before+2 {
		t.Fatalf("the call's append: %d events, the call recorded %v, arm-pending noted %v", r.head()-before, recorded, armed)
	}
	daemontest.Call(r.Daemon, api.MCPDesktopNoteArm, api.MCPArmArgs{Caller: caller(bridge), ArmArgs: armArgs(e, "wake-1", p.BridgeArmLeaseID)})

	cross := crossArgs(e)
	r.refused("a crossing of another thread's boundary", errs.ThreadMismatch, "calling thread's own boundary", func() error {
		_, err := api.MCPDesktopNoteBoundaryCrossed.Call(r.Client, api.MCPBoundaryArgs{Caller: caller("X"), BoundaryArgs: cross})
		return err
	})
	// The source thread may be left out: it is the calling thread.
	cross.SourceThreadID = ""
	x := daemontest.Call(r.Daemon, api.MCPDesktopNoteBoundaryCrossed, api.MCPBoundaryArgs{Caller: caller("S"), BoundaryArgs: cross})
	if x.Outcome != "crossed" || x.SourceThreadID != "S" {
		t.Fatalf("the crossing from the source thread: %+v", x)
	}

	// Artifacts: only of the calling thread's jobs.
	result := filepath.Join(t.TempDir(), "result.txt")
	os.WriteFile(result, []byte("the log of the run"), 0o600)
	j := daemontest.Call(r.Daemon, api.JobSubmit, api.SubmitArgs{TargetKind: command.TargetDesktop, SourceThreadID: "S", TaskKind: "ci", TaskSummary: "x"})
	daemontest.Call(r.Daemon, api.JobComplete, api.CompleteArgs{JobID: j.JobID, ResultSummary: "done", ResultFile: result})
	art := daemontest.Call(r.Daemon, api.JobQuery, api.JobArgs{JobID: j.JobID}).ArtifactID
	if art == "" {
		t.Fatal("the job has no artifact")
	}
	read := func(thread, id string) func() error {
		return func() error {
			_, err := api.MCPDesktopReadArtifact.Call(r.Client, api.MCPReadArtifactArgs{Caller: caller(thread), ReadArtifactArgs: api.ReadArtifactArgs{ArtifactID: id}})
			return err
		}
	}
	r.refused("another thread's artifact", errs.ThreadMismatch, "not of the calling thread", read("X", art))
	r.refused("no such artifact", errs.ENOENT, "no artifact", read("S", "01a00000-0000-7000-8000-000000000000"))
	// The owner passes the thread check; without a read lease it is
	// refused by the lease rule instead.
	if err := read("S", art)(); err == nil || errs.CodeOf(err) == errs.ThreadMismatch || errs.CodeOf(err) == errs.ENOENT {
		t.Fatalf("the owner's read without a lease: %v", err)
	}
}
