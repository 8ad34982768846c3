package daemon

import (
	"context"
	"sort"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/errs"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/engine/projections"
	"github.com/cbth-dev/cbth/events"
)

// CloseHeadArgs are batch.close_head's arguments.
type CloseHeadArgs struct {
	ThreadID string `json:"source_thread_id"`
	Reason   string `json:"reason"`
	BatchID  string `json:"batch_id,omitempty"`
}

// ThreadArgs name a thread.
type ThreadArgs struct {
	ThreadID string `json:"source_thread_id"`
}

// BatchArgs name a batch.
type BatchArgs struct {
	BatchID string `json:"batch_id"`
}

// BatchListArgs filter batch.list.
type BatchListArgs struct {
	ThreadID string `json:"source_thread_id,omitempty"`
	State    string `json:"state,omitempty"`
}

// WaitArgs are wait's arguments: the jobs (or every job of a thread) to
// wait for, bounded by TimeoutMS (0 waits until done).
type WaitArgs struct {
	JobIDs    []string `json:"job_ids,omitempty"`
	ThreadID  string   `json:"source_thread_id,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`
}

// DebugSetArgs set the debug target's behaviour for a thread.
type DebugSetArgs struct {
	ThreadID  string `json:"source_thread_id"`
	Behaviour string `json:"behaviour"`
}

// AdvanceArgs move a manual clock.
type AdvanceArgs struct {
	By string `json:"by"`
}

// CloseResult is batch.close_head's result.
type CloseResult struct {
	Outcome string           `json:"outcome"`
	BatchID string           `json:"batch_id,omitempty"`
	Batch   *aggregate.Batch `json:"batch,omitempty"`
}

// BatchInspection is what batch.inspect and batch.inspect_head return: the
// batch with every field, its attempts (newest first) and its artifacts.
type BatchInspection struct {
	Batch       *aggregate.Batch         `json:"batch"`
	HeadAttempt *aggregate.Attempt       `json:"head_attempt"`
	Attempts    []*aggregate.Attempt     `json:"attempts"`
	Artifacts   []*ArtifactRef           `json:"artifacts"`
	Jobs        []JobView                `json:"jobs"`
	Gate        string                   `json:"delivery_gate,omitempty"`
	Recovery    *events.RecoveryEnvelope `json:"boundary_recovery_envelope"`
}

// WaitJob is one job's line in a wait result.
type WaitJob struct {
	JobID       string `json:"job_id"`
	Status      string `json:"status"`
	BatchID     string `json:"batch_id,omitempty"`
	CloseReason string `json:"close_reason,omitempty"`
	Done        bool   `json:"done"`
	Delivered   bool   `json:"delivered"`
}

// WaitResult is wait's result.
type WaitResult struct {
	Done bool      `json:"done"`
	OK   bool      `json:"ok"`
	Jobs []WaitJob `json:"jobs"`
}

func (d *Daemon) closeHead(ctx context.Context, a CloseHeadArgs) (CloseResult, error) {
	res, err := d.eng.Execute(ctx, engine.Meta{Actor: events.ActorOperator, CorrelationID: "close-head:" + a.ThreadID},
		command.CloseHead{Config: d.deliveryConfig(), ThreadID: a.ThreadID, Reason: a.Reason, BatchID: a.BatchID})
	if err != nil {
		return CloseResult{}, err
	}
	out := CloseResult{Outcome: res.Outcome}
	if id, ok := res.Value.(string); ok && id != "" {
		out.BatchID = id
		if in, err := d.inspect(id); err == nil {
			out.Batch = in.Batch
		}
	}
	return out, nil
}

