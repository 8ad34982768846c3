// Package task holds the task runner's commands: a task is a local command
// cbth runs for a job, and its end settles that job (spec/tasks.md). It
// stands on the core (engine/command), never the other way.
package task

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
)

// How a task ended (task.exited's outcome; a lost task's is "lost").
const (
	TaskSucceeded   = "succeeded"    // exited 0: the job completes
	TaskFailed      = "failed"       // exited non-zero or by a signal it did not get from cbth
	TaskTimedOut    = "timed_out"    // stopped at --timeout or at the job's job_timeout
	TaskCancelled   = "cancelled"    // stopped by task cancel or job cancel
	TaskStopped     = "stopped"      // stopped (or never started) because its daemon stopped
	TaskStartFailed = "start_failed" // the command could not be started
	TaskLostOutcome = "lost"
)

// Why the daemon stops a task (task.stopping's stop_reason).
const (
	StopTimeout      = "timeout"       // --timeout ran out
	StopJobTimeout   = "job_timeout"   // the job's job_timeout failed it
	StopCancel       = "cancel"        // cbth task cancel
	StopJobCancelled = "job_cancelled" // cbth job cancel of its job
	StopDaemon       = "daemon_stop"   // cbth daemon stop, or a signal to the daemon
	StopHandover     = "handover"      // cbth daemon restart --stop-tasks
)

// StopReasons lists every stop reason.
var StopReasons = []string{StopTimeout, StopJobTimeout, StopCancel, StopJobCancelled, StopDaemon, StopHandover}

// Limits on what a task records.
const (
	maxArgvBytes = 64 << 10
	maxArgs      = 4096
	// MaxTaskTail bounds the output tail a task keeps inline in its
	// events (the task.output_tail setting may be lower).
	MaxTaskTail = 64 << 10
	// excerpt bounds the output quoted in the job's result summary or
	// fail reason: the whole tail stays on the task.
	excerpt = 512
)

// SubmitTask submits a job and the task that runs its command, in one
// append. The daemon starts the task when a slot is free.
type SubmitTask struct {
	engine.Answers[TaskRef]

	Job     command.SubmitJob
	Argv    []string
	Path    string // argv[0] resolved, absolute
	Cwd     string // absolute
	Timeout time.Duration
	// Watch makes the task a watcher (watch.go); nil for a plain task.
	Watch *events.TaskWatch
}

// TaskRef names a task and its job.
type TaskRef struct {
	TaskID string
	JobID  string
}

// Validate checks the command's own fields; Decide calls it too.
func (c SubmitTask) Validate() error {
	if err := c.Job.Validate(); err != nil {
		return err
	}
	if c.Job.DedupeKey != "" {
		return errs.New(errs.EINVAL, "a task takes no dedupe key: it is run once, when it is submitted")
	}
	if len(c.Argv) == 0 {
		return errs.New(errs.EINVAL, "no command to run (give it after --)")
	}
	if len(c.Argv) > maxArgs {
		return errs.New(errs.EINVAL, "the command has %d arguments, over the %d limit", len(c.Argv), maxArgs)
	}
	n := 0
	for i, a := range c.Argv {
		n += len(a) + 1
		if !utf8.ValidString(a) || strings.ContainsRune(a, 0) {
			return errs.New(errs.EINVAL, "argument %d is not valid UTF-8 text", i)
		}
	}
	if n > maxArgvBytes {
		return errs.New(errs.EINVAL, "the command line is %d bytes, over the %d byte limit", n, maxArgvBytes)
	}
	if c.Argv[0] == "" {
		return errs.New(errs.EINVAL, "the command name is empty")
	}
	for what, p := range map[string]string{"command path": c.Path, "working directory": c.Cwd} {
		if !filepath.IsAbs(p) || !utf8.ValidString(p) || strings.ContainsRune(p, 0) {
			return errs.New(errs.EINVAL, "the %s %q is not an absolute path", what, p)
		}
	}
	if c.Timeout < 0 {
		return errs.New(errs.EINVAL, "the timeout is negative")
	}
	if c.Watch != nil {
		return CheckWatch(*c.Watch)
	}
	return nil
}

// Refs returns the task and job a decision of c made: an MCP call record
// (engine/command/mcp) names both, and reads them through this method so
// that it need not import this package.
func (c SubmitTask) Refs(d engine.Decision) (jobID, taskID string) {
	ref := engine.AnswerOf(c, d)
	return ref.JobID, ref.TaskID
}

