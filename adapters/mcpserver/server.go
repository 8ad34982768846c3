// Package mcpserver is cbth as an MCP server for the agent inside a Codex
// thread (spec/mcp.md): `cbth mcp serve`, one process per Codex session on
// stdio, built on the official Go SDK. Codex runs it outside the tool
// sandbox, so it reaches the daemon's socket where the agent's own shell
// cannot.
//
// It decides nothing. Each tools/call is bound to the thread Codex names
// in the call's _meta (never to an argument the model wrote), checked for
// shape, and relayed to the daemon, which chooses the target, applies the
// [mcp] task_allow rules and records the call. Every failure is a tool
// error result with a stable code, so the model reads the refusal and
// the user sees it in the transcript.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Daemon is what the tools ask of cbth's daemon: the mcp.* operations of
// adapters/ipc/api, reached however the caller reaches the daemon.
type Daemon interface {
	JobSubmit(context.Context, api.MCPSubmitArgs) (api.MCPSubmitReply, error)
	TaskRun(context.Context, api.MCPTaskRunArgs) (api.MCPTaskRunReply, error)
	JobStatus(context.Context, api.MCPJobArgs) (query.JobView, error)
	JobList(context.Context, api.MCPJobListArgs) (query.JobPage, error)
	JobCancel(context.Context, api.MCPJobArgs) (api.TransitionReply, error)
	WatchStart(context.Context, api.MCPTaskRunArgs) (api.MCPTaskRunReply, error)
	WatchStop(context.Context, api.MCPTaskArgs) (api.TaskCancelReply, error)
	TaskOutput(context.Context, api.MCPTaskOutputArgs) (api.TaskOutputReply, error)

	DesktopPreflight(context.Context, api.MCPDesktopArgs) (api.PreflightReply, error)
	DesktopNoteArmPending(context.Context, api.MCPArmArgs) (api.ArmPendingReply, error)
	DesktopNoteArm(context.Context, api.MCPArmArgs) (api.ArmReply, error)
	DesktopNotePaused(context.Context, api.MCPPausedArgs) (api.PausedReply, error)
	DesktopNoteBoundaryCrossed(context.Context, api.MCPBoundaryArgs) (api.BoundaryReply, error)
	DesktopReadArtifact(context.Context, api.MCPReadArtifactArgs) (api.ReadArtifactReply, error)
	DesktopValidate(context.Context, api.MCPValidateArgs) (api.MCPValidateReply, error)
}

// Config is what the server runs with.
type Config struct {
	Daemon  Daemon
	Version string
	// Inbox is the cbth home's Desktop inbox, which the read-only
	// Desktop tools read as the CLI's read helpers do.
	Inbox string
	// Fingerprints are this cbth's validation fingerprints, by read
	// transport (projections/inbox.Observe).
	Fingerprints map[string]string
	// Rules reads the user's [mcp] rules, for task_list and to find a
	// named task's command (the daemon reads them again and decides).
	Rules func() (home.MCP, error)
	Log   *slog.Logger
}

// Tool names: the names Codex shows the model in the mcp__cbth namespace.
const (
	ToolJobSubmit = "job_submit"
	ToolTaskRun   = "task_run"
	ToolJobStatus = "job_status"
	ToolJobList   = "job_list"
	ToolJobCancel = "job_cancel"
	ToolTaskList  = "task_list"
	// The watcher's tools (watch.go).
	ToolWatchStart = "watch_start"
	ToolWatchStop  = "watch_stop"
	ToolTaskOutput = "task_output"
)

// MaxArguments bounds a call's encoded arguments. The largest legitimate
// call is a task_run argv; a bigger one is refused whole (EMSGSIZE)
// before anything reads it.
const MaxArguments = 64 << 10

// MaxArg bounds one element of a task_run argv or args: a test name, a
// path or a short script fits; a whole program smuggled as an argument
// does not (EMSGSIZE).
const MaxArg = 4 << 10

