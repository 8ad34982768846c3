// Package tasksmod is the daemon's task runner (spec/tasks.md): `cbth
// task run` submits a job and a task, and the daemon runs the command,
// records its end and makes the job's result of it.
package tasksmod

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/adapters/task"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	taskcmd "github.com/cbth-dev/cbth/engine/command/task"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
)

// Module is the task runner: the tasks waiting for a slot (with the
// environment their client gave, which lives only here) and the
// processes running. The log says what each task is; this says what
// the daemon is doing about it.
type Module struct {
	h *daemon.Host

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
	w *watcher      // a watcher's matches on their way to the log; nil for a plain task
	// stop is a stop reason that arrived before the start was recorded;
	// it is applied once it is.
	stop string
}

// New returns the task runner.
func New() *Module {
	return &Module{running: map[string]*running{}, ended: make(chan struct{})}
}

// Name names the module.
func (m *Module) Name() string { return "tasks" }

// Start takes the host's services.
func (m *Module) Start(_ context.Context, h *daemon.Host) error {
	m.h = h
	return nil
}

// Ops registers the task operations.
func (m *Module) Ops(t api.Table) {
	api.Handle(t, api.TaskRun, m.runTask)
	api.Handle(t, api.TaskInspect, func(_ context.Context, a api.TaskArgs) (query.TaskView, error) { return m.taskView(a.TaskID) })
	api.Handle(t, api.TaskList, func(_ context.Context, a api.TaskListArgs) (p query.TaskPage, err error) {
		err = m.h.Eng.Read(func(s engine.Snapshot) error {
			p, err = query.Tasks(s, query.TaskFilter{State: a.State, After: a.After, Limit: a.Limit})
			return err
		})
		return p, err
	})
	api.Handle(t, api.TaskCancel, func(ctx context.Context, a api.TaskArgs) (api.TaskCancelReply, error) {
		return m.Cancel(ctx, m.taskMeta(a.TaskID), a.TaskID, nil)
	})
	api.Handle(t, api.TaskOutput, m.Output)
}

// Cancel stops a task (TERM, then KILL after kill_grace) and replies
// with its end, through wrap (which may record more in the same append;
// nil for none). A watcher's end is its final update.
func (m *Module) Cancel(ctx context.Context, meta engine.Meta, id string, wrap func(engine.Decider) engine.Decider) (api.TaskCancelReply, error) {
	if _, err := m.taskView(id); err != nil {
		return api.TaskCancelReply{}, err
	}
	out, err := m.stopTaskVia(ctx, meta, id, taskcmd.StopCancel, wrap)
	if err != nil {
		return api.TaskCancelReply{}, err
	}
	if out == command.OutcomeStopping || out == command.Already(fsm.TaskStopping) {
		// Reply with the task's end: TERM, then KILL after
		// kill_grace, bounds it.
		m.waitTaskEnd(ctx, id, 3*m.h.Config.Task.KillGrace.Duration+10*time.Second)
		if out == command.OutcomeStopping {
			out = taskcmd.TaskCancelled
		}
	}
	v, err := m.taskView(id)
	return api.TaskCancelReply{Outcome: out, Task: v}, err
}

// KeepAlive: tasks running or waiting keep the daemon up.
func (m *Module) KeepAlive() []string {
	m.mu.Lock()
	run, wait := len(m.running), len(m.queue)
	m.mu.Unlock()
	if run+wait > 0 {
		return []string{plural.Count(run, "task", "tasks") + fmt.Sprintf(" running, %d queued", wait)}
	}
	return nil
}

// Status counts the tasks as the log has them, so a client that saw a
// task's end recorded never sees it still running here.
func (m *Module) Status(st *api.Status) {
	_ = m.h.Eng.Read(func(s engine.Snapshot) error {
		live, err := query.LiveTasks(s)
		for _, t := range live {
			if t.State == fsm.TaskQueued {
				st.QueuedTasks++
			} else {
				st.RunningTasks++
			}
		}
		return err
	})
	m.mu.Lock()
	st.HandingOver = m.draining
	m.mu.Unlock()
}

// Stop stops every task (the daemon stops) and waits until each end is
// recorded.
func (m *Module) Stop(ctx context.Context) error {
	m.stopAllTasks(ctx, taskcmd.StopDaemon)
	return nil
}

// JobsEnded stops the live tasks of jobs that ended otherwise (a job
// cancelled, or failed at its job_timeout).
func (m *Module) JobsEnded(ctx context.Context, jobs []string, reason string) {
	m.stopTasksOfJobs(ctx, jobs, reason)
}

