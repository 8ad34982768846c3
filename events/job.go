package events

import "time"

// KindJob is the stream of one job.
const KindJob Kind = "job"

// jobEvents declares the job events (see declarations).
func jobEvents() []declaration {
	return []declaration{
		decl[JobSubmitted](KindJob),
		decl[JobCompleted](KindJob),
		decl[JobFailed](KindJob),
		decl[JobCarried](KindJob),
		decl[JobCancelled](KindJob),
	}
}

// DeliveryPolicy is the normalized delivery policy of a job or batch.
type DeliveryPolicy struct {
	ReadOnly            bool `json:"read_only"`
	RequiresApproval    bool `json:"requires_approval"`
	RequiresNetwork     bool `json:"requires_network"`
	RequiresWriteAccess bool `json:"requires_write_access"`
}

// FailClosedPolicy is what a job gets for every field its submitter left out.
var FailClosedPolicy = DeliveryPolicy{ReadOnly: false, RequiresApproval: true, RequiresNetwork: true, RequiresWriteAccess: true}

// Stricter returns the most restrictive combination of two policies.
func (p DeliveryPolicy) Stricter(q DeliveryPolicy) DeliveryPolicy {
	return DeliveryPolicy{
		ReadOnly:            p.ReadOnly && q.ReadOnly,
		RequiresApproval:    p.RequiresApproval || q.RequiresApproval,
		RequiresNetwork:     p.RequiresNetwork || q.RequiresNetwork,
		RequiresWriteAccess: p.RequiresWriteAccess || q.RequiresWriteAccess,
	}
}

// LowRisk reports whether the policy is read-only and low-risk: no
// approval, network or write access needed. Desktop v1 continues only
// such batches automatically.
func (p DeliveryPolicy) LowRisk() bool {
	return p.ReadOnly && !p.RequiresApproval && !p.RequiresNetwork && !p.RequiresWriteAccess
}

// Target is where a job's result is delivered: the target_kind of a job
// and of its batches. The values and their one list are engine/command's
// (command.Targets); the type is here, below the engine, so the event,
// the state, the read views and the wire all carry it, and only its JSON
// spells it as a string.
type Target string

// JobSubmitted opens a job in state running.
type JobSubmitted struct {
	TargetKind     Target         `json:"target_kind"`
	SourceThreadID string         `json:"source_thread_id"`
	TaskKind       string         `json:"task_kind"`
	TaskSummary    string         `json:"task_summary"`
	Metadata       RawJSON        `json:"metadata,omitempty"`
	DedupeKey      string         `json:"dedupe_key,omitempty"`
	DeliveryPolicy DeliveryPolicy `json:"delivery_policy"`
	// TimeoutAt is when the job fails unless reported first (job_timeout
	// after submission); zero for none.
	TimeoutAt time.Time `json:"timeout_at,omitzero"`
	// DeliveryTarget is the resolved host-plugin target of a
	// codex_app_server job (nil for every other target kind).
	DeliveryTarget *DeliveryTarget `json:"delivery_target,omitempty"`
}

const TypeJobSubmitted = "job.submitted"

func (JobSubmitted) EventType() string { return TypeJobSubmitted }

// DeliveryTarget is the resolved codex_app_server target of a host-plugin
// delivery (spec/plugin-target.md): which daemon-owned app-server lease
// carries it, the managed session and epoch its accepted turn is
// reported on, and the codex executable the app-server runs. It is
// persisted with the job and its batch so a restarted daemon (or a
// restarted plugin) can find the same target again.
type DeliveryTarget struct {
	// Ownership is "delivery_owned" (the daemon derived the lease from
	// the plugin identity, the thread and the idempotency key) or
	// "explicit_lease" (the plugin ensured the lease itself).
	Ownership        string `json:"ownership"`
	PluginID         string `json:"plugin_id"`
	AppServerLeaseID string `json:"app_server_lease_id"`
	ManagedSessionID string `json:"managed_session_id"`
	BoundThreadID    string `json:"bound_thread_id"`
	SessionEpoch     uint64 `json:"session_epoch"`
	CodexBinary      string `json:"codex_binary"`
}

// JobCompleted moves a running job to ready; its result is an artifact.
type JobCompleted struct {
	ResultSummary string `json:"result_summary"`
	ArtifactID    string `json:"artifact_id,omitempty"`
	ResultBytes   int64  `json:"result_bytes"`
	BatchID       string `json:"batch_id,omitempty"` // the batch the ready job joined
}

const TypeJobCompleted = "job.completed"

func (JobCompleted) EventType() string { return TypeJobCompleted }

// JobFailed records that the job's runner reported failure.
type JobFailed struct {
	Reason string `json:"reason"`
}

const TypeJobFailed = "job.failed"

func (JobFailed) EventType() string { return TypeJobFailed }

// JobCarried moves a ready job's result from a superseded batch into the
// batch that superseded it.
type JobCarried struct {
	FromBatchID string `json:"from_batch_id"`
	BatchID     string `json:"batch_id"`
}

const TypeJobCarried = "job.carried"

func (JobCarried) EventType() string { return TypeJobCarried }

// JobCancelled records an explicit cancel by the submitter or user.
type JobCancelled struct {
	Reason string `json:"reason,omitempty"`
}

const TypeJobCancelled = "job.cancelled"

func (JobCancelled) EventType() string { return TypeJobCancelled }
