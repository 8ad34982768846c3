// Package agent runs an agent: a model + tool loop. The model only asks
// for tools (tool_call events); the agent decides, by its tool list, which
// calls run, runs them through package tool inside its root, and feeds the
// results back until the model answers without asking for more.
package agent

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/socket"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tool"
	"github.com/cbth-dev/cbth/internal/errs"
)

// DefaultMaxSteps bounds the model calls of one run.
const DefaultMaxSteps = 8

// Loop is one agent's runtime. It is a socket.Turn, and runs one-shot
// tasks through Run too.
type Loop struct {
	// Name is the agent's name; session runs give tools the thread
	// agent/<Name>/<session>.
	Name string
	// Request names the model (identity, native id, defaults); Driver
	// is the one its route table picked for agents.
	Request driver.Request
	Driver  driver.Driver
	// Tools are the tool names the agent may run; any other call gets a
	// tool result with EACCES and the loop goes on.
	Tools []string
	// TrustedAll (.d/delivery) lets the ctx target deliver the agent any
	// job result; without it an agent that can act takes only read-only
	// results that need no approval (Acting).
	TrustedAll bool
	// Env is the tool environment: root, timeouts, output cap, jobs.
	// Its Cwd is the agent's default cwd (.d/cwd).
	Env      tool.Env
	MaxSteps int
}

// CheckCwd implements socket.CwdChecker: a send's cwd must be a directory
// inside the root (missing ENOENT, outside EACCES); empty is the default.
func (l *Loop) CheckCwd(cwd string) (string, error) {
	if cwd == "" {
		cwd = l.Env.Cwd
	}
	if l.Env.Root == nil {
		return "", errs.New(errs.ENOTCONF, "agent %s has no root", l.Name)
	}
	return tool.Cwd(l.Env.Root, cwd)
}

// Run implements socket.Turn.
func (l *Loop) Run(ctx context.Context, r socket.Run, history []driver.Message, emit func(stream.Event) error) ([]driver.Message, error) {
	env := l.Env
	if r.Cwd != "" {
		env.Cwd = r.Cwd
	}
	// Only a private session is a thread a job's result can come back
	// to (the ctx target delivers to private sessions).
	if r.Session != "" && (r.Scope == "" || r.Scope == "private") {
		env.Thread = "agent/" + l.Name + "/" + r.Session
	}
	return l.loop(ctx, env, history, emit)
}

// Task runs a one-shot task (the executable): no session, cwd the default.
func (l *Loop) Task(ctx context.Context, task string, emit func(stream.Event) error) ([]driver.Message, error) {
	return l.loop(ctx, l.Env, []driver.Message{{Role: driver.RoleUser, Content: task}}, emit)
}

func (l *Loop) loop(ctx context.Context, env tool.Env, history []driver.Message, emit func(stream.Event) error) ([]driver.Message, error) {
	if env.Cwd == "" {
		env.Cwd = "/"
	}
	steps := l.MaxSteps
	if steps <= 0 {
		steps = DefaultMaxSteps
	}
	msgs := append([]driver.Message(nil), history...)
	var added []driver.Message
	defs := l.ToolDefs()
	for step := 0; step < steps; step++ {
		req := l.Request
		req.Messages, req.Tools = msgs, defs
		var text strings.Builder
		var calls []driver.ToolCall
		err := l.Driver.Stream(ctx, req, stream.SinkFunc(func(e stream.Event) error {
			switch e.Type {
			case stream.TypeStart, stream.TypeDone, stream.TypeError:
				return errs.New(errs.EINTERNAL, "driver emitted %s", e.Type)
			case stream.TypeDelta:
				text.WriteString(e.Text)
			case stream.TypeToolCall:
				calls = append(calls, driver.ToolCall{ID: e.CallID, Name: e.Name, Arguments: e.Arguments})
			}
			return emit(e)
		}))
		if err != nil {
			return nil, err
		}
		answer := driver.Message{Role: driver.RoleAssistant, Content: text.String(), ToolCalls: calls}
		msgs, added = append(msgs, answer), append(added, answer)
		if len(calls) == 0 {
			return added, nil
		}
		for _, c := range calls {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			res := l.call(ctx, env, c)
			if err := emit(stream.Event{Type: stream.TypeMessage, Role: driver.RoleTool, CallID: c.ID, Name: c.Name,
				Content: []stream.Part{{Type: "text", Text: res}}}); err != nil {
				return nil, err
			}
			m := driver.Message{Role: driver.RoleTool, CallID: c.ID, Name: c.Name, Content: res}
			msgs, added = append(msgs, m), append(added, m)
		}
	}
	return nil, errs.New(errs.ETIMEDOUT, "agent %s stopped after %d model calls without an answer", l.Name, steps)
}

// Acting lists the agent's tools that change things beyond the model's
// reading (tool.Acts): what a delivered job result could make it do.
func (l *Loop) Acting() []string {
	var out []string
	for _, n := range l.Tools {
		if tool.Acts(n) {
			out = append(out, n)
		}
	}
	return out
}

// ToolDefs are the definitions of the agent's tools, in its order: what
// the driver offers the model. A name this build lacks is left out (a
// call to it is refused like any other unlisted tool).
func (l *Loop) ToolDefs() []driver.ToolDef {
	var defs []driver.ToolDef
	for _, n := range l.Tools {
		if s, ok := tool.Lookup(n); ok {
			defs = append(defs, driver.ToolDef{Name: s.Name, Description: s.Description, Parameters: s.Parameters})
		}
	}
	return defs
}

// ToolError is the result a failed or refused call gives the model.
type ToolError struct {
	Error struct {
		Code    errs.Code `json:"code"`
		Message string    `json:"message"`
	} `json:"error"`
}

// call runs one tool call if the agent's policy allows it. A failure is
// the call's result, not the run's: the model sees it and goes on.
func (l *Loop) call(ctx context.Context, env tool.Env, c driver.ToolCall) string {
	var err error
	var out string
	if !slices.Contains(l.Tools, c.Name) {
		err = errs.New(errs.EACCES, "agent %s may not run tool %s", l.Name, c.Name)
	} else {
		out, err = tool.Run(ctx, env, c.Name, c.Arguments)
	}
	if err == nil {
		return out
	}
	var te ToolError
	te.Error.Code, te.Error.Message = errs.CodeOf(err), stream.PublicMessage(err)
	b, _ := json.Marshal(te)
	return string(b)
}

// OpenRoot opens an agent's root directory, creating it (0700) when it
// does not exist.
func OpenRoot(dir string) (*os.Root, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, errs.Wrap(errs.EINTERNAL, err, "create agent root %s", dir)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, errs.Wrap(errs.EACCES, err, "open agent root %s", dir)
	}
	return r, nil
}
