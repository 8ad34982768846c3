package inspectmod

import (
	"context"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/engine/query"
)

// maxWatchItems bounds each list of a watch view; the counts say how many
// there are.
const maxWatchItems = 100

// watchNext serves `cbth watch`: it waits, on the engine's commit
// subscription (never polling the log), until the log head passes
// a.After or a.WaitMS runs out, then answers the live view.
func (m *Module) watchNext(ctx context.Context, a api.WatchArgs) (api.WatchView, error) {
	if a.WaitMS > 0 {
		// Subscribed before the head is read: a commit in between
		// still wakes the wait.
		sub := m.h.Eng.Subscribe()
		if m.h.Eng.Head() <= a.After {
			t := time.NewTimer(time.Duration(min(a.WaitMS, 60_000)) * time.Millisecond)
			select {
			case <-sub.C():
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		sub.Close()
	}
	v := api.WatchView{Heads: []api.WatchHead{}, InFlight: []api.WatchAttempt{}, Parked: []api.WatchHead{}, Tasks: []api.WatchTask{}}
	now := m.h.Clock.Now()
	err := m.h.Eng.Read(func(s engine.Snapshot) error {
		v.Seq = s.Checkpoint()
		seen := map[string]bool{}
		for _, r := range s.Scan(index.ThreadOpen, "") {
			b, err := engine.Batch(s, r.ID)
			if err != nil || b == nil || seen[b.SourceThreadID] {
				continue
			}
			seen[b.SourceThreadID] = true // the first open batch of a thread is its head
			h := api.WatchHead{SourceThreadID: b.SourceThreadID, BatchID: b.ID, TargetKind: b.TargetKind, State: b.State,
				ReplayPolicy: b.ReplayPolicy, Reason: b.ReplayPolicyReason, Jobs: len(b.JobIDs), Since: b.FirstReadyAt}
			if v.HeadCount++; len(v.Heads) < maxWatchItems {
				v.Heads = append(v.Heads, h)
			}
			if b.Parked() {
				if v.ParkedCount++; len(v.Parked) < maxWatchItems {
					v.Parked = append(v.Parked, h)
				}
			}
		}
		in, err := query.InFlight(s)
		if err != nil {
			return err
		}
		for _, f := range in {
			if len(v.InFlight) == maxWatchItems {
				break
			}
			at := f.Attempt.UpdatedAt
			v.InFlight = append(v.InFlight, api.WatchAttempt{TargetKind: f.TargetKind, SourceThreadID: f.Attempt.SourceThreadID,
				BatchID: f.Attempt.BatchID, AttemptID: f.Attempt.ID, Generation: f.Attempt.Generation, State: f.Attempt.State, Since: at})
		}
		v.Undelivered = query.Undelivered(s)
		tp, err := query.Tasks(s, query.TaskFilter{State: "live", Limit: maxWatchItems})
		if err != nil {
			return err
		}
		for _, t := range tp.Tasks {
			v.Tasks = append(v.Tasks, api.WatchTask{TaskID: t.TaskID, JobID: t.JobID, State: t.State, Command: t.Command, Since: t.CreatedAt,
				Watch: t.Watch, Wakes: t.Wakes})
		}
		return nil
	})
	v.BusyReasons = m.h.BusyReasons(now)
	if v.BusyReasons == nil {
		v.BusyReasons = []string{}
	}
	return v, err
}
