package query

import (
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// SessionView is a CLI managed session as `cbth cli session` prints it,
// under the seed's field names. session_allows_* are the effective
// permissions (startup cap and current reading, the tighter per
// dimension, three-valued: null is unknown); current_permissions is the
// last reading, null per dimension once the epoch moved on.
type SessionView struct {
	ManagedSessionID              string                `json:"managed_session_id"`
	BoundThreadID                 string                `json:"bound_thread_id"`
	SessionEpoch                  uint64                `json:"session_epoch"`
	SessionState                  fsm.SessionState      `json:"session_state"`
	Mode                          string                `json:"mode"`
	SessionProfile                events.SessionProfile `json:"session_profile"`
	SessionAllowsApproval         events.Allow          `json:"session_allows_approval"`
	SessionAllowsNetwork          events.Allow          `json:"session_allows_network"`
	SessionAllowsWriteAccess      events.Allow          `json:"session_allows_write_access"`
	StartupSessionAllowsApproval  events.Allow          `json:"startup_session_allows_approval"`
	StartupSessionAllowsNetwork   events.Allow          `json:"startup_session_allows_network"`
	StartupSessionAllowsWrite     events.Allow          `json:"startup_session_allows_write_access"`
	CurrentPermissions            events.Permissions    `json:"current_permissions"`
	PermissionsProven             bool                  `json:"permissions_proven"`
	StartupPermissionSnapshotJSON events.RawJSON        `json:"startup_permission_snapshot_json"`
	LastPermissionSnapshotJSON    events.RawJSON        `json:"last_permission_snapshot_json"`
	PermissionSnapshotRevision    uint64                `json:"permission_snapshot_revision"`
	PermissionDrift               *DriftView            `json:"permission_drift"`
	AppServerInstance             string                `json:"app_server_instance"`
	EpochReason                   string                `json:"epoch_reason"`
	Replaces                      string                `json:"replaces"`
	ParkedBatchID                 string                `json:"parked_batch_id"`
	DetachReason                  string                `json:"detach_reason"`
	StaleReason                   string                `json:"stale_reason"`
	RetiredReason                 string                `json:"retired_reason"`
	CreatedAt                     time.Time             `json:"created_at"`
	UpdatedAt                     time.Time             `json:"updated_at"`
	Version                       uint64                `json:"version"`
}

// DriftView is a session's standing drift from its startup cap.
type DriftView struct {
	Direction  string   `json:"direction"`
	Dimensions []string `json:"dimensions"`
}

// NewSessionView renders a session.
func NewSessionView(s *aggregate.Session) SessionView {
	eff := s.Effective()
	v := SessionView{
		ManagedSessionID: s.ID, BoundThreadID: s.BoundThreadID, SessionEpoch: s.Epoch, SessionState: s.State, Mode: s.Mode,
		SessionProfile: s.Profile, SessionAllowsApproval: eff.AllowsApproval, SessionAllowsNetwork: eff.AllowsNetwork,
		SessionAllowsWriteAccess: eff.AllowsWriteAccess, StartupSessionAllowsApproval: s.Startup.AllowsApproval,
		StartupSessionAllowsNetwork: s.Startup.AllowsNetwork, StartupSessionAllowsWrite: s.Startup.AllowsWriteAccess,
		CurrentPermissions: s.Current, PermissionsProven: s.CurrentProven(),
		StartupPermissionSnapshotJSON: s.StartupSnapshot, LastPermissionSnapshotJSON: s.LastSnapshot,
		PermissionSnapshotRevision: s.SnapshotRevision, AppServerInstance: s.AppServerInstance, EpochReason: s.EpochReason,
		Replaces: s.Replaces, ParkedBatchID: s.ParkedBatchID, DetachReason: s.DetachReason, StaleReason: s.StaleReason,
		RetiredReason: s.RetiredReason, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, Version: s.Version,
	}
	if s.DriftDirection != "" {
		v.PermissionDrift = &DriftView{Direction: s.DriftDirection, Dimensions: s.DriftDimensions}
	}
	return v
}

// AppServerView is one instance of the shared app-server.
type AppServerView struct {
	Nonce        string             `json:"nonce"`
	PID          int                `json:"pid"`
	State        fsm.AppServerState `json:"state"`
	StartedAt    time.Time          `json:"started_at"`
	Socket       string             `json:"socket"`
	CodexBinary  string             `json:"codex_binary"`
	CodexHome    string             `json:"codex_home"`
	UserAgent    string             `json:"user_agent"`
	ProbePassed  bool               `json:"probe_passed"`
	ProbeCode    string             `json:"probe_code"`
	ProbeMissing []string           `json:"probe_missing"`
	ExitReason   string             `json:"exit_reason"`
	ExitStatus   string             `json:"exit_status"`
}

// NewAppServerView renders an instance.
func NewAppServerView(a *aggregate.AppServer) AppServerView {
	missing := a.ProbeMissing
	if missing == nil {
		missing = []string{}
	}
	return AppServerView{Nonce: a.ID, PID: a.PID, State: a.State, StartedAt: a.StartedAt, Socket: a.Socket, CodexBinary: a.CodexBinary,
		CodexHome: a.CodexHome, UserAgent: a.UserAgent, ProbePassed: a.ProbePassed, ProbeCode: a.ProbeCode, ProbeMissing: missing,
		ExitReason: a.ExitReason, ExitStatus: a.ExitStatus}
}

// SessionInspection is `cbth cli session inspect`: the session and the
// app-server instance whose stream its epoch numbers.
type SessionInspection struct {
	Session   SessionView    `json:"session"`
	AppServer *AppServerView `json:"app_server"`
}

// InspectSession returns a session by id, or a thread's non-retired one.
func InspectSession(s engine.Reader, id, thread string) (SessionInspection, error) {
	switch {
	case id == "" && thread == "":
		return SessionInspection{}, errs.New(errs.EINVAL, "name a managed session id or a thread id")
	case id == "":
		refs := s.Lookup(index.SessionByThread, thread)
		if len(refs) == 0 {
			return SessionInspection{}, errs.New(errs.ENOENT, "thread %s has no managed session", thread)
		}
		id = refs[0].ID
	}
	ses, err := engine.Session(s, id)
	if err != nil {
		return SessionInspection{}, err
	}
	if ses == nil {
		return SessionInspection{}, errs.New(errs.ENOENT, "no managed session %s", id)
	}
	in := SessionInspection{Session: NewSessionView(ses)}
	if ses.AppServerInstance != "" {
		a, err := engine.AppServer(s, ses.AppServerInstance)
		if err != nil {
			return SessionInspection{}, err
		}
		if a != nil {
			v := NewAppServerView(a)
			in.AppServer = &v
		}
	}
	return in, nil
}

// SessionFilter selects sessions for Sessions: After is the id of the
// last session of the page before ("" for the first), Limit bounds a
// page (0: MaxPage).
type SessionFilter struct {
	ThreadID string
	State    fsm.SessionState // "" for every one
	After    string
	Limit    int
}

// SessionPage is one page of sessions; Next, when set, is the cursor of
// the following page.
type SessionPage struct {
	Sessions []SessionView `json:"sessions"`
	Next     string        `json:"next,omitempty"`
}

// Sessions lists managed sessions in the order they were created, one
// page (see PageBytes) at a time: retired sessions stay, so there may be
// thousands.
func Sessions(s engine.Snapshot, f SessionFilter) (SessionPage, error) {
	list, err := listAfter(s, events.KindSession, "managed session", f.After,
		func(ses *aggregate.Session) uint64 { return ses.FirstSeq },
		func(ses *aggregate.Session) bool {
			return (f.ThreadID == "" || ses.BoundThreadID == f.ThreadID) && (f.State == "" || ses.State == f.State)
		})
	var page SessionPage
	page.Sessions, page.Next = pageOf(list, f.Limit, NewSessionView, func(ses *aggregate.Session) string { return ses.ID })
	return page, err
}
