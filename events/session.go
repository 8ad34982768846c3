package events

import "fmt"

// KindSession is the stream of one CLI managed session.
const KindSession Kind = "session"

// sessionEvents declares the session events (see declarations).
func sessionEvents() []declaration {
	return []declaration{
		decl[SessionCreated](KindSession),
		decl[SessionDetached](KindSession),
		decl[SessionAttached](KindSession),
		decl[SessionEpochAdvanced](KindSession),
		decl[SessionPermissionObserved](KindSession),
		decl[SessionPermissionDrifted](KindSession),
		decl[SessionParked](KindSession),
		decl[SessionUnparked](KindSession),
		decl[SessionStale](KindSession),
		decl[SessionRetired](KindSession),
	}
}

// Allow is one permission dimension of a managed session: allowed,
// denied, or unknown (the zero value). It is JSON true, false or null.
// Unknown counts as allowed wherever a permission gates delivery: a
// session is strict-safe only where every dimension is proven false.
type Allow uint8

// The values of Allow.
const (
	AllowUnknown Allow = iota
	AllowFalse
	AllowTrue
)

// AllowOf is the Allow of a known boolean.
func AllowOf(b bool) Allow {
	if b {
		return AllowTrue
	}
	return AllowFalse
}

// Known reports whether a is true or false.
func (a Allow) Known() bool { return a == AllowTrue || a == AllowFalse }

// And is Kleene's three-valued and: false if either is false, true if
// both are true, unknown otherwise. The effective permission of a session
// is its startup cap and its current snapshot, so a tighter side wins.
func (a Allow) And(b Allow) Allow {
	switch {
	case a == AllowFalse || b == AllowFalse:
		return AllowFalse
	case a == AllowTrue && b == AllowTrue:
		return AllowTrue
	}
	return AllowUnknown
}

func (a Allow) String() string {
	switch a {
	case AllowTrue:
		return "true"
	case AllowFalse:
		return "false"
	}
	return "unknown"
}

// MarshalJSON renders true, false or null.
func (a Allow) MarshalJSON() ([]byte, error) {
	switch a {
	case AllowTrue:
		return []byte("true"), nil
	case AllowFalse:
		return []byte("false"), nil
	}
	return []byte("null"), nil
}

// UnmarshalJSON reads true, false or null.
func (a *Allow) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true":
		*a = AllowTrue
	case "false":
		*a = AllowFalse
	case "null":
		*a = AllowUnknown
	default:
		return fmt.Errorf("permission %s is not true, false or null", b)
	}
	return nil
}

// Permissions is one reading of a managed session's risk profile: whether
// a turn may ask for approval, reach the network, write files.
type Permissions struct {
	AllowsApproval    Allow `json:"allows_approval"`
	AllowsNetwork     Allow `json:"allows_network"`
	AllowsWriteAccess Allow `json:"allows_write_access"`
}

// And is the per-dimension three-valued and.
func (p Permissions) And(q Permissions) Permissions {
	return Permissions{p.AllowsApproval.And(q.AllowsApproval), p.AllowsNetwork.And(q.AllowsNetwork), p.AllowsWriteAccess.And(q.AllowsWriteAccess)}
}

// DimensionNames are the seed's names of the three dimensions, in the
// order of Values.
var DimensionNames = [3]string{"approval", "network", "write_access"}

// Values lists the three dimensions in DimensionNames order.
func (p Permissions) Values() [3]Allow {
	return [3]Allow{p.AllowsApproval, p.AllowsNetwork, p.AllowsWriteAccess}
}

// Set returns p with the dimension named name set to v.
func (p Permissions) Set(name string, v Allow) Permissions {
	switch name {
	case "approval":
		p.AllowsApproval = v
	case "network":
		p.AllowsNetwork = v
	case "write_access":
		p.AllowsWriteAccess = v
	}
	return p
}

// SessionProfile is the bootstrap profile `cbth cli run` was given, per
// dimension "auto" (from the thread's own settings), "true" or "false".
type SessionProfile struct {
	Approval    string `json:"approval"`
	Network     string `json:"network"`
	WriteAccess string `json:"write_access"`
}

