package query

import (
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/errs"
	"github.com/cbth-dev/cbth/events"
)

// WaitJob is one job's line in a wait result.
type WaitJob struct {
	JobID       string `json:"job_id"`
	Status      string `json:"status"`
	BatchID     string `json:"batch_id"`
	CloseReason string `json:"close_reason"`
	Done        bool   `json:"done"`
	Delivered   bool   `json:"delivered"`
}

// WaitResult is where a set of jobs stands: done when every one failed,
// was cancelled, or sits in a closed batch; ok when every one of them was
// delivered.
type WaitResult struct {
	Done bool      `json:"done"`
	OK   bool      `json:"ok"`
	Jobs []WaitJob `json:"jobs"`
}

// Wait reports on the named jobs and every job of thread. A thread's
// jobs come from the job.thread index: waiting on a thread costs its own
// jobs, not every job in the log.
func Wait(s engine.Reader, jobIDs []string, thread string) (WaitResult, error) {
	res := WaitResult{Done: true, OK: true, Jobs: []WaitJob{}}
	ids := append([]string(nil), jobIDs...)
	if thread != "" {
		ids = append(ids, JobIDsOfThread(s, thread)...)
	}
	for _, id := range ids {
		j, err := state[*aggregate.Job](s, events.KindJob, id)
		if err != nil {
			return res, err
		}
		if j == nil {
			return res, errs.New(errs.ENOENT, "no job %s", id)
		}
		w := WaitJob{JobID: j.ID, Status: j.Status, BatchID: j.BatchID}
		switch {
		case j.Status == "failed" || j.Status == "cancelled":
			w.Done = true
		case j.BatchID != "":
			b, err := state[*aggregate.Batch](s, events.KindBatch, j.BatchID)
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
		res.Jobs = append(res.Jobs, w)
	}
	if !res.Done {
		res.OK = false
	}
	return res, nil
}