// Drain refuses new tasks (queued ones still start); with stop it stops
// them all.
func (m *Module) Drain(ctx context.Context, stop bool) (int, bool) {
	m.mu.Lock()
	if m.draining {
		m.mu.Unlock()
		return 0, false
	}
	m.draining = true
	m.mu.Unlock()
	if stop {
		return m.stopAllTasks(ctx, taskcmd.StopHandover), true
	}
	return 0, true
}

// Left is how many tasks run or wait, and a channel closed when one ends.
func (m *Module) Left() (int, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.running) + len(m.queue), m.ended
}

// Resume takes tasks again after a handover gave up.
func (m *Module) Resume(ctx context.Context) {
	m.mu.Lock()
	m.draining, m.halted = false, false
	m.mu.Unlock()
	m.startQueued(ctx)
}

// signalEnded wakes whoever waits for a task to end. m.mu is held.
func (m *Module) signalEnded() {
	close(m.ended)
	m.ended = make(chan struct{})
}

func (m *Module) taskMeta(id string) engine.Meta {
	return engine.Meta{Actor: events.ActorAdapter, CorrelationID: "task:" + id}
}

// runTask submits the job and its task, then starts it when a slot is
// free (at once when one is).
func (m *Module) runTask(ctx context.Context, a api.TaskRunArgs) (query.TaskView, error) {
	return m.StartTask(ctx, engine.Meta{Actor: events.ActorCLI}, a, func(c taskcmd.SubmitTask) engine.Decider { return c })
}

// StartTask submits a task's job and the task, through wrap (which may
// record more in the same append), and queues it to run. A command the
// log already holds (a retried call with the same command id) is not
// queued again: a task runs once.
func (m *Module) StartTask(ctx context.Context, meta engine.Meta, a api.TaskRunArgs, wrap func(taskcmd.SubmitTask) engine.Decider) (query.TaskView, error) {
	m.mu.Lock()
	draining := m.draining
	m.mu.Unlock()
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
		if a.TargetKind, err = m.h.ThreadTarget(a.SourceThreadID); err != nil {
			return query.TaskView{}, err
		}
	}
	cmd := taskcmd.SubmitTask{
		Job: command.SubmitJob{Target: a.TargetKind, ThreadID: a.SourceThreadID, TaskKind: a.TaskKind, Summary: a.TaskSummary,
			Metadata: a.Metadata, Policy: pol, Timeout: m.h.Config.JobTimeout.Duration},
		Argv: a.Argv, Path: a.Path, Cwd: a.Cwd, Timeout: time.Duration(a.TimeoutMS) * time.Millisecond,
	}
	if a.Watch != nil {
		cmd.Watch = &events.TaskWatch{Patterns: a.Watch.WakeOn, WakesPerHour: a.Watch.WakesPerHour, LineMax: taskcmd.DefaultLineMax}
	}
	val, res, err := engine.ExecVia[taskcmd.TaskRef](ctx, m.h.Eng, meta, cmd, func(engine.Decider) engine.Decider { return wrap(cmd) })
	if err != nil {
		return query.TaskView{}, err
	}
	if res.Replayed {
		for _, e := range res.Events {
			if e.Stream.Kind == events.KindTask {
				return m.taskView(e.Stream.ID)
			}
		}
		return query.TaskView{}, errs.New(errs.EINTERNAL, "a replayed task submission holds no task")
	}
	ref := val
	m.mu.Lock()
	m.queue = append(m.queue, queued{id: ref.TaskID, env: a.Env})
	m.mu.Unlock()
	m.startQueued(ctx)
	return m.taskView(ref.TaskID)
}

func (m *Module) taskView(id string) (v query.TaskView, err error) {
	err = m.h.Eng.Read(func(s engine.Snapshot) error { v, err = query.Task(s, id); return err })
	return v, err
}

// startQueued starts waiting tasks, oldest first, while fewer than
// [task] max_running run.
func (m *Module) startQueued(ctx context.Context) {
	ts := m
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for len(ts.queue) > 0 && len(ts.running) < m.h.Config.Task.MaxRunning && !ts.halted {
		q := ts.queue[0]
		ts.queue = ts.queue[1:]
		r := &running{}
		ts.running[q.id] = r
		ts.wg.Add(1)
		go func() {
			defer ts.wg.Done()
			m.supervise(context.WithoutCancel(ctx), q, r)
		}()
	}
}

