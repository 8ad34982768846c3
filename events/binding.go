package events

import "time"

// KindBinding is the stream of one Desktop source thread's binding.
const KindBinding Kind = "binding"

// bindingEvents declares the binding events (see declarations).
func bindingEvents() []declaration {
	return []declaration{
		decl[BindingBound](KindBinding),
		decl[BindingArmed](KindBinding),
		decl[BindingQuiesced](KindBinding),
		decl[BindingDegraded](KindBinding),
		decl[BindingUnbound](KindBinding),
		decl[BindingRelayMarkerIssued](KindBinding),
		decl[BindingRelayConsumed](KindBinding),
	}
}

// BindingBound binds a Desktop source thread to a caller automation (first
// bootstrap or operator repair). BridgeThreadID, when set, pins the
// binding to that bridge thread; empty, it follows the installation's.
// When the repair replaced the automation, ReplacedAutomation names the
// old one's fate: OldQuiesced says whether it was proven quiesced.
type BindingBound struct {
	SourceThreadID       string       `json:"source_thread_id"`
	CallerAutomationID   string       `json:"caller_automation_id"`
	BridgeThreadID       string       `json:"bridge_thread_id,omitempty"`
	Mirror               Capabilities `json:"mirror"`
	ReplacedAutomation   bool         `json:"replaced_automation,omitempty"`
	PreviousAutomationID string       `json:"previous_automation_id,omitempty"`
	OldQuiesced          bool         `json:"old_automation_quiesced,omitempty"`
}

const TypeBindingBound = "binding.bound"

func (BindingBound) EventType() string { return TypeBindingBound }

// BindingArmed advances armed_generation after a durable note-arm.
type BindingArmed struct {
	Generation     uint64    `json:"armed_generation"`
	PauseNotBefore time.Time `json:"pause_not_before"`
	PauseDeadline  time.Time `json:"pause_deadline"`
}

const TypeBindingArmed = "binding.armed"

func (BindingArmed) EventType() string { return TypeBindingArmed }

// BindingQuiesced records that the armed generation's heartbeat was paused.
type BindingQuiesced struct {
	Generation uint64 `json:"armed_generation"`
}

const TypeBindingQuiesced = "binding.quiesced"

func (BindingQuiesced) EventType() string { return TypeBindingQuiesced }

// BindingDegraded takes a thread out of automatic continuation.
type BindingDegraded struct {
	Reason string `json:"reason"`
}

const TypeBindingDegraded = "binding.degraded"

func (BindingDegraded) EventType() string { return TypeBindingDegraded }

// BindingUnbound removes the binding.
type BindingUnbound struct {
	DeleteAutomation bool `json:"delete_automation"`
}

const TypeBindingUnbound = "binding.unbound"

func (BindingUnbound) EventType() string { return TypeBindingUnbound }

// BindingRelayMarkerIssued records a transcript-relay marker of the
// "paused" kind (spec/desktop.md, "The transcript relay"): the bridge's
// pause proof for one generation of the binding's caller heartbeat, under
// one bridge request. AttemptID is the arm_pending attempt the proof
// abandons, empty for a pause of the armed generation.
type BindingRelayMarkerIssued struct {
	Marker          string    `json:"marker"`
	Kind            string    `json:"kind"`
	Generation      uint64    `json:"generation"`
	AttemptID       string    `json:"attempt_id"`
	BridgeThreadID  string    `json:"bridge_thread_id"`
	BridgeRequestID string    `json:"bridge_request_id"`
	ExpiresAt       time.Time `json:"expires_at"`
}

const TypeBindingRelayMarkerIssued = "binding.relay_marker_issued"

func (BindingRelayMarkerIssued) EventType() string { return TypeBindingRelayMarkerIssued }

// BindingRelayConsumed records that a pause envelope carrying the marker
// was consumed; the note-paused it stands for is in the same append.
type BindingRelayConsumed struct {
	Marker         string `json:"marker"`
	Kind           string `json:"kind"`
	EnvelopeSHA256 string `json:"envelope_sha256"`
	RolloutPath    string `json:"rollout_path,omitempty"`
	Line           int64  `json:"line,omitempty"`
}

const TypeBindingRelayConsumed = "binding.relay_consumed"

func (BindingRelayConsumed) EventType() string { return TypeBindingRelayConsumed }
