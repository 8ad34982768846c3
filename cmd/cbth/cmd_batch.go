package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
)

// BatchCmd groups the operator's batch commands.
type BatchCmd struct {
	CloseHead   BatchCloseHeadCmd   `cmd:"" name:"close-head" help:"Close a thread's head batch (it will not be delivered automatically again)."`
	InspectHead BatchInspectHeadCmd `cmd:"" name:"inspect-head" help:"Show a thread's head batch, its attempts and why it is or is not being delivered."`
	Inspect     BatchInspectCmd     `cmd:"" help:"Show any batch by id, closed ones included, with its recovery envelope."`
	List        BatchListCmd        `cmd:"" help:"List batches."`
	SkipHead    BatchSkipHeadCmd    `cmd:"" name:"skip-head" help:"Move a thread's head behind every other ready head in the fair order (the batch stays open)."`
	Supersede   BatchSupersedeCmd   `cmd:"" help:"Close a thread's head as superseded by the next batch of the thread, which takes its jobs."`
}

// BatchSupersedeCmd is `cbth batch supersede`.
type BatchSupersedeCmd struct {
	BatchID string `help:"The head batch a newer batch replaced." required:"" name:"batch-id"`
	Reason  string `help:"Why (recorded as the close detail)." required:""`
}

// Run supersedes the head.
func (c *BatchSupersedeCmd) Run(env *Env) error {
	res, err := call(env, api.BatchSupersede, api.SupersedeArgs{BatchID: c.BatchID, Reason: c.Reason})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "batch %s: %s; its jobs went into %s\n", res.BatchID, res.Outcome, res.SupersededBy)
	})
}

// BatchCloseHeadCmd is `cbth batch close-head`.
type BatchCloseHeadCmd struct {
	SourceThreadID string `help:"The thread." required:"" name:"source-thread-id"`
	Reason         string `help:"operator_closed_unconfirmed, operator_confirmed_delivery or cancelled." required:"" enum:"operator_closed_unconfirmed,operator_confirmed_delivery,cancelled"`
	BatchID        string `help:"Close only if this batch is still the head (safe to repeat)." name:"batch-id"`
}

// Run closes the head.
func (c *BatchCloseHeadCmd) Run(env *Env) error {
	res, err := call(env, api.BatchCloseHead, api.CloseHeadArgs{SourceThreadID: c.SourceThreadID, Reason: c.Reason, BatchID: c.BatchID})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		if res.BatchID == "" {
			fmt.Fprintf(w, "thread %s: %s (no open batch)\n", c.SourceThreadID, res.Outcome)
			return
		}
		fmt.Fprintf(w, "batch %s: %s\n", res.BatchID, res.Outcome)
	})
}

// BatchInspectHeadCmd is `cbth batch inspect-head`.
type BatchInspectHeadCmd struct {
	SourceThreadID string `help:"The thread." required:"" name:"source-thread-id"`
	pastFlags
}

// Run inspects the head.
func (c *BatchInspectHeadCmd) Run(env *Env) error {
	if c.History {
		return c.history(env, api.HistoryArgs{SourceThreadID: c.SourceThreadID})
	}
	past, err := c.args()
	if err != nil {
		return err
	}
	in, err := call(env, api.BatchInspectHead, api.ThreadArgs{SourceThreadID: c.SourceThreadID, PastArgs: past})
	if err != nil {
		return err
	}
	return env.emit(in, func(w io.Writer) { printInspection(w, in) })
}

// BatchInspectCmd is `cbth batch inspect`.
type BatchInspectCmd struct {
	BatchID string `help:"The batch." required:"" name:"batch-id"`
	pastFlags
}

// Run inspects the batch: a read, which appends nothing (recovery
// leases are issued by cbth desktop issue-artifact-leases).
func (c *BatchInspectCmd) Run(env *Env) error {
	if c.History {
		return c.history(env, api.HistoryArgs{BatchID: c.BatchID})
	}
	past, err := c.args()
	if err != nil {
		return err
	}
	in, err := call(env, api.BatchInspect, api.BatchArgs{BatchID: c.BatchID, PastArgs: past})
	if err != nil {
		return err
	}
	return env.emit(in, func(w io.Writer) { printInspection(w, in) })
}