// supervise runs one task from start to its recorded end. Its records
// outlive a stopping daemon (ctx never ends): the daemon waits for them
// before it closes the log.
func (m *Module) supervise(ctx context.Context, q queued, r *running) {
	defer func() {
		m.mu.Lock()
		delete(m.running, q.id)
		m.signalEnded()
		m.mu.Unlock()
		m.startQueued(ctx)
		m.h.Poke(ctx)
	}()
	t, err := m.task(q.id)
	if err != nil || t == nil || t.State != fsm.TaskQueued {
		m.h.Log.Error("task to start is gone", "task", q.id, "err", err)
		return
	}
	cfg := m.h.Config.Task
	dir := filepath.Join(m.h.Home.TasksDir(), t.ID)
	env := append(slices.Clone(q.env), "CBTH_TASK_ID="+t.ID, "CBTH_JOB_ID="+t.JobID)
	spec := task.Spec{Path: t.Path, Argv: t.Argv, Dir: t.Cwd, Env: env, Spool: filepath.Join(dir, "output"), Lock: filepath.Join(dir, "lock"),
		SpoolMax: cfg.SpoolMax, TailMax: int(cfg.OutputTail), Grace: cfg.KillGrace.Duration}
	var w *watcher
	if t.Watcher() {
		w = m.newWatcher(t.ID)
		if spec.Watch, err = w.lineWatch(t.Watch); err != nil {
			m.h.Log.Error("compile a watcher's patterns", "task", t.ID, "err", err)
		}
	}
	var p *task.Process
	if err = home.EnsureDir(dir); err == nil {
		p, err = task.Start(spec)
	}
	if err != nil {
		if m.finishTask(ctx, taskcmd.FinishTask{Config: m.h.DeliveryConfig(), TaskID: t.ID, Exit: taskcmd.TaskExit{ExitCode: -1, Error: err.Error()}}) != "" {
			os.RemoveAll(dir)
		}
		return
	}
	started := m.h.Clock.Now()
	_, err = m.h.Eng.Execute(ctx, m.taskMeta(t.ID), taskcmd.StartTask{TaskID: t.ID, PID: p.PID(), PIDStart: p.Group().Start, DaemonPID: os.Getpid(), SpoolPath: spec.Spool})
	m.mu.Lock()
	r.p, r.w = p, w
	stop := r.stop
	m.mu.Unlock()
	if w != nil && err == nil {
		// Matches seen before the start was recorded waited for it.
		w.start(ctx)
	}
	switch {
	case err != nil:
		// A task must not run unrecorded: stop it; its end cannot be
		// recorded either, so a later daemon fails it closed.
		m.h.Log.Error("record task start; stopping it", "task", t.ID, "err", err)
		p.Stop()
	case stop != "":
		_, _ = m.stopTask(ctx, t.ID, stop)
	}
	m.h.Log.Info("task started", "task", t.ID, "job", t.JobID, "pid", p.PID(), "command", t.CommandLine())
	if t.TimeoutMS > 0 {
		timer := time.AfterFunc(time.Duration(t.TimeoutMS)*time.Millisecond, func() {
			if _, err := m.stopTask(ctx, t.ID, taskcmd.StopTimeout); err != nil {
				m.h.Log.Error("stop task at its timeout", "task", t.ID, "err", err)
			}
		})
		defer timer.Stop()
	}
	x := p.Wait()
	if w != nil {
		// Every match the output held is recorded before the end: the
		// final update comes after the last wake in the thread's FIFO.
		w.close(ctx)
	}
	if m.h.Manual {
		// On the manual clock every time the daemon records is the
		// clock's, a task's run time too (spec/tasks.md), so a
		// scripted run records the same log each time.
		x.Duration = m.h.Clock.Now().Sub(started)
	}
	// The tail is recorded for good, and the job's reason or result is
	// made from it: it was redacted with the spool, as it came
	// (task.Redacting).
	out := events.TaskOutput{OutputBytes: x.Output.Bytes, SpoolBytes: x.Output.Spooled, SpoolTruncated: x.Output.Truncated,
		Tail: task.TailText(x.Output.Tail), TailTruncated: x.Output.TailTruncated, SpoolDroppedLines: x.Output.DroppedLines}
	fin := taskcmd.FinishTask{Config: m.h.DeliveryConfig(), TaskID: t.ID, Output: out,
		Exit: taskcmd.TaskExit{ExitCode: x.Code, Signal: x.Signal, Killed: x.Killed, Duration: x.Duration}}
	fin.Artifact = m.ingestSpool(spec.Spool, t.JobID, x.Output.Spooled)
	res := m.finishTask(ctx, fin)
	if res != "" {
		// Recorded: the output is an artifact now. Unrecorded, the spool
		// stays for the next daemon, which fails the task closed with it.
		os.RemoveAll(dir)
	}
	m.h.Log.Info("task ended", "task", t.ID, "job", t.JobID, "outcome", res, "exit_code", x.Code, "signal", x.Signal,
		"duration", x.Duration, "output_bytes", x.Output.Bytes)
}

