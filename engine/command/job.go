// Package command holds cbth's commands as pure decisions: given a view of
// the current state and the decision time, each returns the events to
// append or a typed error with a stable code. They never read a clock, a
// file or the network; the daemon does that before and after.
package command

import (
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Ownerships of a codex_app_server target.
const (
	OwnershipDeliveryOwned = "delivery_owned"
	OwnershipExplicitLease = "explicit_lease"
)

// Limits on free-text fields, so a runaway script cannot bloat the log.
const (
	MaxIDLen      = 256
	maxSummaryLen = 64 << 10
)

// MaxMetadata bounds a job's metadata; the CLI reads no more of a
// metadata file.
const MaxMetadata = 256 << 10

// SubmitJob opens a job in state running.
type SubmitJob struct {
	engine.Answers[string]

	Target    Target
	ThreadID  string
	TaskKind  string
	Summary   string
	Metadata  json.RawMessage
	DedupeKey string
	Policy    events.DeliveryPolicy
	// Timeout fails the job if it is not reported within this long (the
	// job_timeout setting); 0 for never.
	Timeout time.Duration
	// DeliveryTarget is required for, and only for, codex_app_server.
	DeliveryTarget *events.DeliveryTarget
}

// Validate checks the command's own fields; Decide calls it too.
func (c SubmitJob) Validate() error {
	if !ValidTarget(c.Target) {
		return errs.New(errs.EINVAL, "unknown target %q (want one of %s)", c.Target, targetList())
	}
	if err := CheckID("thread id", c.ThreadID); err != nil {
		return err
	}
	if err := CheckID("task kind", c.TaskKind); err != nil {
		return err
	}
	if err := CheckText("summary", c.Summary, true); err != nil {
		return err
	}
	if c.DedupeKey != "" {
		if err := CheckID("dedupe key", c.DedupeKey); err != nil {
			return err
		}
	}
	if len(c.Metadata) > MaxMetadata {
		return errs.New(errs.EINVAL, "metadata is %d bytes, over the %d byte limit", len(c.Metadata), MaxMetadata)
	}
	if len(c.Metadata) > 0 && !json.Valid(c.Metadata) {
		return errs.New(errs.EINVAL, "metadata is not valid JSON")
	}
	return checkDeliveryTarget(c.Target, c.ThreadID, c.DeliveryTarget)
}

// checkDeliveryTarget checks a codex_app_server job's resolved target: it
// names its ownership, lease, session and codex executable, at an epoch,
// bound to the job's own thread. Other targets take none.
func checkDeliveryTarget(kind Target, thread string, t *events.DeliveryTarget) error {
	if kind != TargetCodexAppServer {
		if t != nil {
			return errs.New(errs.EINVAL, "target %s takes no delivery target", kind)
		}
		return nil
	}
	if t == nil {
		return errs.New(errs.EINVAL, "a %s job needs a resolved delivery target (delivery.enqueue)", kind)
	}
	if t.Ownership != OwnershipDeliveryOwned && t.Ownership != OwnershipExplicitLease {
		return errs.New(errs.EINVAL, "delivery target ownership %q is not %s or %s", t.Ownership, OwnershipDeliveryOwned, OwnershipExplicitLease)
	}
	for _, f := range []struct{ name, v string }{{"plugin id", t.PluginID}, {"app_server_lease_id", t.AppServerLeaseID},
		{"managed_session_id", t.ManagedSessionID}, {"bound_thread_id", t.BoundThreadID}} {
		if err := CheckID(f.name, f.v); err != nil {
			return err
		}
	}
	if t.BoundThreadID != thread {
		return errs.New(errs.EINVAL, "delivery target is bound to thread %s, not %s", t.BoundThreadID, thread)
	}
	if t.SessionEpoch == 0 || t.CodexBinary == "" {
		return errs.New(errs.EINVAL, "delivery target needs a session_epoch and a codex_binary")
	}
	return nil
}

// Decide implements engine.Decider. A repeated dedupe key returns the
// original job with outcome "deduplicated" and appends nothing.
func (c SubmitJob) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := c.Validate(); err != nil {
		return engine.Decision{}, err
	}
	if c.DedupeKey != "" {
		if refs := v.Lookup(index.Dedupe, c.DedupeKey); len(refs) > 0 {
			return c.Answer(engine.Decision{Outcome: OutcomeDeduplicated}, refs[0].ID), nil
		}
	}
	id := v.NewID()
	var timeoutAt time.Time
	if c.Timeout > 0 {
		timeoutAt = now.Add(c.Timeout)
	}
	return c.Answer(engine.Decision{Outcome: OutcomeSubmitted, Emits: []engine.Emit{{Stream: events.StreamID{Kind: events.KindJob, ID: id}, Payload: &events.JobSubmitted{
		TargetKind: c.Target, SourceThreadID: c.ThreadID, TaskKind: c.TaskKind, TaskSummary: c.Summary,
		Metadata: events.RawJSON(c.Metadata), DedupeKey: c.DedupeKey, DeliveryPolicy: c.Policy, TimeoutAt: timeoutAt,
		DeliveryTarget: c.DeliveryTarget,
	}}}}, id), nil
}

