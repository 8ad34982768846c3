package mcp_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/mcp"
	"github.com/cbth-dev/cbth/engine/command/task"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

// The call record names what the call made: the job of a job_submit, the
// job and the task of a task_run. The record does not import the task
// commands; it asks the inner command (SubmitTask.Refs), so this is the
// test that the question still reaches it.
func TestRecordMCPCall_NamesTheJobAndTaskItMade(t *testing.T) {
	clock := engine.NewManualClock(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC))
	e := enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{Clock: clock, NoSync: true})
	job := command.SubmitJob{Target: "debug", ThreadID: "T", TaskKind: "k", Summary: "s", Policy: events.FailClosedPolicy}
	for _, c := range []struct {
		tool  string
		inner engine.Decider
		task  bool
	}{
		{"job_submit", job, false},
		{"task_run", task.SubmitTask{Job: job, Argv: []string{"sh", "-c", "true"}, Path: "/bin/sh", Cwd: "/tmp", Timeout: time.Second}, true},
	} {
		res, err := e.Execute(context.Background(), engine.Meta{Actor: events.ActorAgent},
			mcp.RecordMCPCall{ThreadID: "T", Call: events.MCPToolCalled{Tool: c.tool}, Inner: c.inner})
		if err != nil {
			t.Fatalf("%s: %v", c.tool, err)
		}
		made := map[events.Kind]string{}
		var rec events.MCPToolCalled
		for _, ev := range res.Events {
			switch ev.Stream.Kind {
			case events.KindJob, events.KindTask:
				made[ev.Stream.Kind] = ev.Stream.ID
			case events.KindMCP:
				if err := json.Unmarshal(ev.Payload, &rec); err != nil {
					t.Fatal(err)
				}
			}
		}
		if rec.Outcome != events.MCPAccepted || rec.JobID == "" || rec.JobID != made[events.KindJob] || rec.TaskID != made[events.KindTask] ||
			(rec.TaskID != "") != c.task {
			t.Fatalf("%s: record %+v, made %v", c.tool, rec, made)
		}
	}
}
