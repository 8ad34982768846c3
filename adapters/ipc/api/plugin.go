package api

import (
	"encoding/json"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
)

// The host-plugin operations (spec/plugin-target.md): a plugin reads the
// service capabilities in the handshake, ensures an app-server lease
// (explicit lease mode) or not (delivery-owned mode, the default),
// enqueues its deliveries, and inspects them.
var (
	PluginHandshake = Op[HandshakeArgs, HandshakeReply]{Name: "plugin.handshake", Passive: true}
	AppServerEnsure = Op[EnsureArgs, EnsureReply]{Name: "app_server.ensure"}
	DeliveryEnqueue = Op[EnqueueArgs, EnqueueReply]{Name: "delivery.enqueue"}
	DeliveryInspect = Op[DeliveryInspectArgs, DeliveryInspection]{Name: "delivery.inspect"}
)

// HandshakeArgs name the plugin: PluginID is its stable identity,
// PluginInstanceID the running instance (a new one after each restart)
// and PluginPID its process, which must be alive while the instance
// makes requests.
type HandshakeArgs struct {
	PluginID         string `json:"plugin_id"`
	PluginInstanceID string `json:"plugin_instance_id,omitempty"`
	PluginPID        int    `json:"plugin_pid,omitempty"`
}

// HandshakeReply is plugin.handshake's reply: what this daemon offers.
type HandshakeReply struct {
	PluginID            string   `json:"plugin_id"`
	ServiceCapabilities []string `json:"service_capabilities"`
	Version             string   `json:"version"`
	Protocol            int      `json:"protocol"`
	PID                 int      `json:"pid"`
}

// EnsureArgs ask for an explicit app-server lease: the daemon-owned
// app-server of CodexBinary, with SourceThreadID bound to it, for one
// plugin instance.
type EnsureArgs struct {
	PluginID         string `json:"plugin_id"`
	PluginInstanceID string `json:"plugin_instance_id"`
	SourceThreadID   string `json:"source_thread_id"`
	CodexBinary      string `json:"codex_binary"`
}

// EnsureOutcome is what app_server.ensure did: a lease's answer, not a
// decider's (the lease pool is not in the log).
type EnsureOutcome string

// The outcomes of app_server.ensure.
const (
	EnsureStarted EnsureOutcome = "started" // a new lease
	EnsureReused  EnsureOutcome = "reused"  // the scope's lease, still held
)

// EnsureReply is app_server.ensure's reply: its outcome and the lease.
type EnsureReply struct {
	Outcome EnsureOutcome `json:"outcome"`
	Lease
}

// Lease is an app-server lease as the daemon holds it.
type Lease struct {
	AppServerLeaseID  string `json:"app_server_lease_id"`
	Ownership         string `json:"ownership"`
	PluginID          string `json:"plugin_id"`
	BoundThreadID     string `json:"bound_thread_id"`
	CodexBinary       string `json:"codex_binary"`
	ManagedSessionID  string `json:"managed_session_id"`
	SessionEpoch      uint64 `json:"session_epoch"`
	AppServerInstance string `json:"app_server_instance"`
	AppServerPID      int    `json:"app_server_pid"`
}

// EnqueueTarget is delivery.enqueue's target: a lease id (explicit lease
// mode) or a codex executable (delivery-owned mode); ManagedSessionID and
// SessionEpoch, when given, are assertions checked against the lease,
// never used to find it.
type EnqueueTarget struct {
	AppServerLeaseID string `json:"app_server_lease_id,omitempty"`
	CodexBinary      string `json:"codex_binary,omitempty"`
	ManagedSessionID string `json:"managed_session_id,omitempty"`
	SessionEpoch     uint64 `json:"session_epoch,omitempty"`
}

// EnqueueArgs are delivery.enqueue's request: a job for a plugin's
// thread whose result goes through the codex_app_server target.
// IdempotencyKey makes a retried enqueue return the original job.
type EnqueueArgs struct {
	PluginID string `json:"plugin_id"`
	// PluginInstanceID, when given, is checked as app_server.ensure
	// checks it; a delivery-owned target never depends on it.
	PluginInstanceID string              `json:"plugin_instance_id,omitempty"`
	SourceThreadID   string              `json:"source_thread_id"`
	IdempotencyKey   string              `json:"idempotency_key"`
	TaskKind         string              `json:"task_kind"`
	TaskSummary      string              `json:"task_summary"`
	Metadata         json.RawMessage     `json:"metadata,omitempty"`
	Policy           command.PolicyFlags `json:"delivery_policy"`
	Target           EnqueueTarget       `json:"target"`
}

// EnqueueReply is delivery.enqueue's reply: the job and its resolved
// target, as persisted.
type EnqueueReply struct {
	SubmitReply
	DeliveryTarget *events.DeliveryTarget `json:"delivery_target"`
}

// DeliveryInspectArgs name a plugin delivery by its job (or its batch);
// AppServerLeaseID is needed to reconcile an explicit-lease target.
type DeliveryInspectArgs struct {
	JobID            string `json:"job_id,omitempty"`
	BatchID          string `json:"batch_id,omitempty"`
	AppServerLeaseID string `json:"app_server_lease_id,omitempty"`
}

// DeliveryInspection is delivery.inspect's reply: the job, its batch
// (null until the job is ready), the resolved target, the lease as the
// daemon holds it now (null when not held), and what reconciling the
// target found.
type DeliveryInspection struct {
	Job            query.JobView          `json:"job"`
	Batch          *query.BatchInspection `json:"batch"`
	DeliveryTarget *events.DeliveryTarget `json:"delivery_target"`
	Lease          *Lease                 `json:"lease"`
	Reconcile      Reconcile              `json:"reconcile"`
}

// Reconcile is what delivery.inspect did with the target: Outcome is
// "not_needed" (nothing accepted is open), "lease_required" (an explicit
// lease target and no lease id given), "followed" (the accepted turn is
// observed on its instance; an end missed meanwhile was reported),
// "continuity_lost" (the instance that accepted the turn is gone: the
// attempt is parked), or "evidence" (the batch is parked or closed: the
// turn's status is shown for the operator, nothing changes).
type Reconcile struct {
	Outcome    engine.Outcome `json:"outcome"`
	TurnID     string         `json:"delivery_turn_id,omitempty"`
	TurnStatus string         `json:"turn_status,omitempty"`
	Detail     string         `json:"detail,omitempty"`
}