// Decide implements engine.Decider. Its Value is a TaskRef.
func (c SubmitTask) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := c.Validate(); err != nil {
		return engine.Decision{}, err
	}
	dec, err := c.Job.Decide(v, now)
	if err != nil {
		return engine.Decision{}, err
	}
	ref := TaskRef{TaskID: v.NewID(), JobID: engine.AnswerOf(c.Job, dec)}
	dec.Emits = append(dec.Emits, engine.Emit{Stream: taskStream(ref.TaskID), Payload: &events.TaskSubmitted{
		JobID: ref.JobID, Argv: c.Argv, Path: c.Path, Cwd: c.Cwd, TimeoutMS: c.Timeout.Milliseconds(), Watch: c.Watch,
	}})
	return c.Answer(dec, ref), nil
}

// StartTask records that the task's command runs.
type StartTask struct {
	TaskID    string
	PID       int
	PIDStart  string
	DaemonPID int
	SpoolPath string
}

// Decide implements engine.Decider.
func (c StartTask) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	t, err := task(v, c.TaskID)
	if err != nil {
		return engine.Decision{}, err
	}
	if t.State != fsm.TaskQueued {
		return engine.Decision{}, errs.New(errs.ESTATE, "task %s is %s; only a queued task starts", c.TaskID, t.State)
	}
	if c.PID <= 0 {
		return engine.Decision{}, errs.New(errs.EINVAL, "bad pid %d", c.PID)
	}
	return engine.Decision{Outcome: command.OutcomeStarted, Emits: []engine.Emit{{Stream: taskStream(c.TaskID),
		Payload: &events.TaskStarted{PID: c.PID, PIDStart: c.PIDStart, DaemonPID: c.DaemonPID, SpoolPath: c.SpoolPath}}}}, nil
}

// StopTask records that the daemon stops a running task's process group,
// and why; the daemon signals the group once it is recorded.
type StopTask struct {
	TaskID string
	Reason string
}

// Decide implements engine.Decider. A task already stopping or ended
// reports already_<state> and appends nothing.
func (c StopTask) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if !isStopReason(c.Reason) {
		return engine.Decision{}, errs.New(errs.EINVAL, "unknown stop reason %q", c.Reason)
	}
	t, err := task(v, c.TaskID)
	if err != nil {
		return engine.Decision{}, err
	}
	switch t.State {
	case fsm.TaskRunning:
	case fsm.TaskQueued:
		return engine.Decision{}, errs.New(errs.ESTATE, "task %s has not started; end it with FinishTask", c.TaskID)
	default:
		return engine.Decision{Outcome: command.Already(t.State)}, nil
	}
	return engine.Decision{Outcome: command.OutcomeStopping, Emits: []engine.Emit{{Stream: taskStream(c.TaskID),
		Payload: &events.TaskStopping{Reason: c.Reason, Signal: "TERM"}}}}, nil
}

func isStopReason(r string) bool {
	for _, s := range StopReasons {
		if s == r {
			return true
		}
	}
	return false
}

// TaskExit is what the daemon saw of a task's process.
type TaskExit struct {
	ExitCode int    // -1 when it ended by a signal or never started
	Signal   string // the signal that ended it ("TERM", "KILL", ...)
	Killed   bool   // KILL was sent after the grace period
	Error    string // why it could not start
	Duration time.Duration
}

// FinishTask ends a task this daemon ran (or never started) and settles
// its job in the same append: exit 0 completes the job, with the output
// as its result artifact, and puts it in its thread's FIFO; any other end
// fails the job with the reason (cancels it when the task was cancelled).
// A job already settled otherwise is left as it is.
type FinishTask struct {
	engine.Answers[string]

	Config command.DeliveryConfig
	TaskID string
	// Unstarted, for a queued task, is the stop reason it ends with
	// instead of starting.
	Unstarted string
	Exit      TaskExit
	Output    events.TaskOutput
	Artifact  *command.Ingested // the spool, ingested; nil when it wrote nothing
}