func printInspection(w io.Writer, in query.BatchInspection) {
	b := in.Batch
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if in.AsOfSeq > 0 {
		fmt.Fprintf(tw, "as of\tseq %d\n", in.AsOfSeq)
	}
	fmt.Fprintf(tw, "batch\t%s\n", b.BatchID)
	fmt.Fprintf(tw, "thread\t%s (target %s)\n", b.SourceThreadID, b.TargetKind)
	fmt.Fprintf(tw, "state\t%s, replay %s%s\n", b.State, b.ReplayPolicy, reasonSuffix(b.ReplayPolicyReason))
	if b.ClosedAt != nil {
		fmt.Fprintf(tw, "closed\t%s at %s\n", b.CloseReason, b.ClosedAt.Local().Format(time.RFC3339))
	}
	if in.Gate != "" {
		fmt.Fprintf(tw, "delivery gate\t%s\n", in.Gate)
	}
	fmt.Fprintf(tw, "jobs\t%s\n", strings.Join(b.JobIDs, ", "))
	fmt.Fprintf(tw, "attempts\t%d accepted of at most %d, generation %d\n", b.DeliveryAttemptCount, b.MaxDeliveryAttempts, b.Generation)
	fmt.Fprintf(tw, "redelivery window\tuntil %s\n", b.RedeliveryWindowEndsAt.Local().Format(time.RFC3339))
	for _, a := range in.Attempts {
		fmt.Fprintf(tw, "  attempt %d\t%s %s%s\n", a.Generation, a.AttemptID, a.State, reasonSuffix(a.EndReason))
		if a.TurnID != "" {
			fmt.Fprintf(tw, "    turn\t%s on %s epoch %d, observation %s\n", a.TurnID, a.ManagedSessionID, a.SessionEpoch, a.ObservationState)
		}
	}
	if in.Recovery != nil {
		fmt.Fprintf(tw, "recovery envelope\tkept until %s\n", in.Recovery.RetentionUntil.Local().Format(time.RFC3339))
	}
	for _, l := range in.RecoveryLeases {
		fmt.Fprintf(tw, "artifact recovery lease\t%s for %s until %s\n", l.LeaseID, l.ArtifactID, l.Deadline.Local().Format(time.RFC3339))
	}
	tw.Flush()
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return " (" + r + ")"
}

// BatchListCmd is `cbth batch list`.
type BatchListCmd struct {
	ThreadID string `help:"Only batches of this thread." name:"thread-id"`
	State    string `help:"queued, materialized, cooldown, closed, open, parked or undelivered (closed with the result never confirmed delivered)." enum:",queued,materialized,cooldown,closed,open,parked,undelivered" default:""`
	Paging
}

// Run lists batches.
func (c *BatchListCmd) Run(env *Env) error {
	list, err := allPages(c.Paging, func(after string, limit int) ([]query.BatchView, string, error) {
		page, err := call(env, api.BatchList, api.BatchListArgs{SourceThreadID: c.ThreadID, State: c.State, After: after, Limit: limit})
		return page.Batches, page.Next, err
	})
	if err != nil {
		return err
	}
	return env.emit(list, func(w io.Writer) {
		if len(list) == 0 {
			fmt.Fprintln(w, "no batches")
			return
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "BATCH\tTHREAD\tSTATE\tREPLAY\tJOBS\tACCEPTED\tCLOSE REASON")
		for _, b := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", b.BatchID, b.SourceThreadID, b.State, b.ReplayPolicy, len(b.JobIDs), b.DeliveryAttemptCount, b.CloseReason)
		}
		tw.Flush()
	})
}

// WaitCmd is `cbth wait`.
type WaitCmd struct {
	JobID    []string      `help:"A job to wait for (repeatable)." name:"job-id"`
	ThreadID string        `help:"Wait for every job of this thread." name:"thread-id"`
	Timeout  time.Duration `help:"Give up after this long (0 waits for ever)." default:"0"`
}

// Run waits. It exits non-zero when any job ended other than delivered (or
// handed off).
func (c *WaitCmd) Run(env *Env) error {
	if len(c.JobID) == 0 && c.ThreadID == "" {
		return errs.New(errs.EINVAL, "give --job-id or --thread-id")
	}
	args := api.WaitArgs{JobIDs: c.JobID, SourceThreadID: c.ThreadID, TimeoutMS: c.Timeout.Milliseconds()}
	var res query.WaitResult
	err := env.spin(fmt.Sprintf("waiting for %s", waitWhat(c.JobID, c.ThreadID)), func() error {
		var err error
		res, err = call(env, api.Wait, args)
		return err
	})
	if err != nil {
		return err
	}
	// The first reply waited and says how it ended; the rest of its jobs
	// come a page at a time.
	for args.After = res.Next; args.After != ""; args.After = res.Next {
		more, err := call(env, api.Wait, args)
		if err != nil {
			return err
		}
		res.Jobs, res.Next = append(res.Jobs, more.Jobs...), more.Next
	}
	if err := env.emit(res, func(w io.Writer) {
		for _, j := range res.Jobs {
			fmt.Fprintf(w, "job %s %s %s\n", j.JobID, j.State, j.CloseReason)
		}
	}); err != nil {
		return err
	}
	warnUndelivered(env, res.Jobs)
	if !res.OK {
		return reported{errs.New(errs.ESTATE, "not every job was delivered")}
	}
	return nil
}

