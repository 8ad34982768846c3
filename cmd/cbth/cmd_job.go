package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/cbth-dev/cbth/adapters/artifact"
	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/errs"
)

// JobCmd groups the script protocol.
type JobCmd struct {
	Submit   JobSubmitCmd   `cmd:"" help:"Submit a long-running job tied to a conversation thread."`
	Complete JobCompleteCmd `cmd:"" help:"Report a job done; its result file is copied into cbth's artifact store."`
	Fail     JobFailCmd     `cmd:"" help:"Report that a job failed."`
	Cancel   JobCancelCmd   `cmd:"" help:"Cancel a job."`
	Query    JobQueryCmd    `cmd:"" help:"Show the whole record of one job."`
	List     JobListCmd     `cmd:"" help:"List jobs."`
}

// JobSubmitCmd is `cbth job submit`.
type JobSubmitCmd struct {
	Target                      string `help:"Where the result is delivered: cli, desktop or debug." required:"" placeholder:"cli|desktop|debug"`
	ThreadID                    string `help:"The conversation thread the result goes back to." required:"" name:"thread-id"`
	TaskKind                    string `help:"What kind of task this is (free-form, e.g. ci, review)." required:"" name:"task-kind"`
	Summary                     string `help:"One line that says what the job is." required:""`
	MetadataFile                string `help:"JSON file with extra metadata; may hold a delivery_policy object." name:"metadata-file" type:"path"`
	DedupeKey                   string `help:"Submitting the same key again returns the original job." name:"dedupe-key"`
	DeliveryReadOnly            string `help:"The delivery only reads (default false)." name:"delivery-read-only" placeholder:"true|false"`
	DeliveryRequiresApproval    string `help:"The delivery needs approval (default true)." name:"delivery-requires-approval" placeholder:"true|false"`
	DeliveryRequiresNetwork     string `help:"The delivery needs network access (default true)." name:"delivery-requires-network" placeholder:"true|false"`
	DeliveryRequiresWriteAccess string `help:"The delivery needs write access (default true)." name:"delivery-requires-write-access" placeholder:"true|false"`
}

// Run submits the job.
func (c *JobSubmitCmd) Run(env *Env) error {
	a := daemon.SubmitArgs{Target: c.Target, ThreadID: c.ThreadID, TaskKind: c.TaskKind, Summary: c.Summary, DedupeKey: c.DedupeKey}
	var err error
	for _, f := range []struct {
		name string
		v    string
		dst  **bool
	}{
		{"delivery-read-only", c.DeliveryReadOnly, &a.Policy.ReadOnly},
		{"delivery-requires-approval", c.DeliveryRequiresApproval, &a.Policy.RequiresApproval},
		{"delivery-requires-network", c.DeliveryRequiresNetwork, &a.Policy.RequiresNetwork},
		{"delivery-requires-write-access", c.DeliveryRequiresWriteAccess, &a.Policy.RequiresWriteAccess},
	} {
		if *f.dst, err = boolFlag(f.name, f.v); err != nil {
			return err
		}
	}
	if c.MetadataFile != "" {
		b, err := artifact.ReadRegular(c.MetadataFile, "metadata file", command.MaxMetadata)
		if err != nil {
			return err
		}
		if !json.Valid(b) {
			return errs.New(errs.EINVAL, "metadata file %s is not valid JSON", c.MetadataFile)
		}
		a.Metadata = b
	}
	var res daemon.SubmitResult
	if err := env.call("job.submit", a, &res); err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		note := ""
		if res.Deduplicated {
			note = " (already submitted with this dedupe key)"
		}
		fmt.Fprintf(w, "job %s %s%s\n", res.JobID, res.Status, note)
	})
}

// JobCompleteCmd is `cbth job complete`.
type JobCompleteCmd struct {
	JobID      string `help:"The job." required:"" name:"job-id"`
	Summary    string `help:"One line that says what the outcome is." required:""`
	ResultFile string `help:"The result file; cbth copies it, so it may be deleted afterwards." name:"result-file" type:"path"`
}

// Run completes the job.
func (c *JobCompleteCmd) Run(env *Env) error {
	a := daemon.CompleteArgs{JobID: c.JobID, Summary: c.Summary}
	if c.ResultFile != "" {
		abs, err := filepath.Abs(c.ResultFile)
		if err != nil {
			return errs.Wrap(errs.EINVAL, err, "--result-file")
		}
		a.ResultFile = abs
	}
	return transition(env, "job.complete", a)
}

