package aggregate

import (
	"time"

	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
)

// Job is a tracked long-running task.
type Job struct {
	Header[fsm.JobState]
	TargetKind     events.Target          `json:"target_kind"`
	SourceThreadID string                 `json:"source_thread_id"`
	TaskKind       string                 `json:"task_kind"`
	TaskSummary    string                 `json:"task_summary"`
	Metadata       events.RawJSON         `json:"metadata,omitempty"`
	DedupeKey      string                 `json:"dedupe_key,omitempty"`
	DeliveryPolicy events.DeliveryPolicy  `json:"delivery_policy"`
	ArtifactID     string                 `json:"artifact_id,omitempty"`
	ResultSummary  string                 `json:"result_summary,omitempty"`
	ResultBytes    int64                  `json:"result_bytes,omitempty"`
	BatchID        string                 `json:"batch_id,omitempty"`
	FailReason     string                 `json:"fail_reason,omitempty"`
	CancelReason   string                 `json:"cancel_reason,omitempty"`
	CreatedSeq     uint64                 `json:"created_seq"`
	ReadyAt        time.Time              `json:"ready_at,omitzero"`
	CompletedAt    time.Time              `json:"completed_at,omitzero"`
	TimeoutAt      time.Time              `json:"timeout_at,omitzero"`
	DeliveryTarget *events.DeliveryTarget `json:"delivery_target,omitempty"`
}

func (j *Job) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.JobSubmitted:
		j.TargetKind, j.SourceThreadID = p.TargetKind, p.SourceThreadID
		j.TaskKind, j.TaskSummary = p.TaskKind, p.TaskSummary
		j.Metadata, j.DedupeKey, j.DeliveryPolicy = p.Metadata, p.DedupeKey, p.DeliveryPolicy
		j.CreatedSeq, j.TimeoutAt, j.DeliveryTarget = e.Seq, p.TimeoutAt, p.DeliveryTarget
	case *events.JobCompleted:
		j.ResultSummary, j.ArtifactID, j.ResultBytes, j.BatchID = p.ResultSummary, p.ArtifactID, p.ResultBytes, p.BatchID
		j.ReadyAt, j.CompletedAt = e.RecordedAt, e.RecordedAt
	case *events.JobFailed:
		j.FailReason, j.CompletedAt = p.Reason, e.RecordedAt
	case *events.JobCancelled:
		j.CancelReason = p.Reason
	case *events.JobCarried:
		j.BatchID = p.BatchID
	}
}

// Indexes implements Indexer.
func (j *Job) Indexes() []IndexEntry {
	out := []IndexEntry{{index.JobThread, j.SourceThreadID}}
	if j.DedupeKey != "" {
		out = append(out, IndexEntry{index.Dedupe, j.DedupeKey})
	}
	return out
}

// Deadlines implements Deadliner: a running job with a timeout fails at
// it unless reported first.
func (j *Job) Deadlines() []Deadline {
	if j.State == fsm.JobRunning && !j.TimeoutAt.IsZero() {
		return []Deadline{{index.DueJobTimeout, j.TimeoutAt}}
	}
	return nil
}

// Counts implements Counter.
func (j *Job) Counts() []string {
	if j.State == fsm.JobRunning {
		return []string{CountJobActive}
	}
	return nil
}
