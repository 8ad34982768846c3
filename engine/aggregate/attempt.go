package aggregate

import (
	"time"

	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
)

// Attempt is one try at delivering a batch.
type Attempt struct {
	Header[fsm.AttemptState]
	SourceThreadID         string    `json:"source_thread_id"`
	BatchID                string    `json:"batch_id"`
	Generation             uint64    `json:"generation"`
	SnapshotPath           string    `json:"snapshot_path,omitempty"`
	SnapshotRevision       uint64    `json:"snapshot_revision"`
	DeliveryDeadline       time.Time `json:"delivery_deadline,omitzero"`
	BindingID              string    `json:"binding_id,omitempty"`
	BridgeRequestID        string    `json:"bridge_request_id,omitempty"`
	BridgeArmLeaseID       string    `json:"bridge_arm_lease_id,omitempty"`
	BridgeArmLeaseDeadline time.Time `json:"bridge_arm_lease_deadline,omitzero"`
	ArmPendingSince        time.Time `json:"arm_pending_since,omitzero"`
	ArmPendingDeadline     time.Time `json:"arm_pending_deadline,omitzero"`
	PauseNotBefore         time.Time `json:"pause_not_before,omitzero"`
	PauseDeadline          time.Time `json:"pause_deadline,omitzero"`
	AutomationID           string    `json:"automation_id,omitempty"`
	AutomationBindingState string    `json:"automation_binding_state"`
	RPCRequestID           string    `json:"delivery_rpc_request_id,omitempty"`
	RPCKind                string    `json:"delivery_rpc_kind,omitempty"`
	RPCStartedAt           time.Time `json:"delivery_rpc_started_at,omitzero"`
	RPCState               string    `json:"delivery_rpc_state,omitempty"`
	RPCCorrelationMarker   string    `json:"delivery_rpc_correlation_marker,omitempty"`
	RejectedRequestIDs     []string  `json:"rejected_rpc_request_ids,omitempty"`
	TurnID                 string    `json:"delivery_turn_id,omitempty"`
	ManagedSessionID       string    `json:"managed_session_id,omitempty"`
	SessionEpoch           uint64    `json:"session_epoch,omitempty"`
	AcceptedAt             time.Time `json:"delivery_accepted_at,omitzero"`
	ObservationState       string    `json:"delivery_observation_state,omitempty"`
	ObservationDeadline    time.Time `json:"delivery_observation_deadline,omitzero"`
	LastObservedTurnEvent  string    `json:"last_observed_turn_event,omitempty"`
	LastObservedTurnAt     time.Time `json:"last_observed_turn_event_at,omitzero"`
	CooldownUntil          time.Time `json:"cooldown_until,omitzero"`
	EndReason              string    `json:"end_reason,omitempty"`
	SupersededBy           string    `json:"superseded_by,omitempty"`
	// RelayMarkers are the transcript-relay markers issued for the
	// attempt, with their consumption (the replay fence).
	RelayMarkers []RelayMarker `json:"relay_markers,omitempty"`
}

// Relay envelope kinds (adapters/desktop/relay): what a RelayMarker
// stands for.
const (
	RelayArmPending  = "arm-pending"
	RelayArmAccepted = "arm-accepted"
	// RelayPaused stands for note-paused: the bridge's proof that a
	// generation's caller heartbeat is paused (or that an arm in flight
	// never took effect). Its marker lives on the binding.
	RelayPaused = "paused"
)

// RelayKinds lists them.
var RelayKinds = []string{RelayArmPending, RelayArmAccepted, RelayPaused}

// RelayMarker is one issued transcript-relay marker of an attempt.
type RelayMarker struct {
	Marker          string    `json:"marker"`
	Kind            string    `json:"kind"`
	BridgeThreadID  string    `json:"bridge_thread_id"`
	BridgeRequestID string    `json:"bridge_request_id"`
	IssuedAt        time.Time `json:"issued_at"`
	ExpiresAt       time.Time `json:"expires_at"`
	ConsumedSHA256  string    `json:"consumed_envelope_sha256,omitempty"`
	ConsumedAt      time.Time `json:"consumed_at,omitzero"`
	// Generation and AttemptID are a pause marker's (on a binding).
	Generation uint64 `json:"generation,omitempty"`
	AttemptID  string `json:"attempt_id,omitempty"`
}

// Valid reports whether the marker may still be consumed at now.
func (m RelayMarker) Valid(now time.Time) bool {
	return m.ConsumedSHA256 == "" && now.Before(m.ExpiresAt)
}

// findMarker returns the marker m in ms, nil if none.
func findMarker(ms []RelayMarker, m string) *RelayMarker {
	for i := range ms {
		if ms[i].Marker == m {
			return &ms[i]
		}
	}
	return nil
}

// Marker returns the attempt's issued marker m, nil if none.
func (a *Attempt) Marker(m string) *RelayMarker { return findMarker(a.RelayMarkers, m) }

// Marker returns the binding's issued pause marker m, nil if none.
func (b *Binding) Marker(m string) *RelayMarker { return findMarker(b.RelayMarkers, m) }

// Live reports whether the attempt is non-terminal.
func (a *Attempt) Live() bool {
	switch a.State {
	case fsm.AttemptPrepared, fsm.AttemptAcceptPending, fsm.AttemptArmPending, fsm.AttemptCooldown:
		return true
	}
	return false
}

