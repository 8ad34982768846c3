package events

import "time"

// ---- channel gateway (spec/channels.md) ----

// KindGatewayRoute is the stream of one channel gateway route, by routing
// key (workspace_id + agent_id).
const KindGatewayRoute Kind = "gwroute"

// KindGatewayStream is the stream of one channel stream through the
// gateway, by stream_id.
const KindGatewayStream Kind = "gwstream"

// gatewayEvents declares the gateway's events (see declarations).
func gatewayEvents() []declaration {
	return []declaration{
		decl[GatewayRouteAdded](KindGatewayRoute),
		decl[GatewayRouteRemoved](KindGatewayRoute),
		decl[GatewayEnvelopeRecorded](KindGatewayStream),
		decl[GatewayGapReported](KindGatewayStream),
		decl[GatewayModeChanged](KindGatewayStream),
	}
}

//
// The gateway's events are metadata only: routing, sequence, sizes,
// content hashes, status and error codes, correlation ids. No field ever
// holds payload text.

// GatewayRouteAdded points a routing key (workspace_id + agent_id) at a
// destination, replacing the one it had.
type GatewayRouteAdded struct {
	WorkspaceID string `json:"workspace_id"`
	AgentID     string `json:"agent_id"`
	// To is ctx:<object path> (a CortexFS agent's socket session) or
	// thread:<thread id> (a delivery through the core).
	To string `json:"to"`
	// Target is the delivery target kind: ctx for ctx routes, cli,
	// desktop or debug for thread routes.
	Target string `json:"target"`
}

const TypeGatewayRouteAdded = "gateway.route_added"

func (GatewayRouteAdded) EventType() string { return TypeGatewayRouteAdded }

// GatewayRouteRemoved takes a routing key's route away.
type GatewayRouteRemoved struct{}

const TypeGatewayRouteRemoved = "gateway.route_removed"

func (GatewayRouteRemoved) EventType() string { return TypeGatewayRouteRemoved }

// GatewayEnvelopeRecorded is one inbound envelope as the gateway handled
// it, and a summary of what went back on its stream.
type GatewayEnvelopeRecorded struct {
	ChannelType string    `json:"channel_type"`
	SessionID   string    `json:"session_id"`
	Seq         uint64    `json:"seq"`
	Type        string    `json:"event_type"`
	Target      string    `json:"target"`
	SentAt      time.Time `json:"sent_at"`
	WorkspaceID string    `json:"workspace_id,omitempty"`
	AgentID     string    `json:"agent_id,omitempty"`
	MessageID   string    `json:"message_id,omitempty"`
	DedupKey    string    `json:"dedup_key,omitempty"`
	RetryCount  int       `json:"retry_count,omitempty"`
	RemoteMode  string    `json:"remote_mode,omitempty"`
	StatusCode  string    `json:"status_code,omitempty"`
	ErrorCode   string    `json:"error_code,omitempty"`
	ReasonCode  string    `json:"reason_code,omitempty"`
	// PayloadBytes and PayloadSHA256 identify the payload without
	// keeping it.
	PayloadBytes  int    `json:"payload_bytes"`
	PayloadSHA256 string `json:"payload_sha256"`
	// Outcome is routed, recorded (valid, delivered nowhere), refused
	// (valid but not routable) or failed (the destination failed); the
	// seq of a refused or failed envelope stays unused. OutcomeCode (a stable error code) and
	// OutcomeReason say why it was refused or failed.
	Outcome       string `json:"outcome"`
	OutcomeCode   string `json:"outcome_code,omitempty"`
	OutcomeReason string `json:"outcome_reason,omitempty"`
	Route         string `json:"route,omitempty"`
	RouteKind     string `json:"route_target,omitempty"`
	JobID         string `json:"job_id,omitempty"`
	// OutFirst..OutLast are the seqs of the envelopes sent back on the
	// stream for it (the destination's frames and the acknowledgement),
	// with their total size and a hash over them.
	OutFirst  uint64 `json:"out_first,omitempty"`
	OutLast   uint64 `json:"out_last,omitempty"`
	OutBytes  int    `json:"out_bytes,omitempty"`
	OutSHA256 string `json:"out_sha256,omitempty"`
}

// The outcomes of an inbound envelope (GatewayEnvelopeRecorded.Outcome).
const (
	GatewayRouted    = "routed"    // handed to its destination
	GatewayRecorded  = "recorded"  // valid and recorded; no destination takes it
	GatewayRefused   = "refused"   // valid but not routable; its seq stays unused
	GatewayFailed    = "failed"    // the destination failed; its seq stays unused
	GatewayDuplicate = "duplicate" // already received: acknowledged, not routed again
)

const TypeGatewayEnvelopeRecorded = "gateway.envelope_recorded"

func (GatewayEnvelopeRecorded) EventType() string { return TypeGatewayEnvelopeRecorded }

// GatewayGapReported says an envelope arrived past seqs never received:
// From..To are missing. They stay open until they arrive.
type GatewayGapReported struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

const TypeGatewayGapReported = "gateway.gap_reported"

func (GatewayGapReported) EventType() string { return TypeGatewayGapReported }

// GatewayModeChanged moves an ssh_remote stream's remote mode; a move
// from ide_primary to terminal_fallback is a downgrade and always has a
// reason code.
type GatewayModeChanged struct {
	From       string `json:"from,omitempty"`
	To         string `json:"to"`
	ReasonCode string `json:"reason_code,omitempty"`
	Seq        uint64 `json:"seq"`
}

const TypeGatewayModeChanged = "gateway.mode_changed"

func (GatewayModeChanged) EventType() string { return TypeGatewayModeChanged }
