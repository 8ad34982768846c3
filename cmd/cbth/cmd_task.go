package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
)

// TaskCmd groups the task runner: the daemon runs a command for a job
// and reports its end as the job's outcome.
type TaskCmd struct {
	Run     TaskRunCmd     `cmd:"" help:"Submit a job and have the daemon run a command for it; its exit completes or fails the job."`
	List    TaskListCmd    `cmd:"" help:"List tasks."`
	Inspect TaskInspectCmd `cmd:"" help:"Show one task: its command, state, exit status and output tail."`
	Cancel  TaskCancelCmd  `cmd:"" help:"Stop a task (TERM, then KILL after kill_grace); its job is cancelled (a watcher's end is its final update)."`
	Logs    TaskLogsCmd    `cmd:"" help:"Print a task's output; -f follows it until the task ends."`
	Output  TaskOutputCmd  `cmd:"" help:"Print part of a task's output: from a line or a byte offset, or its last bytes; at most --max-bytes."`
}

// TaskRunCmd is `cbth task run`.
type TaskRunCmd struct {
	Target   command.Target `help:"Where the result is delivered: ${target_list} (default: desktop for a thread bound to a Desktop heartbeat, else cli)." predictor:"target" placeholder:"${target_placeholder}"`
	ThreadID string         `help:"The conversation thread the result goes back to (default: $CODEX_THREAD_ID, the Codex thread whose shell runs this)." name:"thread-id"`
	TaskKind string         `help:"What kind of task this is (free-form)." name:"task-kind" default:"task"`
	Summary  string         `help:"One line that says what the job is (default: the command line)."`
	Timeout  time.Duration  `help:"Stop the command after this long (TERM, then KILL after kill_grace); 0 for none." default:"0s"`
	Cwd      string         `help:"Directory to run the command in (default: the current one)." type:"path"`
	// A watcher (spec/tasks.md, "Watchers").
	WakeOn       []string `help:"Run the command as a watcher: each output line that matches REGEX (RE2 syntax) wakes the thread; repeat for more patterns (at most 16)." name:"wake-on" placeholder:"REGEX" sep:"none"`
	Watch        bool     `help:"Run the command as a watcher even without --wake-on: its end wakes the thread whatever its exit status."`
	WakesPerHour int      `help:"A watcher's wakes in any hour, at most (1 to 600); more matches are counted into its next update." name:"wakes-per-hour" default:"6"`
	policyFlags
	Command []string `arg:"" passthrough:"partial" help:"The command and its arguments, after --." name:"command"`
}

// Validate refuses a --target --target may not name.
func (c *TaskRunCmd) Validate() error { return checkFlagTarget(c.Target) }

// Run submits the task.
func (c *TaskRunCmd) Run(env *Env) error {
	if len(c.Command) > 0 && c.Command[0] == "--" {
		c.Command = c.Command[1:] // kong passes the -- that ended the flags through
	}
	if len(c.Command) == 0 || c.Command[0] == "" {
		return errs.New(errs.EINVAL, "no command to run: give it after --")
	}
	thread, err := env.threadID(c.ThreadID)
	if err != nil {
		return err
	}
	a := api.TaskRunArgs{SubmitArgs: api.SubmitArgs{TargetKind: c.Target, SourceThreadID: thread, TaskKind: c.TaskKind, TaskSummary: c.Summary},
		Argv: c.Command, Env: taskEnv(env), TimeoutMS: c.Timeout.Milliseconds()}
	if c.Timeout < 0 {
		return errs.New(errs.EINVAL, "--timeout must not be negative")
	}
	if a.Policy, a.Metadata, err = c.policyFlags.read(); err != nil {
		return err
	}
	if c.Watch || len(c.WakeOn) > 0 {
		a.Watch = &api.WakeArgs{WakeOn: c.WakeOn, WakesPerHour: c.WakesPerHour}
	}
	if a.Cwd = c.Cwd; a.Cwd == "" {
		if a.Cwd, err = os.Getwd(); err != nil {
			return errs.Wrap(errs.EINVAL, err, "current directory")
		}
	}
	if fi, err := os.Stat(a.Cwd); err != nil || !fi.IsDir() {
		return errs.New(errs.ENOENT, "the working directory %s does not exist", a.Cwd)
	}
	// The command is found as the user's shell would find it: on this
	// client's PATH, or relative to the working directory.
	name := c.Command[0]
	if !strings.Contains(name, "/") {
		if name, err = exec.LookPath(name); err != nil {
			return errs.New(errs.ENOENT, "%s: command not found on PATH", c.Command[0])
		}
	}
	if !filepath.IsAbs(name) {
		name = filepath.Join(a.Cwd, name)
	}
	if fi, err := os.Stat(name); err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return errs.New(errs.ENOENT, "%s is not an executable file", name)
	}
	a.Path = name
	if a.TaskSummary == "" {
		a.TaskSummary = aggregate.CommandLine(c.Command)
	}
	v, err := call(env, api.TaskRun, a)
	if err != nil {
		return err
	}
	return env.emit(v, func(w io.Writer) {
		what := "task"
		if v.Watch != nil {
			what = "watcher"
		}
		fmt.Fprintf(w, "%s %s (job %s) %s: %s\n", what, v.TaskID, v.JobID, v.State, aggregate.CommandLine(v.Argv))
		fmt.Fprintf(env.Stderr, "follow it with: cbth task logs -f %s\n", v.TaskID)
	})
}

