package daemon

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/task"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
)

// ops is the daemon's side of the operation table.
func (d *Daemon) ops() api.Table {
	t := api.Table{}
	api.Handle(t, api.Ping, func(context.Context, api.Empty) (api.PingReply, error) {
		return api.PingReply{PID: os.Getpid(), Version: d.opt.Version, Protocol: ipc.Proto}, nil
	})
	api.Handle(t, api.DaemonStatus, func(context.Context, api.Empty) (api.Status, error) { return d.status(), nil })
	api.Handle(t, api.DaemonStop, func(context.Context, api.Empty) (api.Outcome, error) {
		d.opt.Log.Info("stop requested")
		d.stop()
		return api.Outcome{Outcome: "stopping"}, nil
	})

	api.Handle(t, api.JobSubmit, d.submit)
	api.Handle(t, api.JobComplete, d.complete)
	api.Handle(t, api.JobFail, func(ctx context.Context, a api.JobArgs) (api.TransitionReply, error) {
		return d.transition(ctx, a.JobID, command.FailJob{JobID: a.JobID, Reason: a.Reason})
	})
	api.Handle(t, api.JobCancel, func(ctx context.Context, a api.JobArgs) (api.TransitionReply, error) {
		return d.cancel(ctx, d.meta(""), a.JobID, func(c command.CancelJob) engine.Decider { return c }, a.Reason)
	})
	api.Handle(t, api.BatchCloseHead, d.closeHead)
	api.Handle(t, api.BatchSupersede, d.supersede)
	api.Handle(t, api.Wait, d.wait)

	api.Handle(t, api.ArtifactPin, func(ctx context.Context, a api.PinArgs) (api.PinReply, error) {
		cmd := command.PinArtifact{Config: d.deliveryConfig(), ArtifactID: a.ArtifactID, Until: a.Until}
		if a.For != "" {
			var err error
			if cmd.For, err = time.ParseDuration(a.For); err != nil {
				return api.PinReply{}, errs.New(errs.EINVAL, "bad duration %q", a.For)
			}
		}
		res, err := d.eng.Execute(ctx, engine.Meta{Actor: events.ActorOperator, CorrelationID: "pin:" + a.ArtifactID}, cmd)
		if err != nil {
			return api.PinReply{}, err
		}
		return api.PinReply{Outcome: res.Outcome, ArtifactID: a.ArtifactID}, nil
	})

	api.Handle(t, api.EventsVerify, func(ctx context.Context, _ api.Empty) (engine.Report, error) { return d.eng.Verify(ctx) })
	api.Handle(t, api.EventsRead, d.readEvents)

	api.Handle(t, api.DebugTargetSet, func(ctx context.Context, a api.DebugSetArgs) (api.DebugSetReply, error) {
		if err := d.debug.SetBehaviour(a.SourceThreadID, a.Behaviour); err != nil {
			return api.DebugSetReply{}, err
		}
		d.poke(ctx)
		return api.DebugSetReply{Outcome: "set", SourceThreadID: a.SourceThreadID, Behaviour: a.Behaviour}, nil
	})
	api.Handle(t, api.DebugTurn, d.debugTurn)
	api.Handle(t, api.DebugClock, d.advance)

	api.Handle(t, api.DaemonHandover, d.handover)
	for _, m := range d.opt.Modules {
		m.Ops(t)
	}
	return t
}

// handle serves one request through the table. Passive operations (ping,
// status) only look: they neither count as activity nor as work in flight.
func (d *Daemon) handle(ctx context.Context, req *ipc.Request) (any, error) {
	h, ok := d.table[req.Op]
	if !ok {
		return nil, errs.New(errs.EINVAL, "unknown operation %q", req.Op)
	}
	if !h.Passive {
		d.inflight.Add(1)
		defer d.inflight.Add(-1)
		defer d.touch()
	}
	return h.Serve(ctx, req.Args)
}

func (d *Daemon) meta(correlation string) engine.Meta {
	return engine.Meta{Actor: events.ActorCLI, CorrelationID: correlation}
}