// instructions is what the server tells the client (and through it the
// model) about itself in the initialize answer.
const instructions = `cbth runs long work in the background for this conversation and brings the result back into this same thread as a new turn, once, when it is done. Use task_run for a command that takes long (tests, builds, waiting on CI or a reviewer) instead of running and polling it yourself; then end your turn: do not wait or poll. Use watch_start for a long-lived command (a dev server, a log, a CI run) whose output you wait on: you are woken when a line matches one of its wake_on patterns and when it ends, and read its output with task_output when woken. Use job_submit when something outside will report the outcome. job_status and job_list show this thread's jobs.`

// New returns the server; Run serves it.
func New(cfg Config) *sdk.Server {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "cbth", Title: "cbth background jobs", Version: cfg.Version},
		&sdk.ServerOptions{Instructions: instructions, Logger: cfg.Log})
	t := tools{d: cfg.Daemon, cfg: cfg}
	var toolNames []string
	no, yes := false, true
	add := func(name, desc string, schema *jsonschema.Schema, ann *sdk.ToolAnnotations, h func(context.Context, caller, json.RawMessage) (string, any, error)) {
		s.AddTool(&sdk.Tool{Name: name, Description: desc, InputSchema: schema, Annotations: ann}, t.handler(h))
		toolNames = append(toolNames, name)
	}
	add(ToolJobSubmit, "Submit a background job for this conversation; when something outside reports it done (cbth job complete), its result comes back into this thread as a new turn.",
		schemaFor[submitIn](), &sdk.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no}, t.submit)
	add(ToolTaskRun, "Run a command in the background, outside this sandbox, as the user, in this thread's working directory; when it exits, its outcome and output come back into this thread as a new turn. Give either task (a named task the user defined: task_list shows them) with the args it takes, or argv. Only what the user's rules in cbth's config allow runs, whole ([mcp] task_allow, [mcp.tasks]); anything else is refused and nothing runs.",
		schemaFor[taskRunIn](), &sdk.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &yes}, t.taskRun)
	add(ToolTaskList, "List the named tasks the user defined for task_run: each one's command and the extra arguments it takes.",
		schemaFor[taskListIn](), &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}, t.taskList)
	add(ToolJobStatus, "Show one of this thread's background jobs: its status, and where its result went.",
		schemaFor[jobIn](), &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}, t.status)
	add(ToolJobList, "List this thread's background jobs.",
		schemaFor[listIn](), &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}, t.list)
	add(ToolJobCancel, "Cancel one of this thread's background jobs (and stop its command if one runs).",
		schemaFor[cancelIn](), &sdk.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no}, t.cancel)
	t.addWatch(add)
	t.addDesktop(add)
	known := func(name string) bool { return slices.Contains(toolNames, name) }
	names := slices.Clone(toolNames)
	// The SDK answers a call of an unknown tool with a JSON-RPC error;
	// this answers it as every other refusal, a tool error with a code.
	s.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if r, ok := req.(*sdk.CallToolRequest); ok && method == "tools/call" && !known(r.Params.Name) {
				return failure(errs.New(errs.ENOENT, "no tool %q: cbth has %s", r.Params.Name, strings.Join(names, ", "))), nil
			}
			return next(ctx, method, req)
		}
	})
	return s
}

// schemaFor is the input schema of T, which closes the object: an
// argument the tool does not take is refused, not ignored.
func schemaFor[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: schema of %T: %v", *new(T), err))
	}
	s.AdditionalProperties = &jsonschema.Schema{Not: &jsonschema.Schema{}}
	return s
}

type submitIn struct {
	TaskKind       string `json:"task_kind" jsonschema:"what kind of work the job is, in a word: ci, build, review, deploy"`
	Summary        string `json:"summary" jsonschema:"one line saying what the job is"`
	IdempotencyKey string `json:"idempotency_key,omitempty" jsonschema:"submitting again with the same key returns the first job instead of a new one"`
	policyIn
}

// policyIn is a job's delivery policy: what continuing the conversation
// with its result may need. Left out, each is the strict default.
type policyIn struct {
	DeliveryReadOnly            *bool `json:"delivery_read_only,omitempty" jsonschema:"the turn that carries the result only reads (default false)"`
	DeliveryRequiresApproval    *bool `json:"delivery_requires_approval,omitempty" jsonschema:"that turn may need approvals (default true)"`
	DeliveryRequiresNetwork     *bool `json:"delivery_requires_network,omitempty" jsonschema:"that turn may need the network (default true)"`
	DeliveryRequiresWriteAccess *bool `json:"delivery_requires_write_access,omitempty" jsonschema:"that turn may need to write files (default true)"`
}