// Decide implements engine.Decider. Its Value is the outcome.
func (c FinishTask) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	t, err := task(v, c.TaskID)
	if err != nil {
		return engine.Decision{}, err
	}
	if !t.Live() {
		return engine.Decision{Outcome: command.Already(t.State)}, nil
	}
	stop := t.StopReason
	if t.State == fsm.TaskQueued {
		if c.Exit.Error == "" && !isStopReason(c.Unstarted) {
			return engine.Decision{}, errs.New(errs.ESTATE, "task %s never started: name why it ends", c.TaskID)
		}
		stop = c.Unstarted
	}
	outcome := taskOutcome(stop, c.Exit)
	out := c.Output
	if c.Artifact != nil {
		out.ArtifactID = c.Artifact.ArtifactID
	}
	ev := &events.TaskExited{Outcome: outcome, ExitCode: c.Exit.ExitCode, Signal: c.Exit.Signal, Killed: c.Exit.Killed,
		Error: c.Exit.Error, DurationMS: c.Exit.Duration.Milliseconds(), TaskOutput: out}
	emits := []engine.Emit{{Stream: taskStream(t.ID), Payload: ev}}
	var more []engine.Emit
	if t.Watcher() {
		more, err = settleWatcher(c.Config, v, now, t, watchEnd(t, c.ended(t, outcome), c.Output.Tail), c.Artifact)
	} else {
		more, err = settleJob(c.Config, v, now, t, outcome, c.describe(t, outcome), c.Artifact)
	}
	if err != nil {
		return engine.Decision{}, err
	}
	return c.Answer(engine.Decision{Outcome: engine.Outcome(outcome), Emits: append(emits, more...)}, outcome), nil
}

// LoseTask fails closed a task that an earlier daemon left unfinished: it
// is never run again. Its job fails with the reason; whatever output the
// spool kept becomes an artifact.
type LoseTask struct {
	Config      command.DeliveryConfig
	TaskID      string
	Reason      string
	GroupKilled bool
	Output      events.TaskOutput
	Artifact    *command.Ingested
}

// Decide implements engine.Decider.
func (c LoseTask) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := command.CheckText("reason", c.Reason, true); err != nil {
		return engine.Decision{}, err
	}
	t, err := task(v, c.TaskID)
	if err != nil {
		return engine.Decision{}, err
	}
	if !t.Live() {
		return engine.Decision{Outcome: command.Already(t.State)}, nil
	}
	out := c.Output
	if c.Artifact != nil {
		out.ArtifactID = c.Artifact.ArtifactID
	}
	emits := []engine.Emit{{Stream: taskStream(t.ID), Payload: &events.TaskLost{Reason: c.Reason, GroupKilled: c.GroupKilled, TaskOutput: out}}}
	var more []engine.Emit
	if t.Watcher() {
		// Reported to its thread as interrupted, with what it had seen.
		more, err = settleWatcher(c.Config, v, now, t, watchEnd(t, "interrupted: "+c.Reason, out.Tail), c.Artifact)
	} else {
		reason := c.Reason
		if line := lastLine(out.Tail); line != "" {
			reason += "; last output: " + line
		}
		more, err = settleJob(c.Config, v, now, t, TaskLostOutcome, reason, c.Artifact)
	}
	if err != nil {
		return engine.Decision{}, err
	}
	return engine.Decision{Outcome: TaskLostOutcome, Emits: append(emits, more...)}, nil
}

func taskOutcome(stop string, x TaskExit) string {
	switch {
	case x.Error != "":
		return TaskStartFailed
	case stop == StopTimeout || stop == StopJobTimeout:
		return TaskTimedOut
	case stop == StopCancel || stop == StopJobCancelled:
		return TaskCancelled
	case stop == StopDaemon || stop == StopHandover:
		return TaskStopped
	case x.ExitCode == 0 && x.Signal == "":
		return TaskSucceeded
	}
	return TaskFailed
}

// settleJob returns the events that settle a task's job for its outcome:
// complete (with the output artifact, placed in the thread's FIFO),
// cancel, or fail. A job no longer running keeps its state; the output
// artifact is still recorded, kept for min_artifact_ttl.
func settleJob(c command.DeliveryConfig, v engine.View, now time.Time, t *aggregate.Task, outcome, text string, art *command.Ingested) ([]engine.Emit, error) {
	j, err := command.Existing(v, engine.Job, "job", t.JobID)
	if err != nil {
		return nil, err
	}
	if j.State == fsm.JobRunning {
		var d engine.Decision
		switch outcome {
		case TaskSucceeded:
			d, err = command.CompleteJob{Config: c, JobID: j.ID, Summary: text, Artifact: art}.Decide(v, now)
			return d.Emits, err
		case TaskCancelled:
			d, err = command.CancelJob{Config: c, JobID: j.ID, Reason: text}.Decide(v, now)
			if err != nil {
				return nil, err
			}
			return append(d.Emits, keepArtifact(c, now, j.ID, art)...), nil
		default:
			d, err = command.FailJob{JobID: j.ID, Reason: text}.Decide(v, now)
			if err != nil {
				return nil, err
			}
			return append(d.Emits, keepArtifact(c, now, j.ID, art)...), nil
		}
	}
	return keepArtifact(c, now, j.ID, art), nil
}

