package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/adapters/task"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// tasks is the daemon's task runner: the tasks waiting for a slot (with
// the environment their client gave, which lives only here) and the
// processes running. The log says what each task is; this says what
// the daemon is doing about it.
type tasks struct {
	mu       sync.Mutex
	queue    []queued
	running  map[string]*running
	draining bool          // a handover refuses new tasks (queued ones still start)
	halted   bool          // nothing starts any more: the daemon stops
	ended    chan struct{} // closed and replaced whenever a task ends
	wg       sync.WaitGroup
}

type queued struct {
	id  string
	env []string
}

type running struct {
	p *task.Process // nil until started
	// stop is a stop reason that arrived before the start was recorded;
	// it is applied once it is.
	stop string
}

func newTasks() tasks {
	return tasks{running: map[string]*running{}, ended: make(chan struct{})}
}

// counts returns how many tasks run and wait.
func (ts *tasks) counts() (run, wait int) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.running), len(ts.queue)
}

// signalEnded wakes whoever waits for a task to end. ts.mu is held.
func (ts *tasks) signalEnded() {
	close(ts.ended)
	ts.ended = make(chan struct{})
}

func (d *Daemon) taskMeta(id string) engine.Meta {
	return engine.Meta{Actor: events.ActorAdapter, CorrelationID: "task:" + id}
}

// runTask submits the job and its task, then starts it when a slot is
// free (at once when one is).
func (d *Daemon) runTask(ctx context.Context, a api.TaskRunArgs) (query.TaskView, error) {
	return d.startTask(ctx, d.meta(""), a, func(c command.SubmitTask) engine.Decider { return c })
}

// startTask submits a task's job and the task, through wrap (which may
// record more in the same append), and queues it to run. A command the
// log already holds (a retried call with the same command id) is not
// queued again: a task runs once.
func (d *Daemon) startTask(ctx context.Context, m engine.Meta, a api.TaskRunArgs, wrap func(command.SubmitTask) engine.Decider) (query.TaskView, error) {
	d.tasks.mu.Lock()
	draining := d.tasks.draining
	d.tasks.mu.Unlock()
	if draining {
		return query.TaskView{}, errs.New(errs.EBUSY, "the daemon is handing over to a new one (cbth daemon restart); run the task again once it is done")
	}
	pol, err := command.NormalizePolicy(a.Policy, a.Metadata)
	if err != nil {
		return query.TaskView{}, err
	}
	if a.TimeoutMS < 0 {
		return query.TaskView{}, errs.New(errs.EINVAL, "the timeout is negative")
	}
	if a.TargetKind == "" {
		if a.TargetKind, err = d.threadTarget(a.SourceThreadID); err != nil {
			return query.TaskView{}, err
		}
	}
	cmd := command.SubmitTask{
		Job: command.SubmitJob{Target: a.TargetKind, ThreadID: a.SourceThreadID, TaskKind: a.TaskKind, Summary: a.TaskSummary,
			Metadata: a.Metadata, Policy: pol, Timeout: d.opt.Config.JobTimeout.Duration},
		Argv: a.Argv, Path: a.Path, Cwd: a.Cwd, Timeout: time.Duration(a.TimeoutMS) * time.Millisecond,
	}
	val, res, err := engine.ExecVia[command.TaskRef](ctx, d.eng, m, cmd, func(engine.Decider) engine.Decider { return wrap(cmd) })
	if err != nil {
		return query.TaskView{}, err
	}
	if res.Replayed {
		for _, e := range res.Events {
			if e.Stream.Kind == events.KindTask {
				return d.taskView(e.Stream.ID)
			}
		}
		return query.TaskView{}, errs.New(errs.EINTERNAL, "a replayed task submission holds no task")
	}
	ref := val
	d.tasks.mu.Lock()
	d.tasks.queue = append(d.tasks.queue, queued{id: ref.TaskID, env: a.Env})
	d.tasks.mu.Unlock()
	d.startQueued(ctx)
	return d.taskView(ref.TaskID)
}