// ingestSpool copies a task's spool into the artifact store; nil when it
// is empty or cannot be copied (the tail is still recorded).
func (m *Module) ingestSpool(path, jobID string, size int64) *command.Ingested {
	if size <= 0 {
		return nil
	}
	ing, err := m.h.Artifacts.Ingest(path, jobID, m.h.Clock.Now())
	if err != nil {
		m.h.Log.Error("keep task output as an artifact", "spool", path, "err", err)
		return nil
	}
	return &ing
}

// finishTask records a task's end, taking its artifact back out when
// nothing recorded it.
func (m *Module) finishTask(ctx context.Context, c taskcmd.FinishTask) engine.Outcome {
	res, err := m.h.Eng.Execute(ctx, m.taskMeta(c.TaskID), c)
	if err != nil {
		m.h.Log.Error("record task end", "task", c.TaskID, "err", err)
		if c.Artifact != nil {
			_ = m.h.Artifacts.Remove(c.Artifact.ArtifactID)
		}
		return ""
	}
	return res.Outcome
}

func (m *Module) task(id string) (t *aggregate.Task, err error) {
	err = m.h.Eng.Read(func(s engine.Snapshot) error {
		var err error
		t, err = engine.Task(s, id)
		return err
	})
	return t, err
}

// stopTask stops a task for reason: a queued one ends without starting,
// a running one is recorded stopping and its group gets TERM, then KILL
// after kill_grace. It returns the command's outcome.
func (m *Module) stopTask(ctx context.Context, id, reason string) (engine.Outcome, error) {
	return m.stopTaskVia(ctx, m.taskMeta(id), id, reason, nil)
}

// stopTaskVia is stopTask recording through wrap (nil for none).
func (m *Module) stopTaskVia(ctx context.Context, meta engine.Meta, id, reason string, wrap func(engine.Decider) engine.Decider) (engine.Outcome, error) {
	if wrap == nil {
		wrap = func(d engine.Decider) engine.Decider { return d }
	}
	ts := m
	ts.mu.Lock()
	for i, q := range ts.queue {
		if q.id == id {
			ts.queue = slices.Delete(ts.queue, i, i+1)
			ts.mu.Unlock()
			res, err := m.h.Eng.Execute(ctx, meta, wrap(taskcmd.FinishTask{Config: m.h.DeliveryConfig(), TaskID: id, Unstarted: reason}))
			if err != nil {
				m.h.Log.Error("record task end", "task", id, "err", err)
				return "", err
			}
			m.h.Poke(ctx)
			return res.Outcome, nil
		}
	}
	r := ts.running[id]
	if r != nil && r.p == nil {
		r.stop = reason // applied once the start is recorded
		ts.mu.Unlock()
		return command.OutcomeStopping, nil
	}
	ts.mu.Unlock()
	res, err := m.h.Eng.Execute(ctx, meta, wrap(taskcmd.StopTask{TaskID: id, Reason: reason}))
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
		m.h.Log.Info("stopping task", "task", id, "reason", reason)
		r.p.Stop()
	}
	return res.Outcome, nil
}

