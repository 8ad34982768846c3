package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/errs"
	"github.com/cbth-dev/cbth/engine/projections"
	"github.com/cbth-dev/cbth/events"
)

func (d *Daemon) handle(ctx context.Context, req *ipc.Request) (any, error) {
	switch req.Op {
	case "ping":
		return Ping{PID: os.Getpid(), Version: d.opt.Version}, nil
	case "daemon.status":
		// Looking at the daemon does not keep it alive.
		return d.status(), nil
	}
	d.inflight.Add(1)
	defer d.inflight.Add(-1)
	defer d.touch()
	switch req.Op {
	case "daemon.stop":
		d.opt.Log.Info("stop requested")
		d.stop()
		return map[string]string{"outcome": "stopping"}, nil
	case "job.submit":
		var a SubmitArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		return d.submit(ctx, a)
	case "job.complete":
		var a CompleteArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		return d.complete(ctx, a)
	case "job.fail":
		var a JobArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		return d.transition(ctx, a.JobID, command.FailJob{JobID: a.JobID, Reason: a.Reason})
	case "job.cancel":
		var a JobArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		defer d.poke(ctx)
		return d.transition(ctx, a.JobID, command.CancelJob{Config: d.deliveryConfig(), JobID: a.JobID, Reason: a.Reason})
	case "job.query":
		var a JobArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		return d.query(a.JobID)
	case "job.list":
		var a ListArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		return d.list(a)
	case "events.verify":
		return d.eng.Verify(ctx)
	case "batch.close_head":
		var a CloseHeadArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		defer d.poke(ctx)
		return d.closeHead(ctx, a)
	case "batch.inspect_head":
		var a ThreadArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		return d.inspectHead(a.ThreadID)
	case "batch.inspect":
		var a BatchArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		return d.inspect(a.BatchID)
	case "batch.list":
		var a BatchListArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		return d.listBatches(a)
	case "wait":
		var a WaitArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		return d.wait(ctx, a)
	case "debug.target.set":
		var a DebugSetArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		if err := d.debug.SetBehaviour(a.ThreadID, a.Behaviour); err != nil {
			return nil, err
		}
		d.poke(ctx)
		return map[string]string{"outcome": "set", "thread_id": a.ThreadID, "behaviour": a.Behaviour}, nil
	case "artifact.pin":
		var a PinArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		cmd := command.PinArtifact{Config: d.deliveryConfig(), ArtifactID: a.ArtifactID, Until: a.Until}
		if a.For != "" {
			var err error
			if cmd.For, err = time.ParseDuration(a.For); err != nil {
				return nil, errs.New(errs.EINVAL, "bad duration %q", a.For)
			}
		}
		res, err := d.eng.Execute(ctx, engine.Meta{Actor: events.ActorOperator, CorrelationID: "pin:" + a.ArtifactID}, cmd)
		if err != nil {
			return nil, err
		}
		return map[string]string{"outcome": res.Outcome, "artifact_id": a.ArtifactID}, nil
	case "ctx.tree.load":
		var a TreeArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		return d.loadTree(a.Root)
	case "ctx.tree.save":
		var a TreeArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		return d.saveTree(ctx, a)
	case "debug.clock.advance":
		var a AdvanceArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		return d.advance(ctx, a)
	case "events.read":
		var a ReadArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
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
		return d.readEvents(a)
	}
	return nil, errs.New(errs.EINVAL, "unknown operation %q", req.Op)
}

func decode(req *ipc.Request, v any) error {
	if len(req.Args) == 0 {
		return nil
	}
	if err := json.Unmarshal(req.Args, v); err != nil {
		return errs.Wrap(errs.EINVAL, err, "%s arguments", req.Op)
	}
	return nil
}

func (d *Daemon) meta(correlation string) engine.Meta {
	return engine.Meta{Actor: events.ActorCLI, CorrelationID: correlation}
}

