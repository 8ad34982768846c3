package events

import "time"

// KindAttempt is the stream of one delivery attempt.
const KindAttempt Kind = "attempt"

// attemptEvents declares the attempt events (see declarations).
func attemptEvents() []declaration {
	return []declaration{
		decl[AttemptPrepared](KindAttempt),
		decl[AttemptArmPendingNoted](KindAttempt),
		decl[AttemptArmed](KindAttempt),
		decl[AttemptAcceptPending](KindAttempt),
		decl[AttemptAccepted](KindAttempt),
		decl[AttemptRejectedBeforeAccept](KindAttempt),
		decl[AttemptTurnObserved](KindAttempt),
		decl[AttemptAbandoned](KindAttempt),
		decl[AttemptSuperseded](KindAttempt),
		decl[AttemptClosed](KindAttempt),
		decl[AttemptRelayMarkerIssued](KindAttempt),
		decl[AttemptRelayConsumed](KindAttempt),
	}
}

// AttemptPrepared creates a new attempt in state prepared.
type AttemptPrepared struct {
	SourceThreadID   string    `json:"source_thread_id"`
	BatchID          string    `json:"batch_id"`
	Generation       uint64    `json:"generation"`
	SnapshotRevision uint64    `json:"snapshot_revision"`
	SnapshotPath     string    `json:"snapshot_path,omitempty"`
	DeliveryDeadline time.Time `json:"delivery_deadline,omitzero"`
	BindingID        string    `json:"binding_id,omitempty"`
}

const TypeAttemptPrepared = "attempt.prepared"

func (AttemptPrepared) EventType() string { return TypeAttemptPrepared }

// AttemptArmPendingNoted is the Desktop bridge's durable barrier before it
// arms the caller heartbeat.
type AttemptArmPendingNoted struct {
	BridgeRequestID    string    `json:"bridge_request_id"`
	LeaseID            string    `json:"bridge_arm_lease_id"`
	LeaseDeadline      time.Time `json:"bridge_arm_lease_deadline"`
	ArmPendingDeadline time.Time `json:"arm_pending_deadline"`
}

const TypeAttemptArmPendingNoted = "attempt.arm_pending_noted"

func (AttemptArmPendingNoted) EventType() string { return TypeAttemptArmPendingNoted }

// AttemptArmed records a Desktop arm accepted by the channel.
type AttemptArmed struct {
	CooldownUntil  time.Time `json:"cooldown_until"`
	PauseNotBefore time.Time `json:"pause_not_before"`
	PauseDeadline  time.Time `json:"pause_deadline"`
	AutomationID   string    `json:"automation_id,omitempty"`
}

const TypeAttemptArmed = "attempt.armed"

func (AttemptArmed) EventType() string { return TypeAttemptArmed }

// AttemptAcceptPending is the CLI adapter's durable barrier before a
// side-effectful turn/start or turn/steer.
type AttemptAcceptPending struct {
	RPCRequestID      string `json:"delivery_rpc_request_id"`
	RPCKind           string `json:"delivery_rpc_kind"`
	CorrelationMarker string `json:"delivery_rpc_correlation_marker"`
	ManagedSessionID  string `json:"managed_session_id,omitempty"`
	SessionEpoch      uint64 `json:"session_epoch,omitempty"`
}

const TypeAttemptAcceptPending = "attempt.accept_pending"

func (AttemptAcceptPending) EventType() string { return TypeAttemptAcceptPending }

// AttemptAccepted records that the app-server accepted the turn.
type AttemptAccepted struct {
	TurnID              string    `json:"delivery_turn_id"`
	ObservationDeadline time.Time `json:"delivery_observation_deadline"`
	CooldownUntil       time.Time `json:"cooldown_until"`
}

const TypeAttemptAccepted = "attempt.accepted"

func (AttemptAccepted) EventType() string { return TypeAttemptAccepted }

// AttemptRejectedBeforeAccept records a proven benign reject; the attempt
// returns to prepared without consuming the attempt budget.
type AttemptRejectedBeforeAccept struct {
	Reason string `json:"reason"`
}

const TypeAttemptRejectedBeforeAccept = "attempt.rejected_before_accept"

func (AttemptRejectedBeforeAccept) EventType() string { return TypeAttemptRejectedBeforeAccept }

// AttemptTurnObserved records an event seen on the accepted turn.
type AttemptTurnObserved struct {
	TurnID string `json:"delivery_turn_id"`
	Event  string `json:"event"`
}

const TypeAttemptTurnObserved = "attempt.turn_observed"

func (AttemptTurnObserved) EventType() string { return TypeAttemptTurnObserved }

// AttemptAbandoned records a failed attempt.
type AttemptAbandoned struct {
	Reason           string `json:"reason"`
	ObservationState string `json:"delivery_observation_state,omitempty"`
	RPCState         string `json:"delivery_rpc_state,omitempty"`
}

const TypeAttemptAbandoned = "attempt.abandoned"

func (AttemptAbandoned) EventType() string { return TypeAttemptAbandoned }

// AttemptSuperseded invalidates an attempt in favour of a newer generation.
type AttemptSuperseded struct {
	ByAttemptID string `json:"by_attempt_id,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

const TypeAttemptSuperseded = "attempt.superseded"

func (AttemptSuperseded) EventType() string { return TypeAttemptSuperseded }

// AttemptClosed ends an attempt whose batch closed.
type AttemptClosed struct {
	Reason string `json:"reason"`
}

const TypeAttemptClosed = "attempt.closed"

func (AttemptClosed) EventType() string { return TypeAttemptClosed }

// AttemptRelayMarkerIssued records a transcript-relay marker issued for
// the attempt (spec/desktop.md, "The transcript relay"): the envelope kind
// it stands for and the bridge request it is bound to.
type AttemptRelayMarkerIssued struct {
	Marker          string    `json:"marker"`
	Kind            string    `json:"kind"`
	BridgeThreadID  string    `json:"bridge_thread_id"`
	BridgeRequestID string    `json:"bridge_request_id"`
	ExpiresAt       time.Time `json:"expires_at"`
}

const TypeAttemptRelayMarkerIssued = "attempt.relay_marker_issued"

func (AttemptRelayMarkerIssued) EventType() string { return TypeAttemptRelayMarkerIssued }

// AttemptRelayConsumed records that a relay envelope carrying the marker
// was consumed: the CAS it stood for is in the same append. The envelope
// hash is the replay fence: the same envelope seen again changes nothing.
type AttemptRelayConsumed struct {
	Marker         string `json:"marker"`
	Kind           string `json:"kind"`
	EnvelopeSHA256 string `json:"envelope_sha256"`
	RolloutPath    string `json:"rollout_path,omitempty"`
	Line           int64  `json:"line,omitempty"`
}

const TypeAttemptRelayConsumed = "attempt.relay_consumed"

func (AttemptRelayConsumed) EventType() string { return TypeAttemptRelayConsumed }
