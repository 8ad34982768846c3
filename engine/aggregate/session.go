package aggregate

import (
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
)

// Session is a CLI managed session: one Codex thread delivered into
// through the shared app-server or the user's Codex daemon
// (spec/codex-cli.md, "Managed sessions").
type Session struct {
	Header[fsm.SessionState]
	BoundThreadID string                `json:"bound_thread_id"`
	Mode          string                `json:"mode"`
	Profile       events.SessionProfile `json:"session_profile"`
	Epoch         uint64                `json:"session_epoch"`
	// AppServerInstance is the nonce of the app-server instance whose event
	// stream the current epoch numbers.
	AppServerInstance string `json:"app_server_instance"`
	EpochReason       string `json:"epoch_reason,omitempty"`
	// Startup is the cap: explicit dimensions from the profile, "auto"
	// ones from their first trusted reading (unknown until then).
	Startup events.Permissions `json:"startup"`
	// Current is the last reading, valid for CurrentEpoch only: an epoch
	// change makes it unknown again until the thread is read anew.
	Current          events.Permissions `json:"current"`
	CurrentEpoch     uint64             `json:"current_epoch,omitempty"`
	StartupSnapshot  events.RawJSON     `json:"startup_permission_snapshot_json,omitempty"`
	LastSnapshot     events.RawJSON     `json:"last_permission_snapshot_json,omitempty"`
	SnapshotRevision uint64             `json:"permission_snapshot_revision"`
	DriftDirection   string             `json:"drift_direction,omitempty"`
	DriftDimensions  []string           `json:"drift_dimensions,omitempty"`
	Replaces         string             `json:"replaces,omitempty"`
	ThreadSource     string             `json:"thread_source,omitempty"`
	ParkedBatchID    string             `json:"parked_batch_id,omitempty"`
	DetachReason     string             `json:"detach_reason,omitempty"`
	StaleReason      string             `json:"stale_reason,omitempty"`
	RetiredReason    string             `json:"retired_reason,omitempty"`
}

func (s *Session) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.SessionCreated:
		s.BoundThreadID, s.Mode, s.Profile, s.Epoch = p.BoundThreadID, p.Mode, p.Profile, 1
		s.AppServerInstance, s.Startup, s.Replaces, s.ThreadSource = p.AppServerInstance, p.Startup, p.Replaces, p.ThreadSource
	case *events.SessionDetached:
		s.DetachReason = p.Reason
	case *events.SessionAttached:
		s.DetachReason, s.StaleReason = "", ""
	case *events.SessionEpochAdvanced:
		s.Epoch, s.EpochReason, s.AppServerInstance = p.Epoch, p.Reason, p.AppServerInstance
		// The current reading proved the permissions of the old stream
		// only; the startup cap stays.
		s.Current = events.Permissions{}
	case *events.SessionPermissionObserved:
		if len(p.Pinned) > 0 && s.StartupSnapshot == nil {
			s.StartupSnapshot = p.Snapshot
		}
		cur := p.Current.Values()
		for _, d := range p.Pinned {
			for i, name := range events.DimensionNames {
				if name == d {
					s.Startup = s.Startup.Set(name, cur[i])
				}
			}
		}
		s.Current, s.CurrentEpoch, s.LastSnapshot, s.SnapshotRevision = p.Current, p.Epoch, p.Snapshot, p.Revision
		if !Drifted(s.Startup, p.Current) {
			s.DriftDirection, s.DriftDimensions = "", nil
		}
	case *events.SessionPermissionDrifted:
		s.DriftDirection, s.DriftDimensions = p.Direction, p.Dimensions
	case *events.SessionParked:
		s.ParkedBatchID = p.BatchID
	case *events.SessionUnparked:
		s.ParkedBatchID = ""
	case *events.SessionStale:
		s.StaleReason = p.Reason
	case *events.SessionRetired:
		s.RetiredReason = p.Reason
	}
}

// Drifted reports whether a reading differs from the startup cap in a
// dimension where both are known.
func Drifted(startup, current events.Permissions) bool {
	st, cur := startup.Values(), current.Values()
	for i := range st {
		if st[i].Known() && cur[i].Known() && st[i] != cur[i] {
			return true
		}
	}
	return false
}

// Effective is the per-dimension tighter of the startup cap and the
// current reading, three-valued: what an automatic turn may be given.
func (s *Session) Effective() events.Permissions { return s.Startup.And(s.Current) }

// CurrentProven reports whether the current reading was taken on the
// current epoch.
func (s *Session) CurrentProven() bool { return s.CurrentEpoch == s.Epoch && s.SnapshotRevision > 0 }

// Indexes implements Indexer: the thread's one non-retired session.
func (s *Session) Indexes() []IndexEntry {
	if s.State == fsm.SessionRetired {
		return nil
	}
	return []IndexEntry{{index.SessionByThread, s.BoundThreadID}}
}
