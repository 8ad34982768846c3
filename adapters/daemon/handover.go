package daemon

import (
	"context"
	"os"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
)

// handover is daemon.handover: the modules refuse new work and let what
// runs finish (or stop it: Drainer), then the daemon stops serving. A
// wait that runs out gives up the handover and changes nothing.
func (d *Daemon) handover(ctx context.Context, a api.HandoverArgs) (api.HandoverReply, error) {
	var drainers []Drainer
	for _, m := range d.opt.Modules {
		if dr, ok := m.(Drainer); ok {
			drainers = append(drainers, dr)
		}
	}
	rep := api.HandoverReply{Outcome: "handing_over", PID: os.Getpid(), Version: d.opt.Version, Protocol: ipc.Proto}
	for i, dr := range drainers {
		n, ok := dr.Drain(ctx, a.StopTasks)
		if !ok {
			for _, dr := range drainers[:i] {
				dr.Resume(ctx)
			}
			return api.HandoverReply{}, errs.New(errs.EBUSY, "a handover is already under way")
		}
		rep.TasksStopped += n
	}
	// Tasks finish; foregrounds attached to the shared Codex app-server
	// (cbth cli run) detach: the daemon stops that app-server when it
	// exits, so a handover under one would end the user's session.
	deadline := time.NewTimer(time.Duration(a.WaitMS) * time.Millisecond)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		// The wait wakes when a drainer's work ends, and at each tick
		// (an attached client detaching, or another drainer's end).
		n, ended := 0, (<-chan struct{})(nil)
		for _, dr := range drainers {
			k, c := dr.Left()
			if n += k; k > 0 {
				ended = c
			}
		}
		attached := d.srv.Attached()
		if n == 0 && attached == 0 {
			break
		}
		select {
		case <-ended:
		case <-tick.C:
		case <-deadline.C:
			for _, dr := range drainers {
				dr.Resume(ctx)
			}
			return api.HandoverReply{}, errs.New(errs.ETIMEDOUT, "after %s %s still running and %s attached (cbth cli run); the daemon goes on as before. Wait longer (--wait), stop the tasks (--stop-tasks: their jobs fail, none is run twice), or end the attached sessions",
				time.Duration(a.WaitMS)*time.Millisecond, plural.Count(n, "task", "tasks"), plural.Count(attached, "client", "clients"))
		case <-ctx.Done():
			return api.HandoverReply{}, ctx.Err()
		}
	}
	// Deliveries in flight finish and record their answers before the
	// daemon stops: cancelling one would leave it unproven, and parked.
	d.sched.halt()
	limit := time.Now().Add(d.opt.Config.Delivery.DeliveryTimeout.Duration + 5*time.Second)
	for d.sched.inFlight() > 0 && time.Now().Before(limit) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	d.opt.Log.Info("handing over: stopping", "tasks_stopped", rep.TasksStopped, "deliveries_in_flight", d.sched.inFlight())
	d.stop()
	return rep, nil
}
