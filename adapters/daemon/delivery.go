package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/errs"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/engine/projections"
	"github.com/cbth-dev/cbth/events"
)

// deliveryConfig turns the file configuration into the commands' input.
func (d *Daemon) deliveryConfig() command.DeliveryConfig {
	c := d.opt.Config
	return command.DeliveryConfig{
		MaxJobsPerBatch: c.Delivery.MaxJobsPerBatch, MaxTotalBytes: c.Delivery.MaxTotalBytes,
		MaxWaitWindow: c.Delivery.MaxWaitWindow.Duration, MinSendInterval: c.Delivery.MinSendInterval.Duration,
		Cooldown: c.Delivery.Cooldown.Duration, RedeliveryWindow: c.Delivery.RedeliveryWindow.Duration,
		MaxDeliveryAttempts: c.Delivery.MaxDeliveryAttempts, EligibleBackoff: c.Delivery.EligibleBackoff.Duration,
		InlinePayloadLimit: c.Delivery.InlinePayloadLimit, ObservationWindow: c.Delivery.ObservationWindow.Duration,
		MinArtifactTTL: c.MinArtifactTTL.Duration, PostCloseTTL: c.PostCloseTTL.Duration,
	}
}

// targets are the delivery targets this daemon can drive. cli and desktop
// arrive with their adapters; until then their batches wait in the FIFO
// (and their windows still expire).
func (d *Daemon) targets() map[string]target.Target {
	return map[string]target.Target{"debug": d.debug}
}

// schedule serves every eligible head in the canonical fair order of each
// target: heads sorted by (first ready time, thread), starting after the
// target's durable cursor and wrapping around. It loops until a pass
// starts nothing.
func (d *Daemon) schedule(ctx context.Context) {
	d.schedMu.Lock()
	defer d.schedMu.Unlock()
	for name, t := range d.targets() {
		for pass := 0; pass < 100; pass++ {
			threads, err := d.fairOrder(name)
			if err != nil {
				d.opt.Log.Error("fair order", "target", name, "err", err)
				break
			}
			started := 0
			for _, th := range threads {
				ok, err := d.deliverOnce(ctx, t, th)
				if err != nil {
					d.opt.Log.Error("deliver", "thread", th, "err", err)
					continue
				}
				if ok {
					started++
				}
			}
			if started == 0 {
				break
			}
		}
	}
}