func (d *Daemon) submit(ctx context.Context, a api.SubmitArgs) (api.SubmitReply, error) {
	pol, err := command.NormalizePolicy(a.Policy, a.Metadata)
	if err != nil {
		return api.SubmitReply{}, err
	}
	if a.TargetKind == "" {
		if a.TargetKind, err = d.threadTarget(a.SourceThreadID); err != nil {
			return api.SubmitReply{}, err
		}
	}
	if err := api.CheckClientDedupeKey(a.DedupeKey); err != nil {
		return api.SubmitReply{}, err
	}
	cmd := command.SubmitJob{Target: a.TargetKind, ThreadID: a.SourceThreadID, TaskKind: a.TaskKind, Summary: a.TaskSummary,
		Metadata: a.Metadata, DedupeKey: a.DedupeKey, Policy: pol, Timeout: d.opt.Config.JobTimeout.Duration}
	m := d.meta("")
	if a.DedupeKey != "" {
		// The dedupe key doubles as the idempotency key: a retried submit
		// returns the original job without deciding again.
		m.CommandID = "job.submit/" + a.DedupeKey
	}
	j, dedup, err := d.submitted(engine.Exec[string](ctx, d.eng, m, cmd))
	if err != nil {
		return api.SubmitReply{}, err
	}
	return api.SubmitReply{JobID: j.JobID, State: j.State, AcceptedAt: j.CreatedAt, Deduplicated: dedup}, nil
}

// submitted is the job a submission made (its id and result), or the one
// an earlier submission with its key made (deduplicated).
func (d *Daemon) submitted(id string, res engine.Result, err error) (query.JobView, bool, error) {
	if err != nil {
		return query.JobView{}, false, err
	}
	if res.Replayed && len(res.Events) > 0 {
		id = res.Events[0].Stream.ID
	}
	j, err := d.job(id)
	return j, res.Replayed || res.Outcome == command.OutcomeDeduplicated, err
}

// jobsEnded tells the modules of jobs that ended other than by their own
// report (Module.JobWatcher).
func (d *Daemon) jobsEnded(ctx context.Context, jobs []string, reason string) {
	if len(jobs) == 0 {
		return
	}
	for _, m := range d.opt.Modules {
		if w, ok := m.(JobWatcher); ok {
			w.JobsEnded(ctx, jobs, reason)
		}
	}
}

// threadTarget is where a result for thread goes when the submitter did
// not say: a thread bound to a Desktop heartbeat is a Desktop thread;
// any other is a Codex CLI thread.
func (d *Daemon) threadTarget(thread string) (command.Target, error) {
	var bound bool
	err := d.eng.Read(func(s engine.Snapshot) error {
		b, err := command.BindingOf(s, thread)
		bound = b != nil && b.ID != "" && b.State != fsm.BindingUnbound
		return err
	})
	if err != nil {
		return "", err
	}
	if bound {
		return command.TargetDesktop, nil
	}
	return command.TargetCodexCLI, nil
}

func (d *Daemon) job(id string) (v query.JobView, err error) {
	err = d.eng.Read(func(s engine.Snapshot) error { v, err = query.Job(s, id); return err })
	return v, err
}

func (d *Daemon) complete(ctx context.Context, a api.CompleteArgs) (api.TransitionReply, error) {
	// Check cheaply first, so a large file is not copied for a job that
	// cannot complete; the command checks again atomically.
	j, err := d.job(a.JobID)
	if err != nil {
		return api.TransitionReply{}, err
	}
	if a.ResultFile != "" && !filepath.IsAbs(a.ResultFile) {
		return api.TransitionReply{}, errs.New(errs.EINVAL, "result file path %q is not absolute", a.ResultFile)
	}
	cmd := command.CompleteJob{Config: d.deliveryConfig(), JobID: a.JobID, Summary: a.ResultSummary}
	if j.State != fsm.JobRunning {
		// Only a repeat of the completion that committed can succeed
		// now, and it stores nothing: hash the file, do not copy it.
		if a.ResultFile != "" {
			if cmd.ResultSHA256, err = d.artifacts.Hash(a.ResultFile); err != nil {
				return api.TransitionReply{}, err
			}
		}
		return d.transition(ctx, a.JobID, cmd)
	}
	defer d.poke(ctx)
	if a.ResultFile == "" {
		return d.transition(ctx, a.JobID, cmd)
	}
	ing, err := d.artifacts.Ingest(a.ResultFile, a.JobID, d.opt.Clock.Now())
	if err != nil {
		return api.TransitionReply{}, err
	}
	cmd.Artifact = &ing
	rep, err := d.transition(ctx, a.JobID, cmd)
	if err != nil || rep.Outcome == command.OutcomeAlreadyCompleted {
		// Nothing recorded it: take the copy back out.
		_ = d.artifacts.Remove(ing.ArtifactID)
	}
	return rep, err
}

