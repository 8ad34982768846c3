package daemon

import (
	"encoding/json"
	"time"

	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/events"
)

// Request arguments and results of the socket ops. The JSON shapes of the
// results are what `cbth ... --json` prints; spec/cli.md documents them.

// SubmitArgs are the arguments of job.submit.
type SubmitArgs struct {
	Target    string              `json:"target"`
	ThreadID  string              `json:"thread_id"`
	TaskKind  string              `json:"task_kind"`
	Summary   string              `json:"summary"`
	Metadata  json.RawMessage     `json:"metadata,omitempty"`
	DedupeKey string              `json:"dedupe_key,omitempty"`
	Policy    command.PolicyFlags `json:"policy"`
}

// SubmitResult is job.submit's result.
type SubmitResult struct {
	JobID        string    `json:"job_id"`
	Status       string    `json:"status"`
	AcceptedAt   time.Time `json:"accepted_at"`
	Deduplicated bool      `json:"deduplicated"`
}

// CompleteArgs are the arguments of job.complete.
type CompleteArgs struct {
	JobID      string `json:"job_id"`
	Summary    string `json:"summary"`
	ResultFile string `json:"result_file"`
}

// JobArgs name one job, with an optional reason.
type JobArgs struct {
	JobID  string `json:"job_id"`
	Reason string `json:"reason,omitempty"`
}

// TransitionResult is the result of complete, fail and cancel.
type TransitionResult struct {
	JobID   string       `json:"job_id"`
	Status  string       `json:"status"`
	Outcome string       `json:"outcome"`
	Job     JobView      `json:"job"`
	Art     *ArtifactRef `json:"artifact,omitempty"`
}

// ListArgs filter job.list. Results come in pages of at most Limit jobs
// in id order (ids are time-ordered), starting after After.
type ListArgs struct {
	ThreadID string `json:"thread_id,omitempty"`
	Status   string `json:"status,omitempty"`
	After    string `json:"after,omitempty"`
	Limit    int    `json:"limit,omitempty"`
}

// ListPage is one page of job.list.
type ListPage struct {
	Jobs []JobView `json:"jobs"`
	Next string    `json:"next,omitempty"`
}

// ArtifactRef describes a job's artifact.
type ArtifactRef struct {
	ArtifactID   string    `json:"artifact_id"`
	State        string    `json:"state"`
	SizeBytes    int64     `json:"size_bytes"`
	SHA256       string    `json:"sha256"`
	ContentType  string    `json:"content_type"`
	ManagedPath  string    `json:"managed_path"`
	ManifestPath string    `json:"manifest_path"`
	CreatedAt    time.Time `json:"created_at"`
	GCEligibleAt time.Time `json:"gc_eligible_at"`
}

// JobView is the whole record of one job.
type JobView struct {
	JobID          string                `json:"job_id"`
	Status         string                `json:"status"`
	Target         string                `json:"target"`
	ThreadID       string                `json:"thread_id"`
	TaskKind       string                `json:"task_kind"`
	Summary        string                `json:"summary"`
	DedupeKey      string                `json:"dedupe_key,omitempty"`
	DeliveryPolicy events.DeliveryPolicy `json:"delivery_policy"`
	Metadata       json.RawMessage       `json:"metadata,omitempty"`
	ResultSummary  string                `json:"result_summary,omitempty"`
	FailReason     string                `json:"fail_reason,omitempty"`
	CancelReason   string                `json:"cancel_reason,omitempty"`
	Artifact       *ArtifactRef          `json:"artifact"`
	AcceptedAt     time.Time             `json:"accepted_at"`
	ReadyAt        *time.Time            `json:"ready_at"`
	CompletedAt    *time.Time            `json:"completed_at"`
	UpdatedAt      time.Time             `json:"updated_at"`
	Version        uint64                `json:"version"`
}

func viewJob(j *aggregate.Job, a *aggregate.Artifact) JobView {
	v := JobView{
		JobID: j.ID, Status: j.Status, Target: j.TargetKind, ThreadID: j.SourceThreadID, TaskKind: j.TaskKind,
		Summary: j.TaskSummary, DedupeKey: j.DedupeKey, DeliveryPolicy: j.DeliveryPolicy, Metadata: json.RawMessage(j.Metadata),
		ResultSummary: j.ResultSummary, FailReason: j.FailReason, CancelReason: j.CancelReason,
		AcceptedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, Version: j.Version,
	}
	if !j.ReadyAt.IsZero() {
		t := j.ReadyAt
		v.ReadyAt = &t
	}
	if !j.CompletedAt.IsZero() {
		t := j.CompletedAt
		v.CompletedAt = &t
	}
	if a != nil {
		v.Artifact = viewArtifact(a)
	}
	return v
}

func viewArtifact(a *aggregate.Artifact) *ArtifactRef {
	return &ArtifactRef{ArtifactID: a.ID, State: a.Status, SizeBytes: a.SizeBytes, SHA256: a.SHA256, ContentType: a.ContentType,
		ManagedPath: a.ManagedPath, ManifestPath: a.ManifestPath, CreatedAt: a.CreatedAt, GCEligibleAt: a.GCEligibleAt}
}

// Status is daemon.status's result.
type Status struct {
	PID             int                 `json:"pid"`
	Version         string              `json:"version"`
	Home            string              `json:"home"`
	StartedAt       time.Time           `json:"started_at"`
	UptimeSeconds   float64             `json:"uptime_seconds"`
	LogHeadSeq      uint64              `json:"log_head_seq"`
	Checkpoint      uint64              `json:"projection_checkpoint"`
	ProjectionLag   uint64              `json:"projection_lag"`
	ActiveJobs      int                 `json:"active_jobs"`
	AttachedClients int                 `json:"attached_clients"`
	ParkedBatches   int                 `json:"parked_batches"`
	IdleTimeout     string              `json:"idle_timeout"`
	IdleDeadline    time.Time           `json:"idle_deadline"`
	BusyReasons     []string            `json:"busy_reasons"`
	NextDue         *time.Time          `json:"next_due"`
	LastSweep       command.SweepResult `json:"last_sweep"`
}

// ReadArgs page through the log: events with seq >= From, optionally of
// one stream ("kind/id").
type ReadArgs struct {
	From   uint64 `json:"from,omitempty"`
	Stream string `json:"stream,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	// WaitMS, when set and nothing at or after From exists yet, waits up
	// to this long for a commit (tail -f).
	WaitMS int64 `json:"wait_ms,omitempty"`
}

// EventsPage is one page of events.read; Next is the seq to continue from.
type EventsPage struct {
	Events []events.Envelope `json:"events"`
	Next   uint64            `json:"next,omitempty"`
	Head   uint64            `json:"head"`
}

// PinArgs pin an artifact until a time.
type PinArgs struct {
	ArtifactID string    `json:"artifact_id"`
	Until      time.Time `json:"until,omitzero"`
	For        string    `json:"for,omitempty"`
}

// Ping is ping's result.
type Ping struct {
	PID     int    `json:"pid"`
	Version string `json:"version"`
}