func (a *Attempt) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.AttemptPrepared:
		a.SourceThreadID, a.BatchID, a.Generation = p.SourceThreadID, p.BatchID, p.Generation
		a.SnapshotPath, a.SnapshotRevision, a.DeliveryDeadline = p.SnapshotPath, p.SnapshotRevision, p.DeliveryDeadline
		a.BindingID, a.AutomationBindingState = p.BindingID, "unknown"
	case *events.AttemptArmPendingNoted:
		a.BridgeRequestID, a.BridgeArmLeaseID, a.BridgeArmLeaseDeadline = p.BridgeRequestID, p.LeaseID, p.LeaseDeadline
		a.ArmPendingSince, a.ArmPendingDeadline = e.RecordedAt, p.ArmPendingDeadline
	case *events.AttemptArmed:
		a.CooldownUntil, a.PauseNotBefore, a.PauseDeadline = p.CooldownUntil, p.PauseNotBefore, p.PauseDeadline
		a.AcceptedAt = e.RecordedAt // the arm is the Desktop channel's acceptance
		if p.AutomationID != "" {
			a.AutomationID, a.AutomationBindingState = p.AutomationID, "observed"
		}
	case *events.AttemptAcceptPending:
		a.RPCRequestID, a.RPCKind, a.RPCCorrelationMarker = p.RPCRequestID, p.RPCKind, p.CorrelationMarker
		a.RPCStartedAt, a.RPCState = e.RecordedAt, "pending_acceptance"
		a.ManagedSessionID, a.SessionEpoch = p.ManagedSessionID, p.SessionEpoch
	case *events.AttemptAccepted:
		a.RPCState, a.TurnID, a.AcceptedAt = "accepted", p.TurnID, e.RecordedAt
		a.ObservationDeadline, a.CooldownUntil = p.ObservationDeadline, p.CooldownUntil
		if !p.ObservationDeadline.IsZero() {
			a.ObservationState = "tracking" // only targets that report turns are observed
		}
		a.LastObservedTurnEvent, a.LastObservedTurnAt = "", time.Time{}
	case *events.AttemptRejectedBeforeAccept:
		a.RPCState = "rejected_before_accept"
		a.RejectedRequestIDs = append(a.RejectedRequestIDs, a.RPCRequestID)
		a.RPCRequestID, a.RPCCorrelationMarker = "", ""
	case *events.AttemptTurnObserved:
		a.LastObservedTurnEvent, a.LastObservedTurnAt = p.Event, e.RecordedAt
	case *events.AttemptAbandoned:
		a.EndReason = p.Reason
		if p.ObservationState != "" {
			a.ObservationState = p.ObservationState
		}
		if p.RPCState != "" {
			a.RPCState = p.RPCState
		}
	case *events.AttemptSuperseded:
		a.EndReason, a.SupersededBy = p.Reason, p.ByAttemptID
	case *events.AttemptClosed:
		a.EndReason = p.Reason
	case *events.AttemptRelayMarkerIssued:
		a.RelayMarkers = append(a.RelayMarkers, RelayMarker{Marker: p.Marker, Kind: p.Kind, BridgeThreadID: p.BridgeThreadID,
			BridgeRequestID: p.BridgeRequestID, IssuedAt: e.RecordedAt, ExpiresAt: p.ExpiresAt})
	case *events.AttemptRelayConsumed:
		if m := a.Marker(p.Marker); m != nil {
			m.ConsumedSHA256, m.ConsumedAt = p.EnvelopeSHA256, e.RecordedAt
		}
	}
}

// Deadlines implements Deadliner.
func (a *Attempt) Deadlines() []Deadline {
	switch a.State {
	case fsm.AttemptArmPending:
		return []Deadline{{index.DueArmPending, a.ArmPendingDeadline}}
	case fsm.AttemptCooldown:
		var out []Deadline
		if a.Tracking() {
			out = append(out, Deadline{index.DueObservation, a.ObservationDeadline})
		}
		if !a.PauseDeadline.IsZero() {
			out = append(out, Deadline{index.DueAttemptPause, a.PauseDeadline})
		}
		return out
	}
	return nil
}

// Tracking reports whether the attempt's accepted turn is being
// observed: the daemon stays up until the turn ends or its deadline.
func (a *Attempt) Tracking() bool {
	return a.State == fsm.AttemptCooldown && a.ObservationState == "tracking" && !a.ObservationDeadline.IsZero()
}

// Indexes implements Indexer.
func (a *Attempt) Indexes() []IndexEntry {
	out := []IndexEntry{{index.BatchAttempts, a.BatchID}}
	if a.Live() {
		out = append(out, IndexEntry{index.ThreadLive, a.SourceThreadID})
	}
	if a.Tracking() {
		out = append(out, IndexEntry{index.Tracking, index.TrackingKey(a.ObservationDeadline)})
	}
	for _, m := range a.RelayMarkers {
		out = append(out, IndexEntry{index.RelayMarker, m.Marker})
	}
	if !a.AcceptedAt.IsZero() {
		out = append(out, IndexEntry{index.ThreadSends, index.SendKey(a.SourceThreadID, a.AcceptedAt)})
	}
	return out
}