func (d *Daemon) taskView(id string) (v query.TaskView, err error) {
	err = d.eng.Read(func(s engine.Snapshot) error { v, err = query.Task(s, id); return err })
	return v, err
}

// startQueued starts waiting tasks, oldest first, while fewer than
// [task] max_running run.
func (d *Daemon) startQueued(ctx context.Context) {
	ts := &d.tasks
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for len(ts.queue) > 0 && len(ts.running) < d.opt.Config.Task.MaxRunning && !ts.halted {
		q := ts.queue[0]
		ts.queue = ts.queue[1:]
		r := &running{}
		ts.running[q.id] = r
		ts.wg.Add(1)
		go func() {
			defer ts.wg.Done()
			d.supervise(context.WithoutCancel(ctx), q, r)
		}()
	}
}

// supervise runs one task from start to its recorded end. Its records
// outlive a stopping daemon (ctx never ends): the daemon waits for them
// before it closes the log.
func (d *Daemon) supervise(ctx context.Context, q queued, r *running) {
	defer func() {
		d.tasks.mu.Lock()
		delete(d.tasks.running, q.id)
		d.tasks.signalEnded()
		d.tasks.mu.Unlock()
		d.startQueued(ctx)
		d.poke(ctx)
	}()
	t, err := d.task(q.id)
	if err != nil || t == nil || t.State != fsm.TaskQueued {
		d.opt.Log.Error("task to start is gone", "task", q.id, "err", err)
		return
	}
	cfg := d.opt.Config.Task
	dir := filepath.Join(d.opt.Home.TasksDir(), t.ID)
	env := append(slices.Clone(q.env), "CBTH_TASK_ID="+t.ID, "CBTH_JOB_ID="+t.JobID)
	spec := task.Spec{Path: t.Path, Argv: t.Argv, Dir: t.Cwd, Env: env, Spool: filepath.Join(dir, "output"), Lock: filepath.Join(dir, "lock"),
		SpoolMax: cfg.SpoolMax, TailMax: int(cfg.OutputTail), Grace: cfg.KillGrace.Duration}
	var p *task.Process
	if err = home.EnsureDir(dir); err == nil {
		p, err = task.Start(spec)
	}
	if err != nil {
		if d.finishTask(ctx, command.FinishTask{Config: d.deliveryConfig(), TaskID: t.ID, Exit: command.TaskExit{ExitCode: -1, Error: err.Error()}}) != "" {
			os.RemoveAll(dir)
		}
		return
	}
	_, err = d.eng.Execute(ctx, d.taskMeta(t.ID), command.StartTask{TaskID: t.ID, PID: p.PID(), PIDStart: p.Group().Start, DaemonPID: os.Getpid(), SpoolPath: spec.Spool})
	d.tasks.mu.Lock()
	r.p = p
	stop := r.stop
	d.tasks.mu.Unlock()
	switch {
	case err != nil:
		// A task must not run unrecorded: stop it; its end cannot be
		// recorded either, so a later daemon fails it closed.
		d.opt.Log.Error("record task start; stopping it", "task", t.ID, "err", err)
		p.Stop()
	case stop != "":
		_, _ = d.stopTask(ctx, t.ID, stop)
	}
	d.opt.Log.Info("task started", "task", t.ID, "job", t.JobID, "pid", p.PID(), "command", t.CommandLine())
	if t.TimeoutMS > 0 {
		timer := time.AfterFunc(time.Duration(t.TimeoutMS)*time.Millisecond, func() {
			if _, err := d.stopTask(ctx, t.ID, command.StopTimeout); err != nil {
				d.opt.Log.Error("stop task at its timeout", "task", t.ID, "err", err)
			}
		})
		defer timer.Stop()
	}
	x := p.Wait()
	// The tail is recorded for good, and the job's reason or result is
	// made from it: the task's own secrets are taken out first.
	out := events.TaskOutput{OutputBytes: x.Output.Bytes, SpoolBytes: x.Output.Spooled, SpoolTruncated: x.Output.Truncated,
		Tail: task.Redactor(q.env)(task.TailText(x.Output.Tail)), TailTruncated: x.Output.TailTruncated}
	fin := command.FinishTask{Config: d.deliveryConfig(), TaskID: t.ID, Output: out,
		Exit: command.TaskExit{ExitCode: x.Code, Signal: x.Signal, Killed: x.Killed, Duration: x.Duration}}
	fin.Artifact = d.ingestSpool(spec.Spool, t.JobID, x.Output.Spooled)
	res := d.finishTask(ctx, fin)
	if res != "" {
		// Recorded: the output is an artifact now. Unrecorded, the spool
		// stays for the next daemon, which fails the task closed with it.
		os.RemoveAll(dir)
	}
	d.opt.Log.Info("task ended", "task", t.ID, "job", t.JobID, "outcome", res, "exit_code", x.Code, "signal", x.Signal,
		"duration", x.Duration, "output_bytes", x.Output.Bytes)
}