func waitWhat(jobs []string, thread string) string {
	if len(jobs) > 0 {
		return plural.Count(len(jobs), "job", "jobs")
	}
	return "the jobs of thread " + thread
}

// warnUndelivered tells the user, on stderr (with or without --json), of
// every job whose batch cbth gave up on: its result was never confirmed
// delivered and nothing will try again.
func warnUndelivered(env *Env, jobs []query.WaitJob) {
	for _, j := range jobs {
		if command.Undelivered(j.CloseReason) {
			fmt.Fprintf(env.Stderr, "warning: job %s was never delivered: cbth closed its batch %s (%s) and will not try again; the result is in `cbth job query %s`\n",
				j.JobID, j.BatchID, j.CloseReason, j.JobID)
		}
	}
}

// DebugCmd groups the testing controls.
type DebugCmd struct {
	Target DebugTargetCmd `cmd:"" help:"Set how the debug target treats a thread."`
	Turn   DebugTurnCmd   `cmd:"" help:"Report a turn event on the debug target's accepted turn of a thread (behaviour async)."`
	Clock  DebugClockCmd  `cmd:"" help:"Move a manual clock (daemon started with CBTH_TEST_CLOCK)."`
}

// DebugTargetCmd is `cbth debug target`.
type DebugTargetCmd struct {
	ThreadID  string `help:"The thread, or * for the default." required:"" name:"thread-id"`
	Behaviour string `arg:"" help:"deliver, accept, async, reject, unknown, turn_failed, hang or busy." enum:"deliver,accept,async,reject,unknown,turn_failed,hang,busy"`
}

// Run sets the behaviour.
func (c *DebugTargetCmd) Run(env *Env) error {
	res, err := call(env, api.DebugTargetSet, api.DebugSetArgs{SourceThreadID: c.ThreadID, Behaviour: c.Behaviour})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) { fmt.Fprintf(w, "thread %s: %s\n", c.ThreadID, c.Behaviour) })
}

// DebugTurnCmd is `cbth debug turn`.
type DebugTurnCmd struct {
	ThreadID     string `help:"The thread." required:"" name:"thread-id"`
	Event        string `help:"started, completed, failed, interrupted or replaced." required:"" enum:"started,completed,failed,interrupted,replaced"`
	SessionEpoch uint64 `help:"Report it from this session epoch instead of the current one (a stale stream is ignored)." name:"session-epoch"`
}

// Run reports the event.
func (c *DebugTurnCmd) Run(env *Env) error {
	res, err := call(env, api.DebugTurn, api.DebugTurnArgs{SourceThreadID: c.ThreadID, Event: c.Event, SessionEpoch: c.SessionEpoch})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "thread %s: %s on turn %s (%s epoch %d): %s\n", c.ThreadID, res.Event, res.TurnID, res.ManagedSessionID, res.SessionEpoch, res.Outcome)
	})
}

// DebugClockCmd is `cbth debug clock`.
type DebugClockCmd struct {
	Advance time.Duration `help:"How far to move the clock." required:""`
	NoSweep bool          `help:"Only move the clock: no sweep and no scheduling pass until the next request asks for one." name:"no-sweep"`
}

// Run advances the clock.
func (c *DebugClockCmd) Run(env *Env) error {
	res, err := call(env, api.DebugClock, api.AdvanceArgs{By: c.Advance.String(), NoSweep: c.NoSweep})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) { fmt.Fprintf(w, "now %s\n", res.Now.Format(time.RFC3339Nano)) })
}

// ArtifactCmd groups the artifact commands.
type ArtifactCmd struct {
	Pin ArtifactPinCmd `cmd:"" help:"Pin an artifact: it is not collected before the pin ends."`
}

// ArtifactPinCmd is `cbth artifact pin`.
type ArtifactPinCmd struct {
	ArtifactID string        `help:"The artifact." required:"" name:"artifact-id"`
	For        time.Duration `help:"Keep it this long from now." name:"for" xor:"until" required:""`
	Until      time.Time     `help:"Keep it until this RFC 3339 time." xor:"until" required:""`
}

// Run pins.
func (c *ArtifactPinCmd) Run(env *Env) error {
	args := api.PinArgs{ArtifactID: c.ArtifactID, Until: c.Until}
	if c.For > 0 {
		args.For = c.For.String() // measured on the daemon's clock
	}
	res, err := call(env, api.ArtifactPin, args)
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) { fmt.Fprintf(w, "artifact %s %s\n", c.ArtifactID, res.Outcome) })
}