func (p policyIn) flags() command.PolicyFlags {
	return command.PolicyFlags{ReadOnly: p.DeliveryReadOnly, RequiresApproval: p.DeliveryRequiresApproval,
		RequiresNetwork: p.DeliveryRequiresNetwork, RequiresWriteAccess: p.DeliveryRequiresWriteAccess}
}

type taskRunIn struct {
	Task    string   `json:"task,omitempty" jsonschema:"a named task the user defined (task_list shows them); give this or argv"`
	Args    []string `json:"args,omitempty" jsonschema:"with task: extra arguments, each one the task takes"`
	Argv    []string `json:"argv,omitempty" jsonschema:"the command and its arguments, one element each, as exec takes them (no shell unless argv names one); allowed only as a whole by a rule of the user"`
	Summary string   `json:"summary,omitempty" jsonschema:"one line saying what the command is for (default: the command line)"`
	Timeout string   `json:"timeout,omitempty" jsonschema:"stop the command after this long, as a duration like 30m or 2h (default: no limit of its own)"`
}

type taskListIn struct{}

type jobIn struct {
	JobID string `json:"job_id" jsonschema:"the job, as job_submit or task_run answered"`
}

type cancelIn struct {
	JobID  string `json:"job_id" jsonschema:"the job to cancel"`
	Reason string `json:"reason,omitempty" jsonschema:"why, in one line"`
}

type listIn struct {
	Status string `json:"status,omitempty" jsonschema:"only jobs in this status: running, ready, failed or cancelled"`
	Limit  int    `json:"limit,omitempty" jsonschema:"at most this many jobs (default 100)"`
}

// caller is the calling thread, from the call's _meta.
type caller = api.MCPCaller

// threadKeys are the argument names a model might use to point a tool at
// another thread; they are checked, never obeyed.
var threadKeys = []string{"thread_id", "source_thread_id", "threadId"}

// callerOf reads who calls from the _meta Codex sends with every
// tools/call: threadId, and the turn metadata with thread_id, turn_id and
// sandbox_mode (research: codex-mcp F5). The two thread ids must agree.
func callerOf(meta map[string]any) (caller, error) {
	var c caller
	str := func(m map[string]any, k string) string {
		v, _ := m[k].(string)
		return v
	}
	c.ThreadID = str(meta, "threadId")
	c.CallID = str(meta, "callId")
	if turn, ok := meta["x-codex-turn-metadata"].(map[string]any); ok {
		if t := str(turn, "thread_id"); t != "" {
			if c.ThreadID != "" && c.ThreadID != t {
				return c, errs.New(errs.ThreadUnidentified, "the call's metadata names two threads (%s and %s)", c.ThreadID, t)
			}
			c.ThreadID = t
		}
		c.TurnID, c.SandboxMode = str(turn, "turn_id"), str(turn, "sandbox_mode")
	}
	if c.ThreadID == "" {
		return c, errs.New(errs.ThreadUnidentified, "the call carries no calling thread in its _meta: cbth's tools act for the Codex thread that calls them, and only Codex can say which")
	}
	for _, s := range []string{c.ThreadID, c.TurnID, c.CallID, c.SandboxMode} {
		if len(s) > 256 || !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			return c, errs.New(errs.ThreadUnidentified, "the call's metadata holds an id that is not a short text")
		}
	}
	return c, nil
}

type tools struct {
	d   Daemon
	cfg Config
}