// SessionCreated opens a managed CLI session at epoch 1, bound to one
// Codex thread and to the app-server instance whose event stream epoch 1
// is: live (a `cbth cli run` foreground attached), or detached for mode
// codex_daemon (bound through the user's Codex daemon, no foreground). Startup holds the explicit dimensions of Profile
// (the others unknown until the first trusted snapshot pins them).
type SessionCreated struct {
	BoundThreadID     string         `json:"bound_thread_id"`
	Mode              string         `json:"mode"` // bind_thread, new_thread or codex_daemon
	Profile           SessionProfile `json:"session_profile"`
	Startup           Permissions    `json:"startup"`
	AppServerInstance string         `json:"app_server_instance"`
	// Replaces names the retired session this one replaces, if any.
	Replaces string `json:"replaces,omitempty"`
	// ThreadSource is where Codex says the thread came from ("cli",
	// "exec", "vscode", ...), as read when a session is bound through
	// the Codex daemon: a thread `codex exec` started never takes a
	// queued hand-off.
	ThreadSource string `json:"thread_source,omitempty"`
}

const TypeSessionCreated = "session.created"

func (SessionCreated) EventType() string { return TypeSessionCreated }

// SessionDetached records the foreground client leaving.
type SessionDetached struct {
	Reason string `json:"reason"`
}

const TypeSessionDetached = "session.detached"

func (SessionDetached) EventType() string { return TypeSessionDetached }

// SessionAttached records a foreground client reattaching.
type SessionAttached struct{}

const TypeSessionAttached = "session.attached"

func (SessionAttached) EventType() string { return TypeSessionAttached }

// SessionEpochAdvanced records lost event-stream continuity: the session's
// epoch now numbers the stream of another app-server instance.
type SessionEpochAdvanced struct {
	Epoch             uint64 `json:"session_epoch"`
	Reason            string `json:"reason"`
	AppServerInstance string `json:"app_server_instance"`
}

const TypeSessionEpochAdvanced = "session.epoch_advanced"

func (SessionEpochAdvanced) EventType() string { return TypeSessionEpochAdvanced }

// SessionPermissionObserved records a permission snapshot read from the
// thread (thread/resume) on the session's current epoch. Pinned lists the
// dimensions this snapshot set the startup cap of: the first trusted
// reading of each "auto" dimension.
type SessionPermissionObserved struct {
	Current  Permissions `json:"current"`
	Snapshot RawJSON     `json:"last_permission_snapshot_json"`
	Revision uint64      `json:"permission_snapshot_revision"`
	Epoch    uint64      `json:"session_epoch"`
	Pinned   []string    `json:"pinned,omitempty"`
}

const TypeSessionPermissionObserved = "session.permission_observed"

func (SessionPermissionObserved) EventType() string { return TypeSessionPermissionObserved }

// SessionPermissionDrifted is the audit record of a snapshot whose
// permissions differ from the startup cap: "tightened" (current is
// stricter), "widened" (current is looser; the cap still holds) or
// "mixed", per the changed dimensions.
type SessionPermissionDrifted struct {
	Startup    Permissions `json:"startup"`
	Current    Permissions `json:"current"`
	Effective  Permissions `json:"effective"`
	Direction  string      `json:"direction"`
	Dimensions []string    `json:"dimensions"`
	Revision   uint64      `json:"permission_snapshot_revision"`
}

const TypeSessionPermissionDrifted = "session.permission_drifted"

func (SessionPermissionDrifted) EventType() string { return TypeSessionPermissionDrifted }

// SessionParked parks a session while a manual batch is unresolved.
type SessionParked struct {
	BatchID string `json:"batch_id"`
}

const TypeSessionParked = "session.parked"

func (SessionParked) EventType() string { return TypeSessionParked }

// SessionUnparked returns a parked session to detached once resolved.
type SessionUnparked struct{}

const TypeSessionUnparked = "session.unparked"

func (SessionUnparked) EventType() string { return TypeSessionUnparked }

// SessionStale records that the session can no longer be proven live.
type SessionStale struct {
	Reason string `json:"reason"`
}

const TypeSessionStale = "session.stale"

func (SessionStale) EventType() string { return TypeSessionStale }

// SessionRetired ends a managed session for good.
type SessionRetired struct {
	Reason string `json:"reason"`
}

const TypeSessionRetired = "session.retired"

func (SessionRetired) EventType() string { return TypeSessionRetired }
