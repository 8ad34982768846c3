package query

import (
	"strconv"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/internal/errs"
)

// WaitJob is one job's line in a wait result.
type WaitJob struct {
	JobID       string       `json:"job_id"`
	State       fsm.JobState `json:"status"`
	BatchID     string       `json:"batch_id"`
	CloseReason string       `json:"close_reason"`
	Done        bool         `json:"done"`
	Delivered   bool         `json:"delivered"`
}

// WaitResult is where a set of jobs stands: done when every one failed,
// was cancelled, or sits in a closed batch; ok when every one of them was
// delivered. Done and OK are over every job; Jobs is one page of them
// (see PageBytes) and Next, when set, the cursor of the following page.
type WaitResult struct {
	Done bool      `json:"done"`
	OK   bool      `json:"ok"`
	Jobs []WaitJob `json:"jobs"`
	Next string    `json:"next,omitempty"`
}

// Wait reports on the named jobs and every job of thread, listing one
// page of at most limit of them from the cursor after (how many jobs the
// pages before listed; "" for the first). A thread's jobs
// come from the job.thread index: waiting on a thread costs its own jobs,
// not every job in the log.
func Wait(s engine.Reader, jobIDs []string, thread, after string, limit int) (WaitResult, error) {
	skip := 0
	if after != "" {
		n, err := strconv.Atoi(after)
		if err != nil || n < 0 {
			return WaitResult{}, errs.New(errs.EINVAL, "bad wait cursor %q", after)
		}
		skip = n
	}
	p := newPager[WaitJob](limit)
	res := WaitResult{Done: true, OK: true}
	ids := append([]string(nil), jobIDs...)
	if thread != "" {
		ids = append(ids, JobIDsOfThread(s, thread)...)
	}
	for i, id := range ids {
		j, err := engine.Job(s, id)
		if err != nil {
			return res, err
		}
		if j == nil {
			return res, errs.New(errs.ENOENT, "no job %s", id)
		}
		w := WaitJob{JobID: j.ID, State: j.State, BatchID: j.BatchID}
		switch {
		case j.State == fsm.JobFailed || j.State == fsm.JobCancelled:
			w.Done = true
		case j.BatchID != "":
			b, err := engine.Batch(s, j.BatchID)
			if err != nil {
				return res, err
			}
			if b != nil && !b.Open() {
				w.Done, w.CloseReason = true, b.CloseReason
				w.Delivered = b.CloseReason == command.CloseDelivered || b.CloseReason == command.CloseHandoffRecorded
			}
		}
		res.Done = res.Done && w.Done
		res.OK = res.OK && w.Delivered
		if i >= skip && res.Next == "" && !p.add(w) {
			res.Next = strconv.Itoa(i)
		}
	}
	if !res.Done {
		res.OK = false
	}
	res.Jobs = p.items
	return res, nil
}
