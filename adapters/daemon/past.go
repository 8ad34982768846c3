package daemon

import (
	"context"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The operator's and auditor's time machine: a batch, a job or a thread's
// head as it stood at a past moment, and their stories (spec/cli.md,
// "History"). Everything here only reads; a bad moment is EINVAL and
// appends nothing.

// pastOps registers the history operations.
func (d *Daemon) pastOps(t api.Table) {
	api.Handle(t, api.History, d.history)
	api.Handle(t, api.WatchNext, d.watchNext)
	api.Handle(t, api.ThreadHistory, func(_ context.Context, a api.ThreadHistoryArgs) (p query.ThreadHistoryPage, err error) {
		err = d.eng.Read(func(s engine.Snapshot) error {
			p, err = query.ThreadHistory(s, a.SourceThreadID, a.After, a.Limit)
			return err
		})
		return p, err
	})
}

// past resolves a moment to the seq of the last event at or before it;
// ok is false when none was asked for (the present).
func (d *Daemon) past(a api.PastArgs) (seq uint64, ok bool, err error) {
	head := d.eng.Head()
	switch {
	case a.AsOfSeq > 0 && a.AsOf != nil:
		return 0, false, errs.New(errs.EINVAL, "give --as-of or --seq, not both")
	case a.AsOfSeq > 0:
		if a.AsOfSeq > head {
			return 0, false, errs.New(errs.EINVAL, "--seq %d is past the head of the log (seq %d)", a.AsOfSeq, head)
		}
		return a.AsOfSeq, true, nil
	case a.AsOf != nil:
		at, now := *a.AsOf, d.opt.Clock.Now()
		if at.After(now) {
			return 0, false, errs.New(errs.EINVAL, "--as-of %s is in the future (the daemon's clock reads %s)", at.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
		}
		seq, err := d.eng.SeqAt(at)
		if err != nil {
			return 0, false, err
		}
		if seq == 0 {
			first := "the log is empty"
			if env, err := d.eng.EventAt(1); err == nil {
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
func (d *Daemon) inspectPast(id string, seq uint64) (in query.BatchInspection, err error) {
	err = d.eng.ReadAsOf(seq, func(r *engine.AsOf) error {
		if in, err = query.Inspect(r, id); err != nil {
			return d.notYet(err, events.KindBatch, id, seq)
		}
		if in.Batch.State != fsm.BatchClosed {
			in.Gate, err = d.pastGate(r, in.Batch.SourceThreadID)
		}
		return err
	})
	in.AsOfSeq = seq
	return in, err
}

// notYet rewrites "no such batch" for an aggregate that exists now but did
// not yet at seq.
func (d *Daemon) notYet(err error, k events.Kind, id string, seq uint64) error {
	if errs.CodeOf(err) != errs.ENOENT {
		return err
	}
	var now error
	_ = d.eng.Read(func(s engine.Snapshot) error {
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
func (d *Daemon) pastGate(r *engine.AsOf, thread string) (string, error) {
	env, err := d.eng.EventAt(r.Until())
	if err != nil {
		return "", err
	}
	el, err := d.deliveryConfig().Eligible(r, env.RecordedAt, thread)
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
func (d *Daemon) headPast(thread string, seq uint64) (head string, err error) {
	err = d.eng.ReadAsOf(seq, func(r *engine.AsOf) error {
		head = query.HeadBatchID(r, thread)
		return nil
	})
	if err == nil && head == "" {
		err = errs.New(errs.ENOENT, "thread %s had no open batch at seq %d", thread, seq)
	}
	return head, err
}

// jobPast is a job as of seq.
func (d *Daemon) jobPast(id string, seq uint64) (v query.JobView, err error) {
	err = d.eng.ReadAsOf(seq, func(r *engine.AsOf) error {
		if v, err = query.Job(r, id); err != nil {
			return d.notYet(err, events.KindJob, id, seq)
		}
		return nil
	})
	v.AsOfSeq = seq
	return v, err
}

// history tells the story of a batch (its attempts, jobs and artifacts
// with it), a job (with its artifact and task) or a thread's head batch,
// up to a past moment when one is given.
func (d *Daemon) history(_ context.Context, a api.HistoryArgs) (query.HistoryPage, error) {
	seq, _, err := d.past(a.PastArgs)
	if err != nil {
		return query.HistoryPage{}, err
	}
	batch := a.BatchID
	if a.SourceThreadID != "" {
		if seq > 0 {
			batch, err = d.headPast(a.SourceThreadID, seq)
		} else {
			_ = d.eng.Read(func(s engine.Snapshot) error { batch = query.HeadBatchID(s, a.SourceThreadID); return nil })
			if batch == "" {
				err = errs.New(errs.ENOENT, "thread %s has no open batch", a.SourceThreadID)
			}
		}
		if err != nil {
			return query.HistoryPage{}, err
		}
	}
	var streams []events.StreamID
	err = d.eng.Read(func(s engine.Snapshot) error {
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
		_ = d.eng.ReadStreamUntil(streams[0], seq, func(events.Envelope) error { first++; return engine.ErrStop })
		if first == 0 {
			return query.HistoryPage{}, errs.New(errs.ENOENT, "%s did not exist yet at seq %d", streams[0], seq)
		}
	}
	return query.History(d.eng, streams, seq, a.After, a.Limit)
}