func (d *Daemon) transition(ctx context.Context, id string, cmd engine.Decider) (api.TransitionReply, error) {
	return d.transitionAs(ctx, d.meta(""), id, cmd)
}

func (d *Daemon) transitionAs(ctx context.Context, m engine.Meta, id string, cmd engine.Decider) (api.TransitionReply, error) {
	res, err := d.eng.Execute(ctx, m, cmd)
	if err != nil {
		return api.TransitionReply{}, err
	}
	j, err := d.job(id)
	if err != nil {
		return api.TransitionReply{}, err
	}
	return api.TransitionReply{JobID: id, State: j.State, Outcome: res.Outcome, Job: j, Artifact: j.Artifact}, nil
}

// cancel cancels a job, through wrap (which may record more in the same
// append), and tells the modules (the task that runs for it stops).
func (d *Daemon) cancel(ctx context.Context, m engine.Meta, id string, wrap func(command.CancelJob) engine.Decider, reason string) (api.TransitionReply, error) {
	defer d.poke(ctx)
	rep, err := d.transitionAs(ctx, m, id, wrap(command.CancelJob{Config: d.deliveryConfig(), JobID: id, Reason: reason}))
	if err == nil && rep.Outcome == command.OutcomeCancelled {
		d.jobsEnded(ctx, []string{id}, task.StopJobCancelled)
	}
	return rep, err
}

func (d *Daemon) closeHead(ctx context.Context, a api.CloseHeadArgs) (api.CloseHeadReply, error) {
	defer d.poke(ctx)
	val, res, err := engine.Exec[string](ctx, d.eng, engine.Meta{Actor: events.ActorOperator, CorrelationID: "close-head:" + a.SourceThreadID},
		command.CloseHead{Config: d.deliveryConfig(), ThreadID: a.SourceThreadID, Reason: a.Reason, BatchID: a.BatchID})
	if err != nil {
		return api.CloseHeadReply{}, err
	}
	out := api.CloseHeadReply{Outcome: res.Outcome}
	if id := val; id != "" {
		out.BatchID = id
		if in, err := d.inspect(ctx, id); err == nil {
			out.Batch = &in.Batch
		}
	}
	return out, nil
}

func (d *Daemon) supersede(ctx context.Context, a api.SupersedeArgs) (api.SupersedeReply, error) {
	defer d.poke(ctx)
	val, res, err := engine.Exec[string](ctx, d.eng, engine.Meta{Actor: events.ActorOperator, CorrelationID: "supersede:" + a.BatchID},
		command.SupersedeBatch{Config: d.deliveryConfig(), BatchID: a.BatchID, Reason: a.Reason})
	if errs.CodeOf(err) == errs.ENOENT {
		_ = d.eng.Read(func(s engine.Snapshot) error { err = query.NotA(s, events.KindBatch, a.BatchID); return nil })
	}
	if err != nil {
		return api.SupersedeReply{}, err
	}
	out := api.SupersedeReply{Outcome: res.Outcome, BatchID: a.BatchID}
	out.SupersededBy = val
	if in, err := d.inspect(ctx, a.BatchID); err == nil {
		out.Batch = &in.Batch
	}
	return out, nil
}

// inspect returns a batch's inspection with, while it is open, its
// delivery gate: the core's eligibility, then its target's own gate.
func (d *Daemon) inspect(ctx context.Context, id string) (in query.BatchInspection, err error) {
	err = d.eng.Read(func(s engine.Snapshot) error {
		if in, err = query.Inspect(s, id); errs.CodeOf(err) == errs.ENOENT {
			err = query.NotA(s, events.KindBatch, id)
		}
		if err == nil && in.Batch.TargetKind == command.TargetCodexCLI {
			if in.ThreadTrust, err = query.ThreadTrust(s, in.Batch.SourceThreadID); err == nil && in.ThreadTrust == nil {
				in.ThreadTrust = &query.ThreadTrustView{Trust: d.opt.Config.CLI.HomeTrust(), Source: "home"}
			}
		}
		return err
	})
	if err != nil || in.Batch.State == fsm.BatchClosed {
		return in, err
	}
	in.Gate = d.gate(ctx, d.opt.Clock.Now(), in.Batch.SourceThreadID)
	return in, nil
}