// keepArtifact records an output artifact that no batch references: it
// is kept for min_artifact_ttl (or longer when pinned), then collected.
func keepArtifact(c command.DeliveryConfig, now time.Time, jobID string, a *command.Ingested) []engine.Emit {
	if a == nil {
		return nil
	}
	return []engine.Emit{{Stream: events.StreamID{Kind: events.KindArtifact, ID: a.ArtifactID}, Payload: &events.ArtifactIngested{
		SourceJobID: jobID, ManagedPath: a.ManagedPath, ManifestPath: a.ManifestPath, ContentType: a.ContentType,
		SizeBytes: a.SizeBytes, SHA256: a.SHA256, MinRetentionUntil: now.Add(c.MinArtifactTTL),
	}}}
}

// describe is the job's result summary or fail reason for a task's end:
// one line naming the command, how it ended, and the last line it wrote.
func (c FinishTask) describe(t *aggregate.Task, outcome string) string {
	s := c.ended(t, outcome)
	if line := lastLine(c.Output.Tail); line != "" {
		s += "; last output: " + line
	}
	return s
}

// ended says how a task ended: the command, the way and the time.
func (c FinishTask) ended(t *aggregate.Task, outcome string) string {
	cmd := "`" + t.CommandLine() + "`"
	took := "after " + c.Exit.Duration.Round(time.Millisecond).String()
	how := "TERM"
	if c.Exit.Killed {
		how = "TERM, then KILL after the grace period"
	}
	var s string
	switch outcome {
	case TaskSucceeded:
		s = fmt.Sprintf("%s exited 0 %s; %s of output", cmd, took, plural.Count(c.Output.OutputBytes, "byte", "bytes"))
	case TaskFailed:
		if c.Exit.Signal != "" {
			s = fmt.Sprintf("%s was ended by signal %s %s", cmd, c.Exit.Signal, took)
		} else {
			s = fmt.Sprintf("%s exited with status %d %s", cmd, c.Exit.ExitCode, took)
		}
	case TaskStartFailed:
		s = fmt.Sprintf("%s could not start: %s", cmd, c.Exit.Error)
	case TaskTimedOut:
		if t.StopReason == StopJobTimeout {
			s = fmt.Sprintf("the job reached its job_timeout; %s was stopped with %s %s", cmd, how, took)
		} else {
			s = fmt.Sprintf("%s timed out (--timeout %s) and was stopped with %s", cmd, (time.Duration(t.TimeoutMS) * time.Millisecond).String(), how)
		}
	case TaskCancelled:
		if t.State == fsm.TaskQueued {
			s = fmt.Sprintf("cancelled before %s started", cmd)
		} else {
			s = fmt.Sprintf("cancelled: %s was stopped with %s %s", cmd, how, took)
		}
	case TaskStopped:
		why := "the daemon stopped"
		if c.Unstarted == StopHandover || t.StopReason == StopHandover {
			why = "the daemon was restarted with --stop-tasks"
		}
		if t.State == fsm.TaskQueued {
			s = fmt.Sprintf("%s before %s started; it was not run and will not be", why, cmd)
		} else {
			s = fmt.Sprintf("%s while %s ran: it was stopped with %s %s and will not be run again", why, cmd, how, took)
		}
	}
	return s
}

// lastLine is the last non-blank line of an output tail, cut to the
// excerpt bound, with control characters dropped.
func lastLine(tail string) string {
	tail = strings.TrimRight(tail, " \t\r\n")
	if i := strings.LastIndexByte(tail, '\n'); i >= 0 {
		tail = tail[i+1:]
	}
	tail = strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return -1
		}
		return r
	}, tail)
	return cut(strings.TrimSpace(tail), excerpt)
}

// cut shortens s to at most n bytes on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - len("…")
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func taskStream(id string) events.StreamID { return events.StreamID{Kind: events.KindTask, ID: id} }

func task(v engine.View, id string) (*aggregate.Task, error) {
	return command.Existing(v, engine.Task, "task", id)
}