// Ingested describes a result file already copied into the artifact store.
type Ingested struct {
	ArtifactID   string
	ManagedPath  string
	ManifestPath string
	ContentType  string
	SizeBytes    int64
	SHA256       string
}

// CompleteJob moves a running job to ready, records its artifact and puts
// the job into its thread's FIFO, all in one append.
type CompleteJob struct {
	engine.Answers[string]

	Config   DeliveryConfig
	JobID    string
	Summary  string
	Artifact *Ingested
	// ResultSHA256 is the SHA-256 of the result file of a completion
	// that finds the job no longer running (the daemon hashes the file
	// instead of copying it): a retry of the completion that committed.
	ResultSHA256 string
}

// Decide implements engine.Decider. Completing a job again with the same
// summary and result (a retry whose first try committed, its answer lost
// to a crash) reports already_completed and appends nothing; any other
// completion of a job that is not running is ESTATE.
func (c CompleteJob) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := CheckText("summary", c.Summary, true); err != nil {
		return engine.Decision{}, err
	}
	j, err := job(v, c.JobID)
	if err != nil {
		return engine.Decision{}, err
	}
	if j.State != fsm.JobRunning {
		if same, err := c.committed(v, j); err != nil || same {
			return engine.Decision{Outcome: OutcomeAlreadyCompleted}, err
		}
		return engine.Decision{}, errs.New(errs.ESTATE, "job %s is %s; cannot complete it", c.JobID, j.State)
	}
	batchID, placed, err := c.Config.place(v, now, j, c.Summary, c.Artifact)
	if err != nil {
		return engine.Decision{}, err
	}
	done := &events.JobCompleted{ResultSummary: c.Summary, BatchID: batchID}
	emits := []engine.Emit{{Stream: jobStream(c.JobID), Payload: done}}
	if a := c.Artifact; a != nil {
		done.ArtifactID, done.ResultBytes = a.ArtifactID, a.SizeBytes
		as := events.StreamID{Kind: events.KindArtifact, ID: a.ArtifactID}
		emits = append(emits,
			engine.Emit{Stream: as, Payload: &events.ArtifactIngested{
				SourceJobID: c.JobID, ManagedPath: a.ManagedPath, ManifestPath: a.ManifestPath, ContentType: a.ContentType,
				SizeBytes: a.SizeBytes, SHA256: a.SHA256, MinRetentionUntil: now.Add(c.Config.MinArtifactTTL),
			}},
			engine.Emit{Stream: as, Payload: &events.ArtifactReferenced{BatchID: batchID}})
	}
	return c.Answer(engine.Decision{Outcome: OutcomeCompleted, Emits: append(emits, placed...)}, batchID), nil
}

// committed reports whether j was completed with this command's summary
// and result.
func (c CompleteJob) committed(v engine.View, j *aggregate.Job) (bool, error) {
	if j.CompletedAt.IsZero() || j.ResultSummary != c.Summary {
		return false, nil
	}
	sum := c.ResultSHA256
	if c.Artifact != nil {
		sum = c.Artifact.SHA256
	}
	if j.ArtifactID == "" {
		return sum == "", nil
	}
	a, err := engine.Artifact(v, j.ArtifactID)
	if err != nil {
		return false, err
	}
	return a != nil && a.SHA256 == sum, nil
}

// FailJob records that a running job failed. Failing it again for the
// same reason reports already_failed and appends nothing.
type FailJob struct {
	JobID  string
	Reason string
}

// Decide implements engine.Decider.
func (c FailJob) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := CheckText("reason", c.Reason, true); err != nil {
		return engine.Decision{}, err
	}
	j, err := job(v, c.JobID)
	if err != nil {
		return engine.Decision{}, err
	}
	if j.State == fsm.JobFailed && j.FailReason == c.Reason {
		return engine.Decision{Outcome: OutcomeAlreadyFailed}, nil // a retry of the failure that committed
	}
	if _, err := runningJob(v, c.JobID, "fail"); err != nil {
		return engine.Decision{}, err
	}
	return engine.Decision{Outcome: OutcomeFailed, Emits: []engine.Emit{{Stream: jobStream(c.JobID), Payload: &events.JobFailed{Reason: c.Reason}}}}, nil
}

// CancelJob cancels a job that is running or ready. A ready job's batch
// closes as cancelled once every job in it is cancelled.
type CancelJob struct {
	Config DeliveryConfig
	JobID  string
	Reason string
}