// fairOrder lists the threads whose head batch targets name, in the
// canonical order rotated to start just after the cursor.
func (d *Daemon) fairOrder(name string) ([]string, error) {
	type head struct{ key, thread string }
	var heads []head
	var cursorKey string
	err := d.eng.View(func(v *projections.Tx) error {
		for _, r := range v.Scan(index.Head, index.HeadPrefix(name)) {
			if _, th, ok := index.ParseHead(r.Key, name); ok {
				heads = append(heads, head{key: r.Key, thread: th})
			}
		}
		s, err := v.State(events.KindCursor, name)
		if err != nil {
			return err
		}
		if c, ok := s.(*aggregate.Cursor); ok {
			cursorKey = index.HeadKey(name, c.ReadyAt, c.ThreadID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// heads arrive sorted by key; rotate past the cursor.
	split := 0
	for split < len(heads) && heads[split].key <= cursorKey {
		split++
	}
	out := make([]string, 0, len(heads))
	for _, h := range append(heads[split:], heads[:split]...) {
		out = append(out, h.thread)
	}
	return out, nil
}

// deliverOnce tries one fresh delivery to thread: the accept_pending
// barrier is durable before the target is called, and the target's answer
// is recorded after.
func (d *Daemon) deliverOnce(ctx context.Context, t target.Target, thread string) (bool, error) {
	cfg := d.deliveryConfig()
	meta := engine.Meta{Actor: events.ActorAdapter, CorrelationID: "deliver:" + thread}
	res, err := d.eng.Execute(ctx, meta, command.StartDelivery{Config: cfg, ThreadID: thread, Kind: "debug_deliver"})
	if err != nil || res.Outcome != "started" {
		return false, err
	}
	del := res.Value.(command.Delivery)
	dctx, cancel := context.WithTimeout(ctx, d.opt.Config.Delivery.DeliveryTimeout.Duration)
	out := t.Deliver(dctx, del)
	cancel()
	meta.CorrelationID = "deliver:" + del.AttemptID
	rec, err := d.eng.Execute(ctx, meta, command.RecordOutcome{Config: cfg, AttemptID: del.AttemptID, RPCRequestID: del.RPCRequestID,
		Outcome: out.Outcome, TurnID: out.TurnID, Reason: out.Reason, Tracks: out.Tracks})
	if err != nil {
		return true, err
	}
	d.opt.Log.Info("delivery", "thread", thread, "batch", del.BatchID, "attempt", del.AttemptID, "generation", del.Generation, "outcome", rec.Outcome)
	if rec.Outcome != command.Accepted {
		return true, nil
	}
	for _, ev := range out.Turn {
		obs, err := d.eng.Execute(ctx, meta, command.ObserveTurn{Config: cfg, AttemptID: del.AttemptID, TurnID: out.TurnID, Event: ev})
		if err != nil {
			return true, err
		}
		if obs.Outcome != "observed" {
			d.opt.Log.Info("turn", "thread", thread, "attempt", del.AttemptID, "event", ev, "outcome", obs.Outcome)
		}
	}
	return true, nil
}

// runParkHooks runs the operator's hook for each parked batch whose
// notification is due, and records every run. A failed run is retried with
// a growing back-off, five times at most.
func (d *Daemon) runParkHooks(ctx context.Context, now time.Time) {
	var due []*aggregate.Batch
	_ = d.eng.View(func(v *projections.Tx) error {
		for _, dd := range v.DueBy(now) {
			if dd.Name != "batch.park_hook" {
				continue
			}
			s, err := v.State(events.KindBatch, dd.ID)
			if err == nil && s != nil {
				due = append(due, s.(*aggregate.Batch))
			}
		}
		return nil
	})
	for _, b := range due {
		n := b.ParkNotifyAttempts + 1
		ev := &events.BatchParkNotified{Attempt: n}
		hook := d.opt.Config.ParkHook
		if len(hook) == 0 {
			ev.OK, ev.Error = true, "no park_hook configured"
		} else {
			hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			cmd := exec.CommandContext(hctx, hook[0], hook[1:]...)
			cmd.Env = append(cmd.Environ(), "CBTH_BATCH_ID="+b.ID, "CBTH_THREAD_ID="+b.SourceThreadID,
				"CBTH_REASON="+b.ReplayPolicyReason, "CBTH_HOME="+d.opt.Home.Root)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			cancel()
			ev.OK = err == nil
			if err != nil {
				ev.ExitCode = cmd.ProcessState.ExitCode()
				ev.Error = strings.TrimSpace(fmt.Sprintf("%v %s", err, firstLine(stderr.String())))
				if n < 5 {
					ev.NextRetryAt = now.Add(time.Duration(n*n) * 10 * time.Second)
				}
			}
		}
		_, err := d.eng.Append(ctx, engine.Meta{Actor: events.ActorSweep, CorrelationID: "park-hook:" + b.ID},
			events.StreamID{Kind: events.KindBatch, ID: b.ID}, b.Version, ev)
		if err != nil && errs.CodeOf(err) != errs.ECONFLICT {
			d.opt.Log.Error("record park hook", "batch", b.ID, "err", err)
		}
		d.opt.Log.Warn("batch parked for manual resolution", "batch", b.ID, "thread", b.SourceThreadID, "reason", b.ReplayPolicyReason, "hook_ok", ev.OK, "hook_error", ev.Error)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// parked counts the batches waiting for manual resolution.
func (d *Daemon) parked() int {
	n := 0
	_ = d.eng.View(func(v *projections.Tx) error { n = len(v.Lookup(index.Parked, "")); return nil })
	return n
}