// taskEnv is the environment the task gets: this command's own. Text
// crosses the socket as given or not at all, so a variable that is not
// valid UTF-8 is left out, with a warning.
func taskEnv(env *Env) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !utf8.ValidString(kv) {
			name, _, _ := strings.Cut(kv, "=")
			fmt.Fprintf(env.Stderr, "cbth: warning: %q is not passed to the task: its value is not valid UTF-8\n", name)
			continue
		}
		out = append(out, kv)
	}
	return out
}

// TaskListCmd is `cbth task list`.
type TaskListCmd struct {
	State string `help:"Only tasks in this state (live: queued, running or stopping)." enum:",queued,running,stopping,exited,lost,live" default:""`
	Paging
}

// Run lists tasks.
func (c *TaskListCmd) Run(env *Env) error {
	list, err := allPages(c.Paging, func(after string, limit int) ([]query.TaskRow, string, error) {
		page, err := call(env, api.TaskList, api.TaskListArgs{State: c.State, After: after, Limit: limit})
		return page.Tasks, page.Next, err
	})
	if err != nil {
		return err
	}
	return env.emit(list, func(w io.Writer) {
		if len(list) == 0 {
			fmt.Fprintln(w, "no tasks")
			return
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TASK\tSTATE\tOUTCOME\tEXIT\tWAKES\tJOB\tCREATED\tCOMMAND")
		for _, r := range list {
			exit, wakes := "-", "-"
			if r.ExitCode != nil {
				exit = fmt.Sprint(*r.ExitCode)
			}
			if r.Watch {
				wakes = fmt.Sprint(r.Wakes)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.TaskID, r.State, r.Outcome, exit, wakes, r.JobID, r.CreatedAt.Local().Format("01-02 15:04:05"), r.Command)
		}
		tw.Flush()
	})
}

// TaskInspectCmd is `cbth task inspect`.
type TaskInspectCmd struct {
	TaskID string `arg:"" help:"The task." name:"task_id"`
}

// Run prints the task.
func (c *TaskInspectCmd) Run(env *Env) error {
	v, err := call(env, api.TaskInspect, api.TaskArgs{TaskID: c.TaskID})
	if err != nil {
		return err
	}
	return env.emit(v, func(w io.Writer) { printTask(w, v) })
}

func printTask(w io.Writer, v query.TaskView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "task\t%s\n", v.TaskID)
	fmt.Fprintf(tw, "job\t%s (%s)\n", v.JobID, v.Job.State)
	fmt.Fprintf(tw, "state\t%s\n", v.State)
	fmt.Fprintf(tw, "command\t%s\n", aggregate.CommandLine(v.Argv))
	fmt.Fprintf(tw, "cwd\t%s\n", v.Cwd)
	if v.PID > 0 {
		fmt.Fprintf(tw, "pid\t%d\n", v.PID)
	}
	if w := v.Watch; w != nil {
		fmt.Fprintf(tw, "wakes on\t%s\n", strings.Join(w.WakeOn, " | "))
		fmt.Fprintf(tw, "wakes\t%d (at most %d an hour); %d matching lines seen, %d folded since the last wake\n", w.Wakes, w.WakesPerHour, w.Matched, w.Folded)
		if w.NextWakeAt != nil {
			fmt.Fprintf(tw, "next wake\t%s\n", w.NextWakeAt.Local().Format(time.RFC3339))
		}
	}
	if v.Outcome != "" {
		how := v.Outcome
		switch {
		case v.ExitCode != nil:
			how += fmt.Sprintf(", exit status %d", *v.ExitCode)
		case v.Signal != "":
			how += ", signal " + v.Signal
		}
		fmt.Fprintf(tw, "outcome\t%s after %s\n", how, time.Duration(v.DurationMS)*time.Millisecond)
	}
	for _, l := range []struct{ k, v string }{{"stopped", v.StopReason}, {"error", v.Error}, {"lost", v.LostReason},
		{"job result", v.Job.ResultSummary}, {"job failed", v.Job.FailReason}, {"job cancelled", v.Job.CancelReason}} {
		if l.v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", l.k, l.v)
		}
	}
	fmt.Fprintf(tw, "output\t%s (%d spooled%s)\n", plural.Count(v.OutputBytes, "byte", "bytes"), v.SpoolBytes, map[bool]string{true: ", over the spool cap"}[v.SpoolTruncated])
	if v.Artifact != nil {
		fmt.Fprintf(tw, "artifact\t%s (%s)\n", v.Artifact.ArtifactID, v.Artifact.ManagedPath)
	}
	tw.Flush()
	if v.OutputTail != "" {
		fmt.Fprintf(w, "--- output tail ---\n%s", v.OutputTail)
		if !strings.HasSuffix(v.OutputTail, "\n") {
			fmt.Fprintln(w)
		}
	}
}