func (d *Daemon) submit(ctx context.Context, a SubmitArgs) (SubmitResult, error) {
	pol, err := command.NormalizePolicy(a.Policy, a.Metadata)
	if err != nil {
		return SubmitResult{}, err
	}
	cmd := command.SubmitJob{Target: a.Target, ThreadID: a.ThreadID, TaskKind: a.TaskKind, Summary: a.Summary,
		Metadata: a.Metadata, DedupeKey: a.DedupeKey, Policy: pol}
	m := d.meta("")
	if a.DedupeKey != "" {
		// The dedupe key doubles as the idempotency key: a retried submit
		// returns the original job without deciding again.
		m.CommandID = "job.submit/" + a.DedupeKey
	}
	res, err := d.eng.Execute(ctx, m, cmd)
	if err != nil {
		return SubmitResult{}, err
	}
	id, _ := res.Value.(string)
	if res.Replayed && len(res.Events) > 0 {
		id = res.Events[0].Stream.ID
	}
	j, _, err := d.job(id)
	if err != nil {
		return SubmitResult{}, err
	}
	return SubmitResult{JobID: id, Status: j.Status, AcceptedAt: j.CreatedAt, Deduplicated: res.Replayed || res.Outcome == "deduplicated"}, nil
}

func (d *Daemon) complete(ctx context.Context, a CompleteArgs) (TransitionResult, error) {
	// Check cheaply first, so a large file is not copied for a job that
	// cannot complete; the command checks again atomically.
	j, _, err := d.job(a.JobID)
	if err != nil {
		return TransitionResult{}, err
	}
	if j.Status != "running" {
		return TransitionResult{}, errs.New(errs.ESTATE, "job %s is %s; cannot complete it", a.JobID, j.Status)
	}
	defer d.poke(ctx)
	cmd := command.CompleteJob{Config: d.deliveryConfig(), JobID: a.JobID, Summary: a.Summary}
	if a.ResultFile != "" {
		if !filepath.IsAbs(a.ResultFile) {
			return TransitionResult{}, errs.New(errs.EINVAL, "result file path %q is not absolute", a.ResultFile)
		}
		ing, err := d.artifacts.Ingest(a.ResultFile, a.JobID, d.opt.Clock.Now())
		if err != nil {
			return TransitionResult{}, err
		}
		cmd.Artifact = &ing
		res, err := d.eng.Execute(ctx, d.meta(""), cmd)
		if err != nil {
			// Nothing recorded it: take the copy back out.
			_ = d.artifacts.Remove(ing.ArtifactID)
			return TransitionResult{}, err
		}
		return d.transitionResult(a.JobID, res.Outcome)
	}
	res, err := d.eng.Execute(ctx, d.meta(""), cmd)
	if err != nil {
		return TransitionResult{}, err
	}
	return d.transitionResult(a.JobID, res.Outcome)
}

func (d *Daemon) transition(ctx context.Context, id string, cmd engine.Decider) (TransitionResult, error) {
	res, err := d.eng.Execute(ctx, d.meta(""), cmd)
	if err != nil {
		return TransitionResult{}, err
	}
	return d.transitionResult(id, res.Outcome)
}

func (d *Daemon) transitionResult(id, outcome string) (TransitionResult, error) {
	j, a, err := d.job(id)
	if err != nil {
		return TransitionResult{}, err
	}
	v := viewJob(j, a)
	return TransitionResult{JobID: id, Status: j.Status, Outcome: outcome, Job: v, Art: v.Artifact}, nil
}

