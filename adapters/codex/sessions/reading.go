package sessions

import (
	"encoding/json"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/events"
)

// Snapshot is the permission part of a thread/resume answer, kept as
// Codex sent it: the record behind a session's
// startup_permission_snapshot_json and last_permission_snapshot_json.
type Snapshot struct {
	ApprovalPolicy          json.RawMessage `json:"approvalPolicy"`
	ApprovalsReviewer       string          `json:"approvalsReviewer"`
	Sandbox                 json.RawMessage `json:"sandbox"`
	ActivePermissionProfile json.RawMessage `json:"activePermissionProfile"`
}

// ReadingOf turns a thread/resume answer into a permission reading, as
// Codex 0.169 reports permissions (spec/codex-cli.md, "Permission
// snapshots"): approval from approvalPolicy, network and write access
// from the legacy sandbox policy. A dimension whose field is missing or of
// a shape this version does not know is unknown, which gates delivery as
// "allowed" would: it fails closed.
func ReadingOf(ts appserver.ThreadSession) codex.Reading {
	snap := Snapshot{ApprovalPolicy: orNull(ts.ApprovalPolicy), ApprovalsReviewer: ts.ApprovalsReviewer,
		Sandbox: orNull(ts.Sandbox), ActivePermissionProfile: json.RawMessage("null")}
	if p := ts.ActivePermissionProfile; p != nil {
		snap.ActivePermissionProfile, _ = json.Marshal(p)
	}
	raw, _ := json.Marshal(snap)
	network, write := sandboxAllows(ts.Sandbox)
	return codex.Reading{
		Current:  events.Permissions{AllowsApproval: approvalAllows(ts.ApprovalPolicy), AllowsNetwork: network, AllowsWriteAccess: write},
		Snapshot: events.RawJSON(raw),
	}
}

func orNull(r json.RawMessage) json.RawMessage {
	if len(r) == 0 {
		return json.RawMessage("null")
	}
	return r
}

// approvalAllows reads approvalPolicy: "never" asks nobody; "on-request"
// and "untrusted" may ask; a granular policy asks when any of its kinds of
// request is on.
func approvalAllows(raw json.RawMessage) events.Allow {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case appserver.ApprovalNever:
			return events.AllowFalse
		case appserver.ApprovalOnRequest, appserver.ApprovalUntrusted:
			return events.AllowTrue
		}
		return events.AllowUnknown
	}
	var g struct {
		Granular *map[string]json.RawMessage `json:"granular"`
	}
	if json.Unmarshal(raw, &g) != nil || g.Granular == nil {
		return events.AllowUnknown
	}
	for _, need := range []string{"sandbox_approval", "rules", "mcp_elicitations"} {
		if _, ok := (*g.Granular)[need]; !ok {
			return events.AllowUnknown
		}
	}
	allows := events.AllowFalse
	for _, v := range *g.Granular {
		var b bool
		if json.Unmarshal(v, &b) != nil {
			return events.AllowUnknown
		}
		if b {
			allows = events.AllowTrue
		}
	}
	return allows
}

// sandboxAllows reads the legacy sandbox policy: readOnly writes nothing,
// workspaceWrite and dangerFullAccess write, each says whether it reaches
// the network. An external sandbox is outside Codex's knowledge: what it
// lets a command write is unknown.
func sandboxAllows(raw json.RawMessage) (network, write events.Allow) {
	var p struct {
		Type          string          `json:"type"`
		NetworkAccess json.RawMessage `json:"networkAccess"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return events.AllowUnknown, events.AllowUnknown
	}
	boolNet := func() events.Allow {
		if len(p.NetworkAccess) == 0 {
			return events.AllowFalse // the schema's default
		}
		var b bool
		if json.Unmarshal(p.NetworkAccess, &b) != nil {
			return events.AllowUnknown
		}
		return events.AllowOf(b)
	}
	switch p.Type {
	case "dangerFullAccess":
		return events.AllowTrue, events.AllowTrue
	case "readOnly":
		return boolNet(), events.AllowFalse
	case "workspaceWrite":
		return boolNet(), events.AllowTrue
	case "externalSandbox":
		var s string
		if len(p.NetworkAccess) == 0 {
			s = "restricted" // the schema's default
		} else if json.Unmarshal(p.NetworkAccess, &s) != nil {
			return events.AllowUnknown, events.AllowUnknown
		}
		switch s {
		case "restricted":
			return events.AllowFalse, events.AllowUnknown
		case "enabled":
			return events.AllowTrue, events.AllowUnknown
		}
	}
	return events.AllowUnknown, events.AllowUnknown
}