// TaskCancelCmd is `cbth task cancel`.
type TaskCancelCmd struct {
	TaskID string `arg:"" help:"The task." name:"task_id"`
}

// Run cancels the task and waits until its end is recorded.
func (c *TaskCancelCmd) Run(env *Env) error {
	rep, err := call(env, api.TaskCancel, api.TaskArgs{TaskID: c.TaskID})
	if err != nil {
		return err
	}
	return env.emit(rep, func(w io.Writer) {
		fmt.Fprintf(w, "task %s %s (%s)\n", rep.Task.TaskID, rep.Task.State, rep.Outcome)
	})
}

// TaskLogsCmd is `cbth task logs`.
type TaskLogsCmd struct {
	TaskID string `arg:"" help:"The task." name:"task_id"`
	Follow bool   `short:"f" help:"Keep printing output as it comes until the task ends."`
}

// logChunk is one line of `task logs -f --json`.
type logChunk struct {
	TaskID string        `json:"task_id"`
	Offset int64         `json:"offset"`
	Data   string        `json:"data"`
	State  fsm.TaskState `json:"state"`
}

// Run prints the output. It reads the files itself (the spool while the
// task runs, its artifact after): they are this user's, and output can
// be far larger than a socket frame. The spool rotates (spec/tasks.md):
// a follower that finds a new segment finishes the one it was reading,
// now SPOOL.1, first.
func (c *TaskLogsCmd) Run(env *Env) error {
	var (
		abs     int64  // the output's bytes printed (or known skipped) so far
		seg     uint64 // the spool segment being read (its inode), 0 before one
		segOff  int64  // how far into it
		unknown bool   // a segment went by unread: abs is no longer known
		all     []byte
	)
	out := func(b []byte, state fsm.TaskState) error {
		if len(b) == 0 && state == "" {
			return nil
		}
		defer func() { abs += int64(len(b)) }()
		switch {
		case env.JSON && c.Follow:
			return json.NewEncoder(env.Stdout).Encode(logChunk{TaskID: c.TaskID, Offset: abs, Data: strings.ToValidUTF8(string(b), "\uFFFD"), State: state})
		case env.JSON:
			all = append(all, b...)
			return nil
		}
		_, err := env.Stdout.Write(b)
		return err
	}
	note := func(s string) {
		if !env.JSON {
			fmt.Fprintln(env.Stderr, s)
		}
	}
	for {
		v, err := call(env, api.TaskInspect, api.TaskArgs{TaskID: c.TaskID})
		if err != nil {
			return err
		}
		if v.State.Live() && v.SpoolPath != "" {
			if err := readLive(v.SpoolPath, &seg, &segOff, &unknown, out); err != nil {
				return errs.Wrap(errs.EINTERNAL, err, "read the task's output")
			}
			if !c.Follow {
				if env.JSON {
					return env.emit(map[string]any{"task_id": v.TaskID, "state": v.State, "output": strings.ToValidUTF8(string(all), "\uFFFD"),
						"output_bytes": abs, "spool_bytes": abs, "spool_truncated": false}, nil)
				}
				return nil
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if v.State.Live() {
			if !c.Follow {
				return nil
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		// Ended: the artifact is the spool, the last SpoolBytes of the
		// output; what it does not hold was counted only.
		start := v.OutputBytes - v.SpoolBytes
		src := ""
		if v.Artifact != nil && v.Artifact.State == fsm.ArtifactStored {
			src = v.Artifact.ManagedPath
		}
		switch {
		case src != "":
			from := int64(0)
			switch {
			case unknown:
				// Where this follower's reading falls in the output is
				// not known (it began after a rotation, or missed one):
				// the kept output again, whole.
				note(fmt.Sprintf("[cbth: the task ended; its kept output, the last %s, follows whole]", plural.Count(v.SpoolBytes, "byte", "bytes")))
			case abs >= start:
				from = abs - start
			case start > 0:
				note(fmt.Sprintf("[cbth: %s of output before the spool's were not kept (spool_max); what follows is the last %s]",
					plural.Count(start-abs, "byte", "bytes"), plural.Count(v.SpoolBytes, "byte", "bytes")))
			}
			b, err := readFrom(src, from)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return errs.Wrap(errs.EINTERNAL, err, "read the task's output")
			}
			if err := out(b, ""); err != nil {
				return err
			}
		case abs == 0 && v.OutputTail != "":
			// The output's artifact is gone (collected after its
			// retention): the tail in the task's record is what is left.
			note(fmt.Sprintf("[cbth: the task's output artifact is gone; what follows is its last %s]", plural.Count(len(v.OutputTail), "byte", "bytes")))
			if err := out([]byte(v.OutputTail), ""); err != nil {
				return err
			}
		}
		if env.JSON && !c.Follow {
			return env.emit(map[string]any{"task_id": v.TaskID, "state": v.State, "output": strings.ToValidUTF8(string(all), "\uFFFD"),
				"output_bytes": v.OutputBytes, "spool_bytes": v.SpoolBytes, "spool_truncated": v.SpoolTruncated}, nil)
		}
		return out(nil, v.State)
	}
}

// readLive prints what a running task's spool holds past where the last
// read stopped (the segment seg, at off), following a rotation: the
// segment read before is SPOOL.1 now, and its rest comes first. Each
// segment is read from the file whose inode was checked, opened once: a
// rotation between a look at the path and a read of it would otherwise
// read the new segment at the old one's offset.
func readLive(spool string, seg *uint64, off *int64, unknown *bool, out func([]byte, fsm.TaskState) error) error {
	open := func(p string) (*os.File, uint64) {
		f, err := os.Open(p)
		if err != nil {
			return nil, 0
		}
		if fi, err := f.Stat(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				return f, uint64(st.Ino)
			}
		}
		f.Close()
		return nil, 0
	}
	f, cur := open(spool)
	if f == nil {
		return nil // not started yet, or rotating this instant
	}
	defer f.Close()
	if *seg == 0 {
		// A first read: the older segment, then this one.
		if older, ino := open(spool + ".1"); older != nil {
			older.Close()
			*seg, *off = ino, 0
			*unknown = true // what came before it was dropped
		} else {
			*seg, *off = cur, 0
		}
	}
	if *seg != cur {
		if older, ino := open(spool + ".1"); older != nil && ino == *seg {
			b, err := readAt(older, *off)
			older.Close()
			if err != nil {
				return err
			}
			if err := out(b, ""); err != nil {
				return err
			}
		} else {
			if older != nil {
				older.Close()
			}
			*unknown = true // more than one rotation went by
		}
		*seg, *off = cur, 0
	}
	b, err := readAt(f, *off)
	if err != nil {
		return err
	}
	*off += int64(len(b))
	return out(b, "")
}

// readAt reads an open file from offset to its current end.
func readAt(f *os.File, off int64) ([]byte, error) {
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// readFrom reads a file from offset to its current end.
func readFrom(path string, off int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// TaskOutputCmd is `cbth task output`: one bounded read of a task's
// output, as the agent's task_output reads it (spec/tasks.md).
type TaskOutputCmd struct {
	TaskID   string `arg:"" help:"The task." name:"task_id"`
	FromLine int64  `help:"Read from this line of the output (from 1)." name:"from-line"`
	Offset   int64  `help:"Read from this byte of the output (default: the last --max-bytes)." default:"-1"`
	MaxBytes int    `help:"Read at most this many bytes (at most 65536)." name:"max-bytes" default:"16384"`
}

// Run prints the read: the text on stdout, where it falls on stderr.
func (c *TaskOutputCmd) Run(env *Env) error {
	a := api.TaskOutputArgs{TaskID: c.TaskID, FromLine: c.FromLine, MaxBytes: c.MaxBytes}
	if c.MaxBytes < 1 {
		return errs.New(errs.EINVAL, "--max-bytes must be between 1 and %d", api.MaxOutputRead)
	}
	if c.Offset >= 0 {
		a.Offset = &c.Offset
	} else if c.Offset != -1 {
		return errs.New(errs.EINVAL, "--offset must not be negative")
	}
	rep, err := call(env, api.TaskOutput, a)
	if err != nil {
		return err
	}
	return env.emit(rep, func(w io.Writer) {
		io.WriteString(w, rep.Data)
		where := fmt.Sprintf("[cbth: bytes %d to %d of %d", rep.Offset, rep.Next, rep.Bytes)
		if rep.Line > 0 {
			where += fmt.Sprintf(", lines %d to %d", rep.Line, max(rep.Line, rep.NextLine-1))
		}
		switch {
		case rep.End:
			where += "; the end"
		case rep.Next < rep.Bytes:
			where += fmt.Sprintf("; more from --offset %d", rep.Next)
		}
		if rep.Dropped {
			where += fmt.Sprintf("; the spool kept only from byte %d", rep.KeptFrom)
		}
		fmt.Fprintln(env.Stderr, where+"]")
	})
}
