// Package mcp holds the command that records an agent's MCP tool call with
// the core command it runs. It stands on the core (engine/command), never
// the other way.
package mcp

import (
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// RecordMCPCall runs the command an agent's MCP tool call asks for and
// records the call on the calling thread's mcp stream in the same append
// (spec/mcp.md), so the log never holds the one without the other. Inner
// nil is a call refused by policy: only the refusal is recorded, with its
// code. A call whose command appends nothing (a retried submit that is
// deduplicated, a cancel of a cancelled job) records nothing either:
// retries leave the log as it was.
type RecordMCPCall struct {
	ThreadID string
	Call     events.MCPToolCalled
	Inner    engine.Decider
}

// Decide implements engine.Decider. The Value is the inner command's.
func (c RecordMCPCall) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if c.ThreadID == "" || c.Call.Tool == "" {
		return engine.Decision{}, errs.New(errs.EINVAL, "an MCP call record needs the calling thread and the tool")
	}
	if err := command.CheckText("thread id", c.ThreadID, true); err != nil {
		return engine.Decision{}, err
	}
	rec := c.Call
	var dec engine.Decision
	if c.Inner == nil {
		if rec.Code == "" {
			return engine.Decision{}, errs.New(errs.EINVAL, "a refused MCP call needs its code")
		}
		rec.Outcome = events.MCPRefused
		dec.Outcome = events.MCPRefused
	} else {
		d, err := c.Inner.Decide(v, now)
		if err != nil || len(d.Emits) == 0 {
			return d, err
		}
		dec, rec.Outcome, rec.Code = d, events.MCPAccepted, ""
		switch in := c.Inner.(type) {
		case command.SubmitJob:
			if rec.JobID == "" {
				rec.JobID = engine.AnswerOf(in, d)
			}
		case taskMaker:
			rec.JobID, rec.TaskID = in.Refs(d)
		}
	}
	dec.Emits = append(dec.Emits, engine.Emit{Stream: events.StreamID{Kind: events.KindMCP, ID: c.ThreadID}, Payload: &rec})
	return dec, nil
}

// taskMaker is an inner command that submits a task (task.SubmitTask):
// the call record names its job and its task. A product does not import
// another, so the record asks the command rather than naming its type.
type taskMaker interface {
	Refs(engine.Decision) (jobID, taskID string)
}