func (d *Daemon) inspectHead(thread string) (BatchInspection, error) {
	if thread == "" {
		return BatchInspection{}, errs.New(errs.EINVAL, "source thread id is empty")
	}
	var head string
	err := d.eng.View(func(v *projections.Tx) error {
		for _, r := range v.Scan(index.ThreadOpen, index.ThreadPrefix(thread)) {
			if _, ok := index.ThreadOpenSeq(r.Key, thread); ok {
				head = r.ID
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return BatchInspection{}, err
	}
	if head == "" {
		return BatchInspection{}, errs.New(errs.ENOENT, "thread %s has no open batch", thread)
	}
	return d.inspect(head)
}

func (d *Daemon) inspect(id string) (BatchInspection, error) {
	if id == "" {
		return BatchInspection{}, errs.New(errs.EINVAL, "batch id is empty")
	}
	var in BatchInspection
	now := d.opt.Clock.Now()
	err := d.eng.View(func(v *projections.Tx) error {
		s, err := v.State(events.KindBatch, id)
		if err != nil {
			return err
		}
		b, ok := s.(*aggregate.Batch)
		if !ok {
			return errs.New(errs.ENOENT, "no batch %s", id)
		}
		in.Batch, in.Recovery = b, b.BoundaryRecoveryEnvelope
		in.Attempts, in.Artifacts, in.Jobs = []*aggregate.Attempt{}, []*ArtifactRef{}, []JobView{}
		for _, r := range v.Lookup(index.BatchAttempts, id) {
			as, err := v.State(events.KindAttempt, r.ID)
			if err != nil {
				return err
			}
			if a, ok := as.(*aggregate.Attempt); ok {
				in.Attempts = append(in.Attempts, a)
				if a.ID == b.HeadAttemptID {
					in.HeadAttempt = a
				}
			}
		}
		sort.Slice(in.Attempts, func(i, j int) bool { return in.Attempts[i].Generation > in.Attempts[j].Generation })
		for _, aid := range b.ArtifactIDs {
			as, err := v.State(events.KindArtifact, aid)
			if err != nil {
				return err
			}
			if a, ok := as.(*aggregate.Artifact); ok {
				in.Artifacts = append(in.Artifacts, viewArtifact(a))
			}
		}
		for _, jid := range b.JobIDs {
			js, err := v.State(events.KindJob, jid)
			if err != nil {
				return err
			}
			if j, ok := js.(*aggregate.Job); ok {
				in.Jobs = append(in.Jobs, viewJob(j, nil))
			}
		}
		return nil
	})
	if err != nil {
		return in, err
	}
	if in.Batch.Open() {
		in.Gate = d.gate(now, in.Batch.SourceThreadID)
	}
	return in, nil
}

// gate explains, for people, whether the thread's head may get a fresh
// delivery now and if not why.
func (d *Daemon) gate(now time.Time, thread string) string {
	var el command.Eligibility
	_ = d.eng.View(func(v *projections.Tx) error {
		var err error
		el, err = d.deliveryConfig().Eligible(engine.ReadView(v), now, thread)
		return err
	})
	if el.OK {
		return "eligible"
	}
	if !el.Wake.IsZero() {
		return el.Reason + " until " + el.Wake.Format(time.RFC3339)
	}
	return el.Reason
}

func (d *Daemon) listBatches(a BatchListArgs) ([]*aggregate.Batch, error) {
	out := []*aggregate.Batch{}
	err := d.eng.View(func(v *projections.Tx) error {
		return v.ForEach(events.KindBatch, func(s aggregate.State) error {
			b := s.(*aggregate.Batch)
			if (a.ThreadID == "" || b.SourceThreadID == a.ThreadID) && (a.State == "" || b.Status == a.State ||
				(a.State == "open" && b.Open()) || (a.State == "parked" && b.Parked())) {
				out = append(out, b)
			}
			return nil
		})
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].OpenedSeq < out[j].OpenedSeq })
	return out, err
}

// wait blocks until every named job is done: failed, cancelled, or ready
// with its batch closed. It wakes on each commit rather than polling.
func (d *Daemon) wait(ctx context.Context, a WaitArgs) (WaitResult, error) {
	if len(a.JobIDs) == 0 && a.ThreadID == "" {
		return WaitResult{}, errs.New(errs.EINVAL, "name jobs or a thread to wait for")
	}
	sub := d.eng.Subscribe()
	defer sub.Close()
	var deadline <-chan time.Time
	if a.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(a.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		deadline = t.C
	}
	for {
		res, err := d.waitState(a)
		if err != nil || res.Done {
			return res, err
		}
		select {
		case <-sub.C():
		case <-deadline:
			return res, errs.New(errs.ETIMEDOUT, "timed out waiting for %d jobs", len(res.Jobs))
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
}

func (d *Daemon) waitState(a WaitArgs) (WaitResult, error) {
	res := WaitResult{Done: true, OK: true, Jobs: []WaitJob{}}
	err := d.eng.View(func(v *projections.Tx) error {
		var jobs []*aggregate.Job
		for _, id := range a.JobIDs {
			s, err := v.State(events.KindJob, id)
			if err != nil {
				return err
			}
			j, ok := s.(*aggregate.Job)
			if !ok {
				return errs.New(errs.ENOENT, "no job %s", id)
			}
			jobs = append(jobs, j)
		}
		if a.ThreadID != "" {
			if err := v.ForEach(events.KindJob, func(s aggregate.State) error {
				if j := s.(*aggregate.Job); j.SourceThreadID == a.ThreadID {
					jobs = append(jobs, j)
				}
				return nil
			}); err != nil {
				return err
			}
		}
		for _, j := range jobs {
			w := WaitJob{JobID: j.ID, Status: j.Status, BatchID: j.BatchID}
			switch {
			case j.Status == "failed" || j.Status == "cancelled":
				w.Done = true
			case j.BatchID != "":
				bs, err := v.State(events.KindBatch, j.BatchID)
				if err != nil {
					return err
				}
				if b, ok := bs.(*aggregate.Batch); ok && !b.Open() {
					w.Done, w.CloseReason = true, b.CloseReason
					w.Delivered = b.CloseReason == command.CloseDelivered || b.CloseReason == command.CloseHandoffRecorded
				}
			}
			res.Done = res.Done && w.Done
			res.OK = res.OK && w.Delivered
			res.Jobs = append(res.Jobs, w)
		}
		return nil
	})
	if !res.Done {
		res.OK = false
	}
	return res, err
}

// advance moves a manual clock, then sweeps and schedules with the new
// time: the only way time passes in a deterministic run.
func (d *Daemon) advance(ctx context.Context, a AdvanceArgs) (map[string]any, error) {
	mc, ok := d.opt.Clock.(*engine.ManualClock)
	if !ok {
		return nil, errs.New(errs.EINVAL, "the daemon runs on the system clock; start it with CBTH_TEST_CLOCK to move time by hand")
	}
	by, err := time.ParseDuration(a.By)
	if err != nil || by < 0 {
		return nil, errs.New(errs.EINVAL, "bad duration %q", a.By)
	}
	mc.Advance(by)
	if err := d.sweep(ctx, "clock"); err != nil {
		return nil, err
	}
	d.schedule(ctx)
	return map[string]any{"now": mc.Now()}, nil
}
