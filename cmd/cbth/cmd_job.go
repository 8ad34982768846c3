package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cbth-dev/cbth/adapters/artifact"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
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
	Target    command.Target `help:"Where the result is delivered: ${target_list} (default: desktop for a thread bound to a Desktop heartbeat, else cli)." predictor:"target" placeholder:"${target_placeholder}"`
	ThreadID  string         `help:"The conversation thread the result goes back to (default: $CODEX_THREAD_ID, the Codex thread whose shell runs this)." name:"thread-id"`
	TaskKind  string         `help:"What kind of task this is (free-form, e.g. ci, review)." required:"" name:"task-kind"`
	Summary   string         `help:"One line that says what the job is." required:""`
	DedupeKey string         `help:"Submitting the same key again returns the original job." name:"dedupe-key"`
	policyFlags
}

// policyFlags are the metadata and delivery-policy flags of a job, shared
// by job submit and task run.
type policyFlags struct {
	MetadataFile                string `help:"JSON file with extra metadata; may hold a delivery_policy object." name:"metadata-file" type:"path"`
	DeliveryReadOnly            string `help:"The delivery only reads (default false)." name:"delivery-read-only" placeholder:"true|false"`
	DeliveryRequiresApproval    string `help:"The delivery needs approval (default true)." name:"delivery-requires-approval" placeholder:"true|false"`
	DeliveryRequiresNetwork     string `help:"The delivery needs network access (default true)." name:"delivery-requires-network" placeholder:"true|false"`
	DeliveryRequiresWriteAccess string `help:"The delivery needs write access (default true)." name:"delivery-requires-write-access" placeholder:"true|false"`
}

// read parses the policy flags and reads the metadata file.
func (c policyFlags) read() (p command.PolicyFlags, metadata json.RawMessage, err error) {
	for _, f := range []struct {
		name string
		v    string
		dst  **bool
	}{
		{"delivery-read-only", c.DeliveryReadOnly, &p.ReadOnly},
		{"delivery-requires-approval", c.DeliveryRequiresApproval, &p.RequiresApproval},
		{"delivery-requires-network", c.DeliveryRequiresNetwork, &p.RequiresNetwork},
		{"delivery-requires-write-access", c.DeliveryRequiresWriteAccess, &p.RequiresWriteAccess},
	} {
		if *f.dst, err = boolFlag(f.name, f.v); err != nil {
			return p, nil, err
		}
	}
	if c.MetadataFile != "" {
		b, err := artifact.ReadRegular(c.MetadataFile, "metadata file", command.MaxMetadata)
		if err != nil {
			return p, nil, err
		}
		if !json.Valid(b) {
			return p, nil, errs.New(errs.EINVAL, "metadata file %s is not valid JSON", c.MetadataFile)
		}
		metadata = b
	}
	return p, metadata, nil
}

// Validate refuses a --target the one list (command.Targets) does not
// let a flag name, before anything is sent.
func (c *JobSubmitCmd) Validate() error { return checkFlagTarget(c.Target) }

// checkFlagTarget accepts "" (the daemon resolves it from the thread) and
// the targets --target takes.
func checkFlagTarget(t command.Target) error {
	if t == "" || slices.Contains(command.FlagTargets(), string(t)) {
		return nil
	}
	return fmt.Errorf("--target %q is not one of %s", t, strings.Join(command.FlagTargets(), ", "))
}

// Run submits the job.
func (c *JobSubmitCmd) Run(env *Env) error {
	thread, err := env.threadID(c.ThreadID)
	if err != nil {
		return err
	}
	a := api.SubmitArgs{TargetKind: c.Target, SourceThreadID: thread, TaskKind: c.TaskKind, TaskSummary: c.Summary, DedupeKey: c.DedupeKey}
	if a.Policy, a.Metadata, err = c.policyFlags.read(); err != nil {
		return err
	}
	res, err := call(env, api.JobSubmit, a)
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		note := ""
		if res.Deduplicated {
			note = " (already submitted with this dedupe key)"
		}
		fmt.Fprintf(w, "job %s %s%s\n", res.JobID, res.State, note)
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
	a := api.CompleteArgs{JobID: c.JobID, ResultSummary: c.Summary}
	if c.ResultFile != "" {
		abs, err := filepath.Abs(c.ResultFile)
		if err != nil {
			return errs.Wrap(errs.EINVAL, err, "--result-file")
		}
		a.ResultFile = abs
	}
	return transition(env, api.JobComplete, a)
}

// JobFailCmd is `cbth job fail`.
type JobFailCmd struct {
	JobID  string `help:"The job." required:"" name:"job-id"`
	Reason string `help:"Why it failed." required:""`
}

// Run fails the job.
func (c *JobFailCmd) Run(env *Env) error {
	return transition(env, api.JobFail, api.JobArgs{JobID: c.JobID, Reason: c.Reason})
}

// JobCancelCmd is `cbth job cancel`.
type JobCancelCmd struct {
	JobID  string `help:"The job." required:"" name:"job-id"`
	Reason string `help:"Why it is cancelled."`
}

// Run cancels the job.
func (c *JobCancelCmd) Run(env *Env) error {
	return transition(env, api.JobCancel, api.JobArgs{JobID: c.JobID, Reason: c.Reason})
}