// Decide implements engine.Decider. Cancelling a cancelled job reports
// already_cancelled and appends nothing.
func (c CancelJob) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := CheckText("reason", c.Reason, false); err != nil {
		return engine.Decision{}, err
	}
	j, err := job(v, c.JobID)
	if err != nil {
		return engine.Decision{}, err
	}
	switch j.State {
	case fsm.JobCancelled:
		return engine.Decision{Outcome: OutcomeAlreadyCancelled}, nil
	case fsm.JobRunning, fsm.JobReady:
	default:
		return engine.Decision{}, errs.New(errs.ESTATE, "job %s is %s; only a running or ready job can be cancelled", c.JobID, j.State)
	}
	emits := []engine.Emit{{Stream: jobStream(c.JobID), Payload: &events.JobCancelled{Reason: c.Reason}}}
	if j.State == fsm.JobReady && j.BatchID != "" {
		b, err := engine.Batch(v, j.BatchID)
		if err != nil {
			return engine.Decision{}, err
		}
		if b != nil && b.Open() {
			all := true
			for _, id := range b.JobIDs {
				if id == j.ID {
					continue
				}
				if oj, err := engine.Job(v, id); err != nil {
					return engine.Decision{}, err
				} else if oj == nil || oj.State != fsm.JobCancelled {
					all = false
				}
			}
			if all {
				more, err := c.Config.closeBatch(v, now, b, CloseCancelled, "every job cancelled")
				if err != nil {
					return engine.Decision{}, err
				}
				emits = append(emits, more...)
			}
		}
	}
	return engine.Decision{Outcome: OutcomeCancelled, Emits: emits}, nil
}

func jobStream(id string) events.StreamID { return events.StreamID{Kind: events.KindJob, ID: id} }

func job(v engine.View, id string) (*aggregate.Job, error) {
	return Existing(v, engine.Job, "job", id)
}

// Existing returns the aggregate named id, read with its typed getter
// (engine.Job, ...): EINVAL for a bad id, ENOENT when there is none.
func Existing[T any](v engine.View, get func(engine.Reader, string) (*T, error), what, id string) (*T, error) {
	if err := CheckID(what+" id", id); err != nil {
		return nil, err
	}
	t, err := get(v, id)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, errs.New(errs.ENOENT, "no %s %s", what, id)
	}
	return t, nil
}

func runningJob(v engine.View, id, verb string) (*aggregate.Job, error) {
	j, err := job(v, id)
	if err != nil {
		return nil, err
	}
	if j.State != fsm.JobRunning {
		return nil, errs.New(errs.ESTATE, "job %s is %s; cannot %s it", id, j.State, verb)
	}
	return j, nil
}

func CheckID(what, s string) error {
	if s == "" {
		return errs.New(errs.EINVAL, "%s is empty", what)
	}
	if len(s) > MaxIDLen {
		return errs.New(errs.EINVAL, "%s is longer than %d bytes", what, MaxIDLen)
	}
	if !utf8.ValidString(s) {
		return errs.New(errs.EINVAL, "%s is not valid UTF-8", what)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return errs.New(errs.EINVAL, "%s contains a control character", what)
		}
	}
	if strings.TrimSpace(s) != s {
		return errs.New(errs.EINVAL, "%s has leading or trailing space", what)
	}
	return nil
}

func CheckText(what, s string, required bool) error {
	if required && strings.TrimSpace(s) == "" {
		return errs.New(errs.EINVAL, "%s is empty", what)
	}
	if len(s) > maxSummaryLen {
		return errs.New(errs.EINVAL, "%s is longer than %d bytes", what, maxSummaryLen)
	}
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return errs.New(errs.EINVAL, "%s is not valid UTF-8 text", what)
	}
	return nil
}

// PinArtifact sets an operator pin: the artifact is kept at least until
// the pin, on top of its minimum retention and post-close TTL.
type PinArtifact struct {
	Config     DeliveryConfig
	ArtifactID string
	Until      time.Time     // an absolute end, or
	For        time.Duration // a span from the decision time
}

// Decide implements engine.Decider.
func (c PinArtifact) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	a, err := artifactNamed(v, c.ArtifactID)
	if err != nil {
		return engine.Decision{}, err
	}
	if a.State != fsm.ArtifactStored {
		return engine.Decision{}, errs.New(errs.ESTATE, "artifact %s is %s; its files are gone", c.ArtifactID, a.State)
	}
	if c.For > 0 {
		c.Until = now.Add(c.For)
	}
	if !c.Until.After(now) {
		return engine.Decision{}, errs.New(errs.EINVAL, "the pin must end in the future")
	}
	if a.OperatorPinUntil.Equal(c.Until) {
		return engine.Decision{Outcome: OutcomeAlreadyPinned}, nil
	}
	eligible := a.MinRetentionUntil
	if !a.LastBatchClosedAt.IsZero() {
		eligible = Latest(eligible, a.LastBatchClosedAt.Add(c.Config.PostCloseTTL))
	}
	eligible = Latest(eligible, c.Until)
	return engine.Decision{Outcome: OutcomePinned, Emits: []engine.Emit{{Stream: events.StreamID{Kind: events.KindArtifact, ID: a.ID},
		Payload: &events.ArtifactPinned{PinUntil: c.Until, GCEligibleAt: eligible}}}}, nil
}

// artifactNamed is the artifact an operator command names, checked: a
// malformed id is EINVAL, an unknown one ENOENT.
func artifactNamed(v engine.View, id string) (*aggregate.Artifact, error) {
	if err := CheckID("artifact id", id); err != nil {
		return nil, err
	}
	a, err := engine.Artifact(v, id)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, errs.New(errs.ENOENT, "no artifact %s", id)
	}
	return a, nil
}