// JobFailCmd is `cbth job fail`.
type JobFailCmd struct {
	JobID  string `help:"The job." required:"" name:"job-id"`
	Reason string `help:"Why it failed." required:""`
}

// Run fails the job.
func (c *JobFailCmd) Run(env *Env) error {
	return transition(env, "job.fail", daemon.JobArgs{JobID: c.JobID, Reason: c.Reason})
}

// JobCancelCmd is `cbth job cancel`.
type JobCancelCmd struct {
	JobID  string `help:"The job." required:"" name:"job-id"`
	Reason string `help:"Why it is cancelled."`
}

// Run cancels the job.
func (c *JobCancelCmd) Run(env *Env) error {
	return transition(env, "job.cancel", daemon.JobArgs{JobID: c.JobID, Reason: c.Reason})
}

func transition(env *Env, op string, args any) error {
	var res daemon.TransitionResult
	if err := env.call(op, args, &res); err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "job %s %s (%s)\n", res.JobID, res.Status, res.Outcome)
		if res.Art != nil {
			fmt.Fprintf(w, "artifact %s: %d bytes, sha256 %s\n", res.Art.ArtifactID, res.Art.SizeBytes, res.Art.SHA256)
		}
	})
}

// JobQueryCmd is `cbth job query`.
type JobQueryCmd struct {
	JobID string `arg:"" help:"The job." name:"job_id"`
}

// Run prints the job.
func (c *JobQueryCmd) Run(env *Env) error {
	var v daemon.JobView
	if err := env.call("job.query", daemon.JobArgs{JobID: c.JobID}, &v); err != nil {
		return err
	}
	return env.emit(v, func(w io.Writer) { printJob(w, v) })
}

func printJob(w io.Writer, v daemon.JobView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "job\t%s\n", v.JobID)
	fmt.Fprintf(tw, "status\t%s\n", v.Status)
	fmt.Fprintf(tw, "target\t%s\n", v.Target)
	fmt.Fprintf(tw, "thread\t%s\n", v.ThreadID)
	fmt.Fprintf(tw, "task\t%s: %s\n", v.TaskKind, v.Summary)
	p := v.DeliveryPolicy
	fmt.Fprintf(tw, "delivery policy\tread_only=%t requires_approval=%t requires_network=%t requires_write_access=%t\n", p.ReadOnly, p.RequiresApproval, p.RequiresNetwork, p.RequiresWriteAccess)
	fmt.Fprintf(tw, "accepted\t%s\n", v.AcceptedAt.Local().Format(time.RFC3339))
	if v.ResultSummary != "" {
		fmt.Fprintf(tw, "result\t%s\n", v.ResultSummary)
	}
	if v.FailReason != "" {
		fmt.Fprintf(tw, "failed\t%s\n", v.FailReason)
	}
	if v.Artifact != nil {
		fmt.Fprintf(tw, "artifact\t%s (%d bytes, %s)\n", v.Artifact.ArtifactID, v.Artifact.SizeBytes, v.Artifact.ContentType)
		fmt.Fprintf(tw, "payload\t%s\n", v.Artifact.ManagedPath)
	}
	tw.Flush()
}

// JobListCmd is `cbth job list`.
type JobListCmd struct {
	ThreadID string `help:"Only jobs of this thread." name:"thread-id"`
	Status   string `help:"Only jobs in this state." enum:",running,ready,failed,cancelled" default:""`
}

// Run lists jobs.
func (c *JobListCmd) Run(env *Env) error {
	list := []daemon.JobView{}
	for after := ""; ; {
		var page daemon.ListPage
		if err := env.call("job.list", daemon.ListArgs{ThreadID: c.ThreadID, Status: c.Status, After: after}, &page); err != nil {
			return err
		}
		list = append(list, page.Jobs...)
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	return env.emit(list, func(w io.Writer) {
		if len(list) == 0 {
			fmt.Fprintln(w, "no jobs")
			return
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tSTATUS\tTARGET\tTHREAD\tKIND\tACCEPTED\tSUMMARY")
		for _, v := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.JobID, v.Status, v.Target, v.ThreadID, v.TaskKind, v.AcceptedAt.Local().Format("01-02 15:04:05"), v.Summary)
		}
		tw.Flush()
	})
}