func (d *Daemon) job(id string) (*aggregate.Job, *aggregate.Artifact, error) {
	if id == "" {
		return nil, nil, errs.New(errs.EINVAL, "job id is empty")
	}
	var j *aggregate.Job
	var a *aggregate.Artifact
	err := d.eng.View(func(v *projections.Tx) error {
		s, err := v.State(events.KindJob, id)
		if err != nil || s == nil {
			return err
		}
		j = s.(*aggregate.Job)
		if j.ArtifactID != "" {
			as, err := v.State(events.KindArtifact, j.ArtifactID)
			if err != nil {
				return err
			}
			a, _ = as.(*aggregate.Artifact)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if j == nil {
		return nil, nil, errs.New(errs.ENOENT, "no job %s", id)
	}
	return j, a, nil
}

func (d *Daemon) query(id string) (JobView, error) {
	j, a, err := d.job(id)
	if err != nil {
		return JobView{}, err
	}
	return viewJob(j, a), nil
}

// maxPage bounds one job.list page so it always fits in a frame.
const maxPage = 500

func (d *Daemon) list(a ListArgs) (ListPage, error) {
	if a.Limit <= 0 || a.Limit > maxPage {
		a.Limit = maxPage
	}
	page := ListPage{Jobs: []JobView{}}
	err := d.eng.View(func(v *projections.Tx) error {
		return v.ForEachAfter(events.KindJob, a.After, func(s aggregate.State) error {
			j := s.(*aggregate.Job)
			if (a.ThreadID != "" && j.SourceThreadID != a.ThreadID) || (a.Status != "" && j.Status != a.Status) {
				return nil
			}
			if len(page.Jobs) == a.Limit {
				page.Next = page.Jobs[len(page.Jobs)-1].JobID
				return errStopList
			}
			var art *aggregate.Artifact
			if j.ArtifactID != "" {
				as, _ := v.State(events.KindArtifact, j.ArtifactID)
				art, _ = as.(*aggregate.Artifact)
			}
			page.Jobs = append(page.Jobs, viewJob(j, art))
			return nil
		})
	})
	if err == errStopList {
		err = nil
	}
	return page, err
}

// A literal, not errs.New, for the reason given at ErrRunning.
var errStopList error = &errs.Error{Code: errs.EINTERNAL, Message: "stop listing"}

// maxEventsPage bounds one events.read page (about 2 KiB an event at most
// keeps it inside a frame).
const maxEventsPage = 256

func (d *Daemon) readEvents(a ReadArgs) (EventsPage, error) {
	if a.Limit <= 0 || a.Limit > maxEventsPage {
		a.Limit = maxEventsPage
	}
	if a.From == 0 {
		a.From = 1
	}
	page := EventsPage{Events: []events.Envelope{}, Head: d.eng.Head()}
	size := 0
	err := d.eng.ReadFrom(a.From, func(env events.Envelope) error {
		if a.Stream != "" && env.Stream.String() != a.Stream {
			return nil
		}
		if len(page.Events) == a.Limit || size > ipcBudget {
			page.Next = env.Seq
			return engine.ErrStop
		}
		size += len(env.Payload) + 512
		page.Events = append(page.Events, env)
		return nil
	})
	return page, err
}

// ipcBudget keeps a page of events well inside one frame.
const ipcBudget = 768 << 10

func (d *Daemon) status() Status {
	now := d.opt.Clock.Now()
	var checkpoint uint64
	_ = d.eng.View(func(v *projections.Tx) error { checkpoint = v.Checkpoint(); return nil })
	head := d.eng.Head()
	reasons := d.busy(now)
	d.mu.Lock()
	deadline, sweep := d.lastActivity.Add(d.opt.Config.IdleTimeout.Duration), d.lastSweep
	d.mu.Unlock()
	st := Status{
		PID: os.Getpid(), Version: d.opt.Version, Home: d.opt.Home.Root, StartedAt: d.started,
		UptimeSeconds: now.Sub(d.started).Seconds(), LogHeadSeq: head, Checkpoint: checkpoint,
		ActiveJobs: d.activeJobs(), AttachedClients: d.srv.Attached(), ParkedBatches: d.parked(), IdleTimeout: d.opt.Config.IdleTimeout.Duration.String(),
		IdleDeadline: deadline, BusyReasons: reasons, LastSweep: sweep,
	}
	if head > checkpoint {
		st.ProjectionLag = head - checkpoint
	}
	if st.BusyReasons == nil {
		st.BusyReasons = []string{}
	}
	if next, ok := d.nextDue(); ok {
		st.NextDue = &next
	}
	return st
}