// ingestSpool copies a task's spool into the artifact store; nil when it
// is empty or cannot be copied (the tail is still recorded).
func (d *Daemon) ingestSpool(path, jobID string, size int64) *command.Ingested {
	if size <= 0 {
		return nil
	}
	ing, err := d.artifacts.Ingest(path, jobID, d.opt.Clock.Now())
	if err != nil {
		d.opt.Log.Error("keep task output as an artifact", "spool", path, "err", err)
		return nil
	}
	return &ing
}

// finishTask records a task's end, taking its artifact back out when
// nothing recorded it.
func (d *Daemon) finishTask(ctx context.Context, c command.FinishTask) engine.Outcome {
	res, err := d.eng.Execute(ctx, d.taskMeta(c.TaskID), c)
	if err != nil {
		d.opt.Log.Error("record task end", "task", c.TaskID, "err", err)
		if c.Artifact != nil {
			_ = d.artifacts.Remove(c.Artifact.ArtifactID)
		}
		return ""
	}
	return res.Outcome
}

func (d *Daemon) task(id string) (t *aggregate.Task, err error) {
	err = d.eng.Read(func(s engine.Snapshot) error {
		st, err := s.State(events.KindTask, id)
		t, _ = st.(*aggregate.Task)
		return err
	})
	return t, err
}

// stopTask stops a task for reason: a queued one ends without starting,
// a running one is recorded stopping and its group gets TERM, then KILL
// after kill_grace. It returns the command's outcome.
func (d *Daemon) stopTask(ctx context.Context, id, reason string) (engine.Outcome, error) {
	ts := &d.tasks
	ts.mu.Lock()
	for i, q := range ts.queue {
		if q.id == id {
			ts.queue = slices.Delete(ts.queue, i, i+1)
			ts.mu.Unlock()
			out := d.finishTask(ctx, command.FinishTask{Config: d.deliveryConfig(), TaskID: id, Unstarted: reason})
			d.poke(ctx)
			return out, nil
		}
	}
	r := ts.running[id]
	if r != nil && r.p == nil {
		r.stop = reason // applied once the start is recorded
		ts.mu.Unlock()
		return command.OutcomeStopping, nil
	}
	ts.mu.Unlock()
	res, err := d.eng.Execute(ctx, d.taskMeta(id), command.StopTask{TaskID: id, Reason: reason})
	if err != nil {
		if r != nil {
			// The stop is not recorded (the log may be closing), but the
			// process must not outlive the reason to stop it: a later
			// daemon fails the task closed.
			r.p.Stop()
		}
		return "", err
	}
	if res.Outcome == command.OutcomeStopping && r != nil {
		d.opt.Log.Info("stopping task", "task", id, "reason", reason)
		r.p.Stop()
	}
	return res.Outcome, nil
}

