package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/aggregate"
	taskcmd "github.com/cbth-dev/cbth/engine/command/task"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
)

// The watcher's tools (spec/mcp.md): watch_start runs a long-lived
// command as task_run does, under the same rules, and wakes the thread on
// the lines that match its patterns and at its end; watch_stop stops it;
// task_output reads a task's output when the agent chooses, never by
// polling.

type watchStartIn struct {
	Task    string   `json:"task,omitempty" jsonschema:"a named task the user defined (task_list shows them); give this or argv"`
	Args    []string `json:"args,omitempty" jsonschema:"with task: extra arguments, each one the task takes"`
	Argv    []string `json:"argv,omitempty" jsonschema:"the command and its arguments, one element each, as exec takes them (no shell unless argv names one); allowed only as a whole by a rule of the user"`
	WakeOn  []string `json:"wake_on,omitempty" jsonschema:"regular expressions (RE2 syntax, at most 16 of at most 1024 bytes); a line of the output that matches one wakes you with a new turn; none: only the end does"`
	Summary string   `json:"summary,omitempty" jsonschema:"one line saying what is watched (default: the command line)"`
	Timeout string   `json:"timeout,omitempty" jsonschema:"stop the command after this long, as a duration like 30m or 2h (default: no limit of its own)"`
}

type taskIn struct {
	TaskID string `json:"task_id" jsonschema:"the task, as task_run or watch_start answered"`
}

type taskOutputIn struct {
	TaskID   string `json:"task_id" jsonschema:"the task, as task_run or watch_start answered"`
	FromLine int64  `json:"from_line,omitempty" jsonschema:"read from this line of the output (from 1), such as a wake names"`
	Offset   *int64 `json:"offset,omitempty" jsonschema:"or read from this byte of the output, such as an earlier read's next_offset"`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"at most this many bytes (default 16384, at most 65536); without from_line or offset, the last ones"`
}

func (t tools) addWatch(add func(string, string, *jsonschema.Schema, *sdk.ToolAnnotations, func(context.Context, caller, json.RawMessage) (string, any, error))) {
	no, yes := false, true
	add(ToolWatchStart, "Run a long-lived command in the background (a dev server, a log tail, a CI watch), outside this sandbox, as the user, in this thread's working directory, and watch its output: a line that matches one of wake_on wakes this thread with a new turn (at most a few times an hour; more matches are counted into the next wake), and so does its end, whatever its exit status. Then end your turn; do not poll. The same rules as task_run decide what may run.",
		schemaFor[watchStartIn](), &sdk.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &yes}, t.watchStart)
	add(ToolWatchStop, "Stop one of this thread's watchers (or tasks): TERM, then KILL; its end comes into this thread as its final update.",
		schemaFor[taskIn](), &sdk.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no}, t.watchStop)
	add(ToolTaskOutput, "Read the output of one of this thread's tasks or watchers: from a line (from_line, as a wake names it) or a byte offset, or its last bytes; at most max_bytes. Secrets are redacted. Reading starts nothing.",
		schemaFor[taskOutputIn](), &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}, t.taskOutput)
}

func (t tools) watchStart(ctx context.Context, c caller, args json.RawMessage) (string, any, error) {
	var in watchStartIn
	named, err := decode(args, &in, threadKeys)
	if err != nil {
		return "", nil, err
	}
	// The patterns' bounds first: a bad one runs nothing and is
	// recorded by no one (the daemon checks them again).
	if _, err := taskcmd.Compile(in.WakeOn); err != nil {
		return "", nil, err
	}
	a, err := t.command(c, named, taskRunIn{Task: in.Task, Args: in.Args, Argv: in.Argv, Summary: in.Summary, Timeout: in.Timeout})
	if err != nil {
		return "", nil, err
	}
	a.WakeOn = in.WakeOn
	rep, err := t.d.WatchStart(ctx, a)
	if err != nil {
		return "", nil, err
	}
	when := "when it ends, whatever its exit status"
	if len(in.WakeOn) > 0 {
		n := 0
		if rep.Watch != nil {
			n = rep.Watch.WakesPerHour
		}
		when = fmt.Sprintf("when a line of its output matches %s (at most %s an hour; further matches are counted into the next wake) and when it ends, whatever its exit status",
			strings.Join(in.WakeOn, " or "), plural.Count(n, "wake", "wakes"))
	}
	return fmt.Sprintf("Watcher %s (job %s) is %s: %s. This thread is woken %s; %s. Nothing more to do now: end your turn; do not wait or poll. When woken, read its output with task_output; stop it with watch_stop.",
		rep.TaskID, rep.JobID, rep.State, aggregate.CommandLine(rep.Argv), when, rep.Delivery.Hint), rep, nil
}

func (t tools) watchStop(ctx context.Context, c caller, args json.RawMessage) (string, any, error) {
	var in taskIn
	if _, err := decode(args, &in, threadKeys); err != nil {
		return "", nil, err
	}
	if in.TaskID == "" {
		return "", nil, errs.New(errs.EINVAL, "task_id is required")
	}
	rep, err := t.d.WatchStop(ctx, api.MCPTaskArgs{Caller: c, TaskID: in.TaskID})
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("Task %s: %s (now %s). A watcher's end comes into this thread as its final update.", rep.Task.TaskID, rep.Outcome, rep.Task.State), rep, nil
}

func (t tools) taskOutput(ctx context.Context, c caller, args json.RawMessage) (string, any, error) {
	var in taskOutputIn
	if _, err := decode(args, &in, threadKeys); err != nil {
		return "", nil, err
	}
	if in.TaskID == "" {
		return "", nil, errs.New(errs.EINVAL, "task_id is required")
	}
	rep, err := t.d.TaskOutput(ctx, api.MCPTaskOutputArgs{Caller: c, TaskOutputArgs: api.TaskOutputArgs{
		TaskID: in.TaskID, FromLine: in.FromLine, Offset: in.Offset, MaxBytes: in.MaxBytes}})
	if err != nil {
		return "", nil, err
	}
	return outputMessage(rep), rep, nil
}

// outputMessage says where a read of a task's output falls (the text is
// in data, once).
func outputMessage(r api.TaskOutputReply) string {
	if r.Data == "" && r.Bytes == 0 {
		return fmt.Sprintf("Task %s (%s) has written no output yet.", r.TaskID, r.State)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Output of task %s (%s), bytes %d to %d of %d", r.TaskID, r.State, r.Offset, r.Next, r.Bytes)
	if r.Line > 0 {
		fmt.Fprintf(&b, ", from line %d", r.Line)
	}
	b.WriteString("; the text is in data.")
	if r.Dropped {
		fmt.Fprintf(&b, " What was asked for is older than what was kept, which starts at byte %d.", r.KeptFrom)
	}
	switch {
	case r.End:
		b.WriteString(" That is the end of it: the task has ended.")
	case r.Next < r.Bytes:
		fmt.Fprintf(&b, " More follows: read on with offset %d.", r.Next)
	}
	return b.String()
}