// waitTaskEnd waits, at most limit, until a task's end is recorded.
func (m *Module) waitTaskEnd(ctx context.Context, id string, limit time.Duration) {
	sub := m.h.Eng.Subscribe()
	defer sub.Close()
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		if st, err := m.task(id); err != nil || st == nil || !st.Live() {
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

func (m *Module) stopTasksOfJobs(ctx context.Context, jobs []string, reason string) {
	for _, j := range jobs {
		var id string
		_ = m.h.Eng.Read(func(s engine.Snapshot) error { id = query.TaskOfJob(s, j); return nil })
		if id == "" {
			continue
		}
		if t, err := m.task(id); err == nil && t != nil && t.Live() {
			if _, err := m.stopTask(ctx, id, reason); err != nil {
				m.h.Log.Error("stop task of job", "task", id, "job", j, "err", err)
			}
		}
	}
}

// stopAllTasks stops every task for reason and waits until each end is
// recorded (bounded: a stop ends in KILL after kill_grace).
func (m *Module) stopAllTasks(ctx context.Context, reason string) int {
	ts := m
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
		if _, err := m.stopTask(ctx, id, reason); err != nil {
			m.h.Log.Error("stop task", "task", id, "reason", reason, "err", err)
		}
	}
	ts.wg.Wait()
	return len(ids)
}

// Reconcile runs at start-up, before anything else may start a
// task: every task the log says is queued, running or stopping belonged
// to a daemon that is gone, which never recorded its end. None is run
// again. Processes of it that are still alive are stopped; the task is
// failed closed with the output its spool kept.
func (m *Module) Reconcile(ctx context.Context) error {
	var live []*aggregate.Task
	if err := m.h.Eng.Read(func(s engine.Snapshot) error {
		var err error
		live, err = query.LiveTasks(s)
		return err
	}); err != nil {
		return err
	}
	cfg := m.h.Config.Task
	// What is left of every lost task is stopped at once, so start-up
	// waits one kill_grace or two however many there are.
	reaped := make([]task.Reaped, len(live))
	var wg sync.WaitGroup
	for i, t := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			reaped[i], err = task.Reap(filepath.Join(m.h.Home.TasksDir(), t.ID, "lock"), task.Group{PID: t.PID, Start: t.PIDStart}, cfg.KillGrace.Duration)
			if err != nil {
				m.h.Log.Error("stop what is left of a lost task", "task", t.ID, "err", err)
			}
		}()
	}
	wg.Wait()
	// The output of a lost task stays where it is when it could not be
	// kept as an artifact: start-up never empties a spool nothing kept.
	keep := map[string]bool{}
	for i, t := range live {
		dir := filepath.Join(m.h.Home.TasksDir(), t.ID)
		r := reaped[i]
		spool := filepath.Join(dir, "output")
		// The dead daemon's spool may be in two segments: one file
		// again, oldest first, before it is read and kept.
		if err := task.MergeSpool(spool); err != nil {
			m.h.Log.Error("merge a lost task's spool", "task", t.ID, "err", err)
		}
		tail, size, _ := task.ReadTail(spool, cfg.OutputTail)
		// The spool was redacted as it was written, but for the
		// task's environment, which died with its daemon; the token
		// shapes are taken out once more, for a spool an older cbth
		// wrote.
		out := events.TaskOutput{OutputBytes: size, SpoolBytes: size, SpoolTruncated: size >= cfg.SpoolMax,
			Tail: task.Redactor(nil)(task.TailText(tail)), TailTruncated: size > int64(len(tail))}
		c := taskcmd.LoseTask{Config: m.h.DeliveryConfig(), TaskID: t.ID, GroupKilled: r.Signalled, Output: out,
			Artifact: m.ingestSpool(spool, t.JobID, size)}
		if size > 0 && c.Artifact == nil {
			keep[t.ID] = true
		}
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
		if keep[t.ID] {
			c.Reason += fmt.Sprintf("; its output could not be kept as an artifact and stays in %s", spool)
		}
		if _, err := m.h.Eng.Execute(ctx, engine.Meta{Actor: events.ActorSweep, CorrelationID: "startup-reconcile"}, c); err != nil {
			if c.Artifact != nil {
				_ = m.h.Artifacts.Remove(c.Artifact.ArtifactID)
			}
			return fmt.Errorf("fail lost task %s closed: %w", t.ID, err)
		}
		m.h.Log.Warn("task lost with its daemon; failed closed", "task", t.ID, "job", t.JobID, "processes_left", r.Left, "group_signalled", r.Signalled, "unverified", r.Unverified, "output_bytes", size)
	}
	// Nothing runs yet: every other task directory left is an orphan,
	// its output kept as an artifact or never written.
	ents, err := os.ReadDir(m.h.Home.TasksDir())
	if err != nil && !os.IsNotExist(err) {
		return errs.Wrap(errs.EINTERNAL, err, "read %s", m.h.Home.TasksDir())
	}
	for _, e := range ents {
		if !keep[e.Name()] {
			_ = os.RemoveAll(filepath.Join(m.h.Home.TasksDir(), e.Name()))
		}
	}
	return nil
}