// wait blocks until every named job is done: failed, cancelled, or ready
// with its batch closed. It wakes on each commit rather than polling. A
// request with a cursor (after) continues the listing of a wait that
// ended and never blocks.
func (d *Daemon) wait(ctx context.Context, a api.WaitArgs) (query.WaitResult, error) {
	if len(a.JobIDs) == 0 && a.SourceThreadID == "" {
		return query.WaitResult{}, errs.New(errs.EINVAL, "name jobs or a thread to wait for")
	}
	if a.After != "" {
		var res query.WaitResult
		err := d.eng.Read(func(s engine.Snapshot) error {
			var err error
			res, err = query.Wait(s, a.JobIDs, a.SourceThreadID, a.After, a.Limit)
			return err
		})
		return res, err
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
		var res query.WaitResult
		err := d.eng.Read(func(s engine.Snapshot) error {
			var err error
			res, err = query.Wait(s, a.JobIDs, a.SourceThreadID, "", a.Limit)
			return err
		})
		if err != nil || res.Done {
			return res, err
		}
		select {
		case <-sub.C():
		case <-deadline:
			return res, errs.New(errs.ETIMEDOUT, "timed out waiting for %s", plural.Count(len(res.Jobs), "job", "jobs"))
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
}

// maxEventsPage bounds one events.read page by count; query.PageBytes
// bounds it by size.
const maxEventsPage = 256

func (d *Daemon) readEvents(ctx context.Context, a api.ReadArgs) (api.EventsPage, error) {
	if a.WaitMS > 0 && d.eng.Head() < max(a.From, 1) {
		sub := d.eng.Subscribe()
		t := time.NewTimer(time.Duration(a.WaitMS) * time.Millisecond)
		select {
		case <-sub.C():
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		sub.Close()
	}
	if a.Limit <= 0 || a.Limit > maxEventsPage {
		a.Limit = maxEventsPage
	}
	if a.From == 0 {
		a.From = 1
	}
	page := api.EventsPage{Events: []events.Envelope{}, Head: d.eng.Head()}
	size := 0
	err := d.eng.ReadFrom(a.From, func(env events.Envelope) error {
		if a.Stream != "" && env.Stream.String() != a.Stream {
			return nil
		}
		// Measured as the frame encodes it: an envelope's stream id,
		// command id and payload have no fixed size.
		b, err := ipc.Marshal(env)
		if err != nil {
			return errs.Wrap(errs.EINTERNAL, err, "encode event %d", env.Seq)
		}
		if len(page.Events) == a.Limit || (len(page.Events) > 0 && size+len(b)+1 > query.PageBytes) {
			page.Next = env.Seq
			return engine.ErrStop
		}
		size += len(b) + 1
		page.Events = append(page.Events, env)
		return nil
	})
	return page, err
}

// advance moves a manual clock, then sweeps and schedules with the new
// time: the only way time passes in a deterministic run. With NoSweep it
// only moves the clock, the way time passes between a real daemon's
// ticks, so a test can show what the next kick does.
func (d *Daemon) advance(ctx context.Context, a api.AdvanceArgs) (api.AdvanceReply, error) {
	mc, ok := d.opt.Clock.(*engine.ManualClock)
	if !ok {
		return api.AdvanceReply{}, errs.New(errs.EINVAL, "the daemon runs on the system clock; start it with CBTH_TEST_CLOCK to move time by hand")
	}
	by, err := time.ParseDuration(a.By)
	if err != nil || by < 0 {
		return api.AdvanceReply{}, errs.New(errs.EINVAL, "bad duration %q", a.By)
	}
	mc.Advance(by)
	if a.NoSweep {
		return api.AdvanceReply{Now: mc.Now()}, nil
	}
	if err := d.sweep(ctx, "clock"); err != nil {
		return api.AdvanceReply{}, err
	}
	d.schedule(ctx)
	return api.AdvanceReply{Now: mc.Now()}, nil
}