// handler wraps a tool: it binds the call to its thread, bounds and
// decodes nothing itself, and turns the outcome into a result.
func (t tools) handler(h func(context.Context, caller, json.RawMessage) (string, any, error)) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		c, err := callerOf(req.Params.Meta)
		if err != nil {
			return failure(err), nil
		}
		args := req.Params.Arguments
		if len(args) > MaxArguments {
			return failure(errs.New(errs.EMSGSIZE, "the arguments are %d bytes, over the %d byte limit", len(args), MaxArguments)), nil
		}
		text, out, err := h(ctx, c, args)
		if err != nil {
			return failure(err), nil
		}
		// Codex 0.169 gives the model the structured content alone when
		// there is one, so the sentence for the model is in it too.
		raw, err := json.Marshal(out)
		var data map[string]any
		if err == nil {
			err = json.Unmarshal(raw, &data)
		}
		if err != nil {
			return failure(errs.Wrap(errs.EINTERNAL, err, "encode the answer")), nil
		}
		data["message"] = text
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}, StructuredContent: data}, nil
	}
}

// failure is a refusal or an error as the model reads it: the stable
// code first, then why; the same as data in structuredContent.
func failure(err error) *sdk.CallToolResult {
	code := errs.CodeOf(err)
	if code == "" {
		code = errs.EINTERNAL
	}
	msg := err.Error()
	var ce *errs.Error
	if errors.As(err, &ce) && ce.Message != "" && ce.Err == nil {
		msg = ce.Message
	}
	raw, _ := json.Marshal(map[string]any{"error": map[string]string{"code": string(code), "message": msg}})
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: string(code) + ": " + msg}},
		StructuredContent: json.RawMessage(raw)}
}