// waitTaskEnd waits, at most limit, until a task's end is recorded.
func (d *Daemon) waitTaskEnd(ctx context.Context, id string, limit time.Duration) {
	sub := d.eng.Subscribe()
	defer sub.Close()
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		if st, err := d.task(id); err != nil || st == nil || !st.Live() {
			return
		}
		select {
		case <-sub.C():
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// stopTasksOfJobs stops the live tasks of jobs that ended otherwise (a
// job cancelled, or failed at its job_timeout).
func (d *Daemon) stopTasksOfJobs(ctx context.Context, jobs []string, reason string) {
	for _, j := range jobs {
		var id string
		_ = d.eng.Read(func(s engine.Snapshot) error { id = query.TaskOfJob(s, j); return nil })
		if id == "" {
			continue
		}
		if t, err := d.task(id); err == nil && t != nil && t.Live() {
			if _, err := d.stopTask(ctx, id, reason); err != nil {
				d.opt.Log.Error("stop task of job", "task", id, "job", j, "err", err)
			}
		}
	}
}

// stopAllTasks stops every task for reason and waits until each end is
// recorded (bounded: a stop ends in KILL after kill_grace).
func (d *Daemon) stopAllTasks(ctx context.Context, reason string) int {
	ts := &d.tasks
	ts.mu.Lock()
	ts.draining, ts.halted = true, true
	ids := make([]string, 0, len(ts.queue)+len(ts.running))
	for _, q := range ts.queue {
		ids = append(ids, q.id)
	}
	for id := range ts.running {
		ids = append(ids, id)
	}
	ts.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		if _, err := d.stopTask(ctx, id, reason); err != nil {
			d.opt.Log.Error("stop task", "task", id, "reason", reason, "err", err)
		}
	}
	ts.wg.Wait()
	return len(ids)
}

// reconcileTasks runs at start-up, before anything else may start a
// task: every task the log says is queued, running or stopping belonged
// to a daemon that is gone, which never recorded its end. None is run
// again. Processes of it that are still alive are stopped; the task is
// failed closed with the output its spool kept.
func (d *Daemon) reconcileTasks(ctx context.Context) error {
	var live []*aggregate.Task
	if err := d.eng.Read(func(s engine.Snapshot) error {
		var err error
		live, err = query.LiveTasks(s)
		return err
	}); err != nil {
		return err
	}
	cfg := d.opt.Config.Task
	// What is left of every lost task is stopped at once, so start-up
	// waits one kill_grace or two however many there are.
	reaped := make([]task.Reaped, len(live))
	var wg sync.WaitGroup
	for i, t := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			reaped[i], err = task.Reap(filepath.Join(d.opt.Home.TasksDir(), t.ID, "lock"), task.Group{PID: t.PID, Start: t.PIDStart}, cfg.KillGrace.Duration)
			if err != nil {
				d.opt.Log.Error("stop what is left of a lost task", "task", t.ID, "err", err)
			}
		}()
	}
	wg.Wait()
	for i, t := range live {
		dir := filepath.Join(d.opt.Home.TasksDir(), t.ID)
		r := reaped[i]
		spool := filepath.Join(dir, "output")
		tail, size, _ := task.ReadTail(spool, cfg.OutputTail)
		out := events.TaskOutput{OutputBytes: size, SpoolBytes: size, SpoolTruncated: size >= cfg.SpoolMax,
			Tail: task.TailText(tail), TailTruncated: size > int64(len(tail))}
		c := command.LoseTask{Config: d.deliveryConfig(), TaskID: t.ID, GroupKilled: r.Signalled, Output: out,
			Artifact: d.ingestSpool(spool, t.JobID, size)}
		switch t.State {
		case fsm.TaskQueued:
			c.Reason = "the daemon stopped before this task started; it was not run and will not be (cbth never starts a task again after a restart)"
		default:
			c.Reason = fmt.Sprintf("the daemon that ran this task (pid %d) ended before the task did; cbth never runs a task twice, so it failed closed", t.DaemonPID)
			switch {
			case r.Unverified != "":
				// Never a guess: a group id alone may be a stranger's.
				c.Reason += fmt.Sprintf("; processes of it still hold its lock, but its process group %d was not signalled: %s", t.PID, r.Unverified)
			case r.Signalled:
				c.Reason += "; its processes that were still running were stopped"
			}
		}
		if _, err := d.eng.Execute(ctx, engine.Meta{Actor: events.ActorSweep, CorrelationID: "startup-reconcile"}, c); err != nil {
			if c.Artifact != nil {
				_ = d.artifacts.Remove(c.Artifact.ArtifactID)
			}
			return fmt.Errorf("fail lost task %s closed: %w", t.ID, err)
		}
		d.opt.Log.Warn("task lost with its daemon; failed closed", "task", t.ID, "job", t.JobID, "processes_left", r.Left, "group_signalled", r.Signalled, "unverified", r.Unverified, "output_bytes", size)
	}
	// Nothing runs yet: every task directory left is an orphan.
	ents, err := os.ReadDir(d.opt.Home.TasksDir())
	if err != nil && !os.IsNotExist(err) {
		return errs.Wrap(errs.EINTERNAL, err, "read %s", d.opt.Home.TasksDir())
	}
	for _, e := range ents {
		_ = os.RemoveAll(filepath.Join(d.opt.Home.TasksDir(), e.Name()))
	}
	return nil
}