func transition[Req any](env *Env, op api.Op[Req, api.TransitionReply], args Req) error {
	res, err := call(env, op, args)
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "job %s %s (%s)\n", res.JobID, res.State, res.Outcome)
		if res.Artifact != nil {
			fmt.Fprintf(w, "artifact %s: %s, sha256 %s\n", res.Artifact.ArtifactID, plural.Count(res.Artifact.SizeBytes, "byte", "bytes"), res.Artifact.SHA256)
		}
	})
}

// JobQueryCmd is `cbth job query`.
type JobQueryCmd struct {
	JobID string `arg:"" help:"The job." name:"job_id"`
	pastFlags
}

// Run prints the job.
func (c *JobQueryCmd) Run(env *Env) error {
	if c.History {
		return c.history(env, api.HistoryArgs{JobID: c.JobID})
	}
	past, err := c.args()
	if err != nil {
		return err
	}
	v, err := call(env, api.JobQuery, api.JobArgs{JobID: c.JobID, PastArgs: past})
	if err != nil {
		return err
	}
	return env.emit(v, func(w io.Writer) { printJob(w, v) })
}

func printJob(w io.Writer, v query.JobView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if v.AsOfSeq > 0 {
		fmt.Fprintf(tw, "as of\tseq %d\n", v.AsOfSeq)
	}
	fmt.Fprintf(tw, "job\t%s\n", v.JobID)
	fmt.Fprintf(tw, "status\t%s\n", v.State)
	fmt.Fprintf(tw, "target\t%s\n", v.TargetKind)
	fmt.Fprintf(tw, "thread\t%s\n", v.SourceThreadID)
	fmt.Fprintf(tw, "task\t%s: %s\n", v.TaskKind, v.TaskSummary)
	p := v.DeliveryPolicy
	fmt.Fprintf(tw, "delivery policy\tread_only=%t requires_approval=%t requires_network=%t requires_write_access=%t\n", p.ReadOnly, p.RequiresApproval, p.RequiresNetwork, p.RequiresWriteAccess)
	fmt.Fprintf(tw, "created\t%s\n", v.CreatedAt.Local().Format(time.RFC3339))
	if v.ResultSummary != "" {
		fmt.Fprintf(tw, "result\t%s\n", v.ResultSummary)
	}
	if v.FailReason != "" {
		fmt.Fprintf(tw, "failed\t%s\n", v.FailReason)
	}
	if v.Artifact != nil {
		fmt.Fprintf(tw, "artifact\t%s (%s, %s)\n", v.Artifact.ArtifactID, plural.Count(v.Artifact.SizeBytes, "byte", "bytes"), v.Artifact.ContentType)
		fmt.Fprintf(tw, "payload\t%s\n", v.Artifact.ManagedPath)
	}
	if b := v.Batch; b != nil {
		where := string(b.State) + ", replay " + b.ReplayPolicy
		if b.CloseReason != "" {
			where = "closed " + b.CloseReason
		}
		if command.Undelivered(b.CloseReason) {
			where += ": never delivered, and cbth will not try again"
		}
		fmt.Fprintf(tw, "delivery\tbatch %s: %s\n", b.BatchID, where)
	}
	tw.Flush()
}

// JobListCmd is `cbth job list`.
type JobListCmd struct {
	ThreadID string `help:"Only jobs of this thread." name:"thread-id"`
	Status   string `help:"Only jobs in this state." enum:",running,ready,failed,cancelled" default:""`
	Paging
}

// Paging are the flags of every listing: it lists everything, page by
// page from the daemon, unless told where to start and how many to list.
type Paging struct {
	Limit int    `help:"List at most this many (0: all)." default:"0"`
	After string `help:"Start after this id: the last one a previous listing printed."`
}

// Run lists jobs.
func (c *JobListCmd) Run(env *Env) error {
	list, err := allPages(c.Paging, func(after string, limit int) ([]query.JobView, string, error) {
		page, err := call(env, api.JobList, api.JobListArgs{SourceThreadID: c.ThreadID, Status: c.Status, After: after, Limit: limit})
		return page.Jobs, page.Next, err
	})
	if err != nil {
		return err
	}
	return env.emit(list, func(w io.Writer) {
		if len(list) == 0 {
			fmt.Fprintln(w, "no jobs")
			return
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tSTATUS\tTARGET\tTHREAD\tKIND\tCREATED\tSUMMARY")
		for _, v := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.JobID, v.State, v.TargetKind, v.SourceThreadID, v.TaskKind, v.CreatedAt.Local().Format("01-02 15:04:05"), v.TaskSummary)
		}
		tw.Flush()
	})
}

// allPages collects a listing page by page, as p asks: page(after,
// limit) returns one page of at most limit items (0: as many as the
// daemon puts in a page) and the cursor of the next ("" after the last).
// No reply grows with the listing, so none can outgrow a frame.
func allPages[T any](p Paging, page func(after string, limit int) ([]T, string, error)) ([]T, error) {
	if p.Limit < 0 {
		return nil, errs.New(errs.EINVAL, "--limit must not be negative, not %d", p.Limit)
	}
	all := []T{}
	for after := p.After; ; {
		want := 0
		if p.Limit > 0 {
			want = p.Limit - len(all)
		}
		items, next, err := page(after, want)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if next == "" || (p.Limit > 0 && len(all) >= p.Limit) {
			if p.Limit > 0 && len(all) > p.Limit {
				all = all[:p.Limit]
			}
			return all, nil
		}
		after = next
	}
}
