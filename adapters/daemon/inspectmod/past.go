// Package inspectmod is the daemon's reading side for operators and
// auditors: jobs and batches as they stand now or stood at a past moment
// (spec/cli.md, "History"), their stories, and the live view of `cbth
// watch`. Everything here only reads the log; a bad moment is EINVAL
// and appends nothing.
package inspectmod

import (
	"context"
	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/engine/command"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Module is the reading side.
type Module struct {
	daemon.Base
	h *daemon.Host
}

// New returns the reading side's module.
func New() *Module { return &Module{} }

// Name names the module.
func (m *Module) Name() string { return "inspect" }

// Start takes the host's services.
func (m *Module) Start(_ context.Context, h *daemon.Host) error {
	m.h = h
	return nil
}

// Ops registers the reading operations.
func (m *Module) Ops(t api.Table) {
	api.Handle(t, api.JobQuery, func(_ context.Context, a api.JobArgs) (v query.JobView, err error) {
		if seq, ok, err := m.past(a.PastArgs); err != nil || ok {
			if err != nil {
				return v, err
			}
			return m.jobPast(a.JobID, seq)
		}
		err = m.h.Eng.Read(func(s engine.Snapshot) error {
			if v, err = query.Job(s, a.JobID); errs.CodeOf(err) == errs.ENOENT {
				err = query.NotA(s, events.KindJob, a.JobID)
			}
			return err
		})
		return v, err
	})
	api.Handle(t, api.JobList, func(_ context.Context, a api.JobListArgs) (p query.JobPage, err error) {
		err = m.h.Eng.Read(func(s engine.Snapshot) error {
			p, err = query.Jobs(s, query.JobFilter{ThreadID: a.SourceThreadID, State: fsm.JobState(a.Status), After: a.After, Limit: a.Limit})
			return err
		})
		return p, err
	})

	api.Handle(t, api.BatchInspectHead, func(ctx context.Context, a api.ThreadArgs) (query.BatchInspection, error) {
		if a.SourceThreadID == "" {
			return query.BatchInspection{}, errs.New(errs.EINVAL, "source thread id is empty")
		}
		if seq, ok, err := m.past(a.PastArgs); err != nil || ok {
			if err != nil {
				return query.BatchInspection{}, err
			}
			head, err := m.headPast(a.SourceThreadID, seq)
			if err != nil {
				return query.BatchInspection{}, err
			}
			return m.inspectPast(head, seq)
		}
		var head string
		_ = m.h.Eng.Read(func(s engine.Snapshot) error { head = query.HeadBatchID(s, a.SourceThreadID); return nil })
		if head == "" {
			return query.BatchInspection{}, errs.New(errs.ENOENT, "thread %s has no open batch", a.SourceThreadID)
		}
		return m.h.Inspect(ctx, head)
	})
	api.Handle(t, api.BatchInspect, func(ctx context.Context, a api.BatchArgs) (query.BatchInspection, error) {
		if seq, ok, err := m.past(a.PastArgs); err != nil || ok {
			if err != nil {
				return query.BatchInspection{}, err
			}
			return m.inspectPast(a.BatchID, seq)
		}
		in, err := m.h.Inspect(ctx, a.BatchID)
		if err != nil {
			return in, err
		}
		in.RecoveryLeases, err = m.validLeases(in.Batch.ArtifactIDs)
		return in, err
	})
	api.Handle(t, api.BatchList, func(_ context.Context, a api.BatchListArgs) (p query.BatchPage, err error) {
		err = m.h.Eng.Read(func(s engine.Snapshot) error {
			p, err = query.Batches(s, query.BatchFilter{ThreadID: a.SourceThreadID, State: a.State, After: a.After, Limit: a.Limit})
			return err
		})
		return p, err
	})
	api.Handle(t, api.History, m.history)
	api.Handle(t, api.WatchNext, m.watchNext)
	api.Handle(t, api.ThreadHistory, func(_ context.Context, a api.ThreadHistoryArgs) (p query.ThreadHistoryPage, err error) {
		err = m.h.Eng.Read(func(s engine.Snapshot) error {
			p, err = query.ThreadHistory(s, a.SourceThreadID, a.After, a.Limit)
			return err
		})
		if err == nil && a.After == "" && p.Trust == nil {
			p.Trust = &query.ThreadTrustView{Trust: m.h.Config.CLI.HomeTrust(), Source: "home"}
		}
		return p, err
	})
}

// past resolves a moment to the seq of the last event at or before it;
// ok is false when none was asked for (the present).
func (m *Module) past(a api.PastArgs) (seq uint64, ok bool, err error) {
	head := m.h.Eng.Head()
	switch {
	case a.AsOfSeq > 0 && a.AsOf != nil:
		return 0, false, errs.New(errs.EINVAL, "give --as-of or --seq, not both")
	case a.AsOfSeq > 0:
		if a.AsOfSeq > head {
			return 0, false, errs.New(errs.EINVAL, "--seq %d is past the head of the log (seq %d)", a.AsOfSeq, head)
		}
		return a.AsOfSeq, true, nil
	case a.AsOf != nil:
		at, now := *a.AsOf, m.h.Clock.Now()
		if at.After(now) {
			return 0, false, errs.New(errs.EINVAL, "--as-of %s is in the future (the daemon's clock reads %s)", at.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
		}
		seq, err := m.h.Eng.SeqAt(at)
		if err != nil {
			return 0, false, err
		}
		if seq == 0 {
			first := "the log is empty"
			if env, err := m.h.Eng.EventAt(1); err == nil {
				first = "the first event was recorded at " + env.RecordedAt.Format(time.RFC3339Nano)
			}
			return 0, false, errs.New(errs.EINVAL, "--as-of %s is before the first event (%s)", at.Format(time.RFC3339Nano), first)
		}
		return seq, true, nil
	}
	return 0, false, nil
}

// inspectPast is a batch's inspection as of seq: its state, attempts,
// jobs and artifacts folded from their own events up to seq, and the
// delivery gate the core would have given then.
func (m *Module) inspectPast(id string, seq uint64) (in query.BatchInspection, err error) {
	err = m.h.Eng.ReadAsOf(seq, func(r *engine.AsOf) error {
		if in, err = query.Inspect(r, id); err != nil {
			return m.notYet(err, events.KindBatch, id, seq)
		}
		if in.Batch.State != fsm.BatchClosed {
			in.Gate, err = m.pastGate(r, in.Batch.SourceThreadID)
		}
		return err
	})
	in.AsOfSeq = seq
	return in, err
}

// notYet rewrites "no such batch" for an aggregate that exists now but did
// not yet at seq.
func (m *Module) notYet(err error, k events.Kind, id string, seq uint64) error {
	if errs.CodeOf(err) != errs.ENOENT {
		return err
	}
	var now error
	_ = m.h.Eng.Read(func(s engine.Snapshot) error {
		st, _ := s.State(k, id)
		if st == nil {
			now = query.NotA(s, k, id)
		}
		return nil
	})
	if now != nil {
		return now
	}
	return errs.New(errs.ENOENT, "%s %s did not exist yet at seq %d", k, id, seq)
}

// pastGate is the core's delivery gate at the time of the event at seq:
// the thread's head and live attempt then, as Eligible reads them. A
// target's own gate asks it live, so it is not replayed.
func (m *Module) pastGate(r *engine.AsOf, thread string) (string, error) {
	env, err := m.h.Eng.EventAt(r.Until())
	if err != nil {
		return "", err
	}
	el, err := m.h.DeliveryConfig().Eligible(r, env.RecordedAt, thread)
	if err != nil {
		return "", err
	}
	if !el.OK {
		if !el.Wake.IsZero() {
			return el.Reason + " until " + el.Wake.Format(time.RFC3339), nil
		}
		return el.Reason, nil
	}
	return "eligible (the core's gate; the target's own is not replayed)", nil
}

// headPast is the batch at the head of a thread's FIFO as of seq.
func (m *Module) headPast(thread string, seq uint64) (head string, err error) {
	err = m.h.Eng.ReadAsOf(seq, func(r *engine.AsOf) error {
		head = query.HeadBatchID(r, thread)
		return nil
	})
	if err == nil && head == "" {
		err = errs.New(errs.ENOENT, "thread %s had no open batch at seq %d", thread, seq)
	}
	return head, err
}

// jobPast is a job as of seq.
func (m *Module) jobPast(id string, seq uint64) (v query.JobView, err error) {
	err = m.h.Eng.ReadAsOf(seq, func(r *engine.AsOf) error {
		if v, err = query.Job(r, id); err != nil {
			return m.notYet(err, events.KindJob, id, seq)
		}
		return nil
	})
	v.AsOfSeq = seq
	return v, err
}

// history tells the story of a batch (its attempts, jobs and artifacts
// with it), a job (with its artifact and task) or a thread's head batch,
// up to a past moment when one is given.
func (m *Module) history(_ context.Context, a api.HistoryArgs) (query.HistoryPage, error) {
	seq, _, err := m.past(a.PastArgs)
	if err != nil {
		return query.HistoryPage{}, err
	}
	batch := a.BatchID
	if a.SourceThreadID != "" {
		if seq > 0 {
			batch, err = m.headPast(a.SourceThreadID, seq)
		} else {
			_ = m.h.Eng.Read(func(s engine.Snapshot) error { batch = query.HeadBatchID(s, a.SourceThreadID); return nil })
			if batch == "" {
				err = errs.New(errs.ENOENT, "thread %s has no open batch", a.SourceThreadID)
			}
		}
		if err != nil {
			return query.HistoryPage{}, err
		}
	}
	var streams []events.StreamID
	err = m.h.Eng.Read(func(s engine.Snapshot) error {
		switch {
		case batch != "":
			streams, err = query.BatchStreams(s, batch)
		case a.JobID != "":
			streams, err = query.JobStreams(s, a.JobID)
		default:
			err = errs.New(errs.EINVAL, "name a batch, a job or a thread")
		}
		return err
	})
	if err != nil {
		return query.HistoryPage{}, err
	}
	if seq > 0 {
		// The aggregate must have existed then.
		first := 0
		_ = m.h.Eng.ReadStreamUntil(streams[0], seq, func(events.Envelope) error { first++; return engine.ErrStop })
		if first == 0 {
			return query.HistoryPage{}, errs.New(errs.ENOENT, "%s did not exist yet at seq %d", streams[0], seq)
		}
	}
	return query.History(m.h.Eng, streams, seq, a.After, a.Limit)
}

// validLeases lists the recovery leases of the artifacts ids still valid
// now: what batch inspect shows. A read: it issues nothing.
func (m *Module) validLeases(ids []string) (out []query.RecoveryLeaseView, err error) {
	now := m.h.Clock.Now()
	err = m.h.Eng.Read(func(s engine.Snapshot) error {
		for _, id := range ids {
			a, err := engine.Artifact(s, id)
			if err != nil {
				return err
			}
			if a != nil && command.LeaseValid(a, a.RecoveryLeaseID, now) == "" {
				out = append(out, query.RecoveryLeaseView{ArtifactID: id, LeaseID: a.RecoveryLeaseID, Deadline: a.RecoveryLeaseDeadline})
			}
		}
		return nil
	})
	return out, err
}