// handover is daemon.handover: refuse new tasks, let the running ones
// finish (or stop them), then stop serving. A wait that runs out gives
// up the handover and changes nothing.
func (d *Daemon) handover(ctx context.Context, a api.HandoverArgs) (api.HandoverReply, error) {
	ts := &d.tasks
	ts.mu.Lock()
	if ts.draining {
		ts.mu.Unlock()
		return api.HandoverReply{}, errs.New(errs.EBUSY, "a handover is already under way")
	}
	ts.draining = true
	ts.mu.Unlock()
	rep := api.HandoverReply{Outcome: "handing_over", PID: os.Getpid(), Version: d.opt.Version, Protocol: ipc.Proto}
	if a.StopTasks {
		rep.TasksStopped = d.stopAllTasks(ctx, command.StopHandover)
	}
	// Tasks finish; foregrounds attached to the shared Codex app-server
	// (cbth cli run) detach: the daemon stops that app-server when it
	// exits, so a handover under one would end the user's session.
	deadline := time.NewTimer(time.Duration(a.WaitMS) * time.Millisecond)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ts.mu.Lock()
		n, ended := len(ts.running)+len(ts.queue), ts.ended
		ts.mu.Unlock()
		attached := d.srv.Attached()
		if n == 0 && attached == 0 {
			break
		}
		select {
		case <-ended:
		case <-tick.C:
		case <-deadline.C:
			ts.mu.Lock()
			ts.draining, ts.halted = false, false
			ts.mu.Unlock()
			d.startQueued(ctx)
			return api.HandoverReply{}, errs.New(errs.ETIMEDOUT, "after %s %d tasks still run and %d clients are attached (cbth cli run); the daemon goes on as before. Wait longer (--wait), stop the tasks (--stop-tasks: their jobs fail, none is run twice), or end the attached sessions",
				time.Duration(a.WaitMS)*time.Millisecond, n, attached)
		case <-ctx.Done():
			return api.HandoverReply{}, ctx.Err()
		}
	}
	// Deliveries in flight finish and record their answers before the
	// daemon stops: cancelling one would leave it unproven, and parked.
	d.sched.halt()
	limit := time.Now().Add(d.opt.Config.Delivery.DeliveryTimeout.Duration + 5*time.Second)
	for d.sched.inFlight() > 0 && time.Now().Before(limit) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	d.opt.Log.Info("handing over: stopping", "tasks_stopped", rep.TasksStopped, "deliveries_in_flight", d.sched.inFlight())
	d.stop()
	return rep, nil
}