// decode reads a call's arguments into v strictly: unknown arguments and
// wrong types are EINVAL. A thread named under one of keys is taken out
// and returned, for the daemon to judge.
func decode(args json.RawMessage, v any, keys []string) (named string, err error) {
	if len(bytes.TrimSpace(args)) == 0 || string(bytes.TrimSpace(args)) == "null" {
		args = json.RawMessage("{}")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(args, &m); err != nil {
		return "", errs.New(errs.EINVAL, "the arguments are not a JSON object: %v", err)
	}
	for _, k := range keys {
		raw, ok := m[k]
		if !ok {
			continue
		}
		if err := json.Unmarshal(raw, &named); err != nil {
			return "", errs.New(errs.EINVAL, "argument %s must be a string", k)
		}
		delete(m, k)
	}
	rest, _ := json.Marshal(m)
	dec := json.NewDecoder(bytes.NewReader(rest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return "", errs.New(errs.EINVAL, "bad arguments: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return named, nil
}

func (t tools) submit(ctx context.Context, c caller, args json.RawMessage) (string, any, error) {
	var in submitIn
	named, err := decode(args, &in, threadKeys)
	if err != nil {
		return "", nil, err
	}
	for _, f := range []struct{ name, v string }{{"task_kind", in.TaskKind}, {"summary", in.Summary}} {
		if strings.TrimSpace(f.v) == "" {
			return "", nil, errs.New(errs.EINVAL, "%s is required", f.name)
		}
	}
	c.NamedThread = named
	rep, err := t.d.JobSubmit(ctx, api.MCPSubmitArgs{Caller: c, TaskKind: in.TaskKind, Summary: in.Summary,
		IdempotencyKey: in.IdempotencyKey, Policy: in.flags()})
	if err != nil {
		return "", nil, err
	}
	again := ""
	if rep.Deduplicated {
		again = " (already submitted with this idempotency key)"
	}
	return fmt.Sprintf("Job %s submitted for this thread%s, target %s. When it is reported done, %s. Report it with: cbth job complete --job-id %s --summary '...'",
		rep.JobID, again, rep.TargetKind, rep.Delivery.Hint, rep.JobID), rep, nil
}

func (t tools) taskRun(ctx context.Context, c caller, args json.RawMessage) (string, any, error) {
	var in taskRunIn
	named, err := decode(args, &in, threadKeys)
	if err != nil {
		return "", nil, err
	}
	a, err := t.command(c, named, in)
	if err != nil {
		return "", nil, err
	}
	rep, err := t.d.TaskRun(ctx, a)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("Task %s (job %s) is %s in the background: %s. When it exits, %s. Nothing more to do now: end your turn; do not wait or poll.",
		rep.TaskID, rep.JobID, rep.State, aggregate.CommandLine(rep.Argv), rep.Delivery.Hint), rep, nil
}

// command is the request of task_run and watch_start: the command (a
// named task's with the args given, or argv), resolved where this server
// runs, with its environment.
func (t tools) command(c caller, named string, in taskRunIn) (api.MCPTaskRunArgs, error) {
	switch {
	case in.Task == "" && len(in.Argv) == 0:
		return api.MCPTaskRunArgs{}, errs.New(errs.EINVAL, "argv or task is required: the command and its arguments, or a named task (task_list shows them)")
	case in.Task != "" && len(in.Argv) > 0:
		return api.MCPTaskRunArgs{}, errs.New(errs.EINVAL, "give task or argv, not both")
	case in.Task == "" && len(in.Args) > 0:
		return api.MCPTaskRunArgs{}, errs.New(errs.EINVAL, "args go with task; with argv, the arguments are in argv")
	}
	if err := checkArgv("args", in.Args, false); err != nil {
		return api.MCPTaskRunArgs{}, err
	}
	argv := in.Argv
	if in.Task != "" {
		rule, err := t.task(in.Task)
		if err != nil {
			return api.MCPTaskRunArgs{}, err
		}
		argv = append(slices.Clone(rule.Argv), in.Args...)
	}
	if err := checkArgv("argv", argv, true); err != nil {
		return api.MCPTaskRunArgs{}, err
	}
	var timeout time.Duration
	if in.Timeout != "" {
		var err error
		if timeout, err = time.ParseDuration(in.Timeout); err != nil || timeout < 0 {
			return api.MCPTaskRunArgs{}, errs.New(errs.EINVAL, "timeout %q is not a duration like 30m or 2h", in.Timeout)
		}
	}
	a := api.MCPTaskRunArgs{Caller: c, Task: in.Task, Argv: argv, Summary: in.Summary, TimeoutMS: timeout.Milliseconds()}
	a.Caller.NamedThread = named
	// The command runs where this server runs: Codex starts it in the
	// thread's working directory, with the environment its config gives.
	var err error
	if a.Cwd, err = os.Getwd(); err != nil {
		return api.MCPTaskRunArgs{}, errs.Wrap(errs.EINTERNAL, err, "working directory")
	}
	if a.Path, err = resolve(argv[0], a.Cwd); err != nil {
		return api.MCPTaskRunArgs{}, err
	}
	for _, kv := range os.Environ() {
		if utf8.ValidString(kv) {
			a.Env = append(a.Env, kv)
		}
	}
	return a, nil
}

// checkArgv checks a command's elements (command: the first is the
// program, which may not be empty) for what exec can take and for size.
func checkArgv(what string, l []string, command bool) error {
	for i, a := range l {
		switch {
		case a == "" && i == 0 && command:
			return errs.New(errs.EINVAL, "%s[0], the command, is empty", what)
		case strings.ContainsRune(a, 0) || !utf8.ValidString(a):
			return errs.New(errs.EINVAL, "%s[%d] is not text (it holds a NUL or invalid UTF-8)", what, i)
		case len(a) > MaxArg:
			return errs.New(errs.EMSGSIZE, "%s[%d] is %d bytes, over the %d byte limit of one argument", what, i, len(a), MaxArg)
		}
	}
	return nil
}

// task finds a named task in the user's rules.
func (t tools) task(name string) (home.TaskRule, error) {
	m, err := t.rules()
	if err != nil {
		return home.TaskRule{}, err
	}
	r, ok := m.Task(name)
	if !ok {
		if names := m.TaskNames(); len(names) > 0 {
			return r, errs.New(errs.ENOENT, "no task %q; nothing ran. The named tasks are: %s (task_list shows what each runs)", name, strings.Join(names, ", "))
		}
		return r, errs.New(errs.ENOENT, "no task %q: the user defined no named task; nothing ran", name)
	}
	return r, nil
}

func (t tools) rules() (home.MCP, error) {
	if t.cfg.Rules == nil {
		return home.MCP{}, errs.New(errs.ENOTCONF, "this server reads no task rules")
	}
	m, err := t.cfg.Rules()
	if err != nil {
		return m, errs.Wrap(errs.ENOTCONF, err, "read the user's [mcp] task rules")
	}
	return m, nil
}

// taskListOut is task_list's answer.
type taskListOut struct {
	Tasks []home.TaskRule `json:"tasks"`
}

func (t tools) taskList(_ context.Context, _ caller, args json.RawMessage) (string, any, error) {
	var in taskListIn
	if _, err := decode(args, &in, nil); err != nil {
		return "", nil, err
	}
	m, err := t.rules()
	if err != nil {
		return "", nil, err
	}
	out := taskListOut{Tasks: []home.TaskRule{}}
	var lines []string
	for _, name := range m.TaskNames() {
		r, _ := m.Task(name)
		out.Tasks = append(out.Tasks, r)
		line := fmt.Sprintf("%s: %s", name, aggregate.CommandLine(r.Argv))
		if len(r.Args) > 0 {
			line += fmt.Sprintf(" (extra arguments it takes: %s)", strings.Join(r.Args, " "))
		}
		if r.Summary != "" {
			line += " - " + r.Summary
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return "The user defined no named task. task_run runs only a command a rule of the user allows whole.", out, nil
	}
	return "Named tasks (task_run with task and args):\n" + strings.Join(lines, "\n"), out, nil
}

// resolve finds the command as the agent's shell would: on PATH, or
// relative to the working directory.
func resolve(name, cwd string) (string, error) {
	p := name
	if !strings.Contains(name, "/") {
		var err error
		if p, err = exec.LookPath(name); err != nil {
			return "", errs.New(errs.ENOENT, "%s: command not found on PATH", name)
		}
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(cwd, p)
	}
	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return "", errs.New(errs.ENOENT, "%s is not an executable file", p)
	}
	return p, nil
}

func (t tools) status(ctx context.Context, c caller, args json.RawMessage) (string, any, error) {
	var in jobIn
	if _, err := decode(args, &in, threadKeys); err != nil {
		return "", nil, err
	}
	if in.JobID == "" {
		return "", nil, errs.New(errs.EINVAL, "job_id is required")
	}
	j, err := t.d.JobStatus(ctx, api.MCPJobArgs{Caller: c, JobID: in.JobID})
	if err != nil {
		return "", nil, err
	}
	return describe(j), j, nil
}

func describe(j query.JobView) string {
	s := fmt.Sprintf("Job %s (%s: %s) is %s", j.JobID, j.TaskKind, j.TaskSummary, j.State)
	switch {
	case j.Batch != nil && j.Batch.CloseReason != "":
		s += fmt.Sprintf("; its result was %s", j.Batch.CloseReason)
	case j.Batch != nil:
		s += "; its result waits to be delivered into this thread"
	}
	if j.ResultSummary != "" {
		s += ". Result: " + j.ResultSummary
	}
	if j.FailReason != "" {
		s += ". Failed: " + j.FailReason
	}
	return s + "."
}

func (t tools) list(ctx context.Context, c caller, args json.RawMessage) (string, any, error) {
	var in listIn
	if _, err := decode(args, &in, threadKeys); err != nil {
		return "", nil, err
	}
	if in.Limit < 0 {
		return "", nil, errs.New(errs.EINVAL, "limit must not be negative")
	}
	p, err := t.d.JobList(ctx, api.MCPJobListArgs{Caller: c, Status: in.Status, Limit: in.Limit})
	if err != nil {
		return "", nil, err
	}
	if len(p.Jobs) == 0 {
		return "This thread has no background jobs.", p, nil
	}
	lines := make([]string, len(p.Jobs))
	for i, j := range p.Jobs {
		lines[i] = describe(j)
	}
	return strings.Join(lines, "\n"), p, nil
}

func (t tools) cancel(ctx context.Context, c caller, args json.RawMessage) (string, any, error) {
	var in cancelIn
	if _, err := decode(args, &in, threadKeys); err != nil {
		return "", nil, err
	}
	if in.JobID == "" {
		return "", nil, errs.New(errs.EINVAL, "job_id is required")
	}
	rep, err := t.d.JobCancel(ctx, api.MCPJobArgs{Caller: c, JobID: in.JobID, Reason: in.Reason})
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("Job %s: %s (now %s).", rep.JobID, rep.Outcome, rep.State), rep, nil
}
