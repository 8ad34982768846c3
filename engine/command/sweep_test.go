package command_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// dueView is a view with the given deadlines due and no states behind
// them: it shows which deadline kinds the sweep has a case for.
type dueView struct{ due []index.Due }

func (v dueView) State(events.Kind, string) (aggregate.State, error) { return nil, nil }
func (v dueView) Lookup(string, string) []index.Ref                  { return nil }
func (v dueView) Scan(string, string) []index.Ref                    { return nil }
func (v dueView) DueBy(time.Time) []index.Due                        { return v.due }
func (v dueView) NewID() string                                      { panic("no ids") }
func (v dueView) NextSeq() uint64                                    { return 1 }

// The sweep has a case for every deadline kind a state can emit, and
// refuses one it does not know rather than skip it silently.
func TestSweepHasACaseForEveryDeadlineKind(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	var due []index.Due
	for _, k := range index.DueKinds {
		due = append(due, index.Due{At: now, Kind: events.KindBatch, ID: "x", Name: k})
	}
	dec, err := command.Sweep{Config: cfg}.Decide(dueView{due}, now)
	if err != nil {
		t.Fatalf("sweep over every kind: %v", err)
	}
	if len(dec.Emits) != 0 || engine.AnswerOf(command.Sweep{Config: cfg}, dec).Due != len(index.DueKinds) {
		t.Fatalf("sweep over absent states: %+v", dec)
	}
	_, err = command.Sweep{Config: cfg}.Decide(dueView{[]index.Due{{At: now, Kind: events.KindBatch, ID: "x", Name: "batch.unheard_of"}}}, now)
	if errs.CodeOf(err) != errs.EINTERNAL {
		t.Fatalf("an unknown deadline kind: %v, want EINTERNAL", err)
	}
}

// What daemon status shows of a sweep stays small however much it did:
// each list cut to its first n ids, the rest counted.
func TestSweepResultCapped(t *testing.T) {
	ids := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("id-%d", i)
		}
		return out
	}
	r := command.SweepResult{Due: 5, Collected: ids(250), Closed: ids(3), Parked: nil, TimedOut: ids(101)}
	c := r.Capped(100)
	if len(c.Collected) != 100 || c.Collected[99] != "id-99" || len(c.Closed) != 3 || c.Parked != nil || len(c.TimedOut) != 100 ||
		c.Omitted != 151 || c.Due != 5 {
		t.Fatalf("capped: %d collected, %d closed, %v parked, %d timed out, %d omitted", len(c.Collected), len(c.Closed), c.Parked, len(c.TimedOut), c.Omitted)
	}
	if len(r.Collected) != 250 || r.Omitted != 0 {
		t.Fatal("Capped changed the result it was called on")
	}
}

// The head-batch part of eligibility: each rule holds a head back on its
// own, the redelivery window's included (a kick must not deliver a head
// whose window ended, even before the sweep closed it: issue 36).
func TestBatchHold(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	c := command.DeliveryConfig{MaxJobsPerBatch: 10, MaxTotalBytes: 1 << 20}
	ok := func() *aggregate.Batch {
		b := &aggregate.Batch{IsHead: true, ReplayPolicy: aggregate.ReplayAutomatic,
			JobIDs: []string{"j"}, MaxDeliveryAttempts: 3, RedeliveryWindowEndsAt: now.Add(time.Hour)}
		b.State = fsm.BatchQueued
		return b
	}
	for _, tc := range []struct {
		name   string
		change func(*aggregate.Batch)
		reason string
		wake   time.Time
	}{
		{"eligible", func(*aggregate.Batch) {}, "", time.Time{}},
		{"not the head", func(b *aggregate.Batch) { b.IsHead = false }, "head not promoted", time.Time{}},
		{"window ended now", func(b *aggregate.Batch) { b.RedeliveryWindowEndsAt = now }, "redelivery window ended", time.Time{}},
		{"window ended before", func(b *aggregate.Batch) { b.RedeliveryWindowEndsAt = now.Add(-time.Second) }, "redelivery window ended", time.Time{}},
		{"window ends a second later", func(b *aggregate.Batch) { b.RedeliveryWindowEndsAt = now.Add(time.Second) }, "", time.Time{}},
		{"parked", func(b *aggregate.Batch) { b.ReplayPolicy = aggregate.ReplayManual }, "manual resolution only", time.Time{}},
		{"merging", func(b *aggregate.Batch) { b.MergeUntil = now.Add(time.Minute) }, "merge window open", now.Add(time.Minute)},
		{"send interval", func(b *aggregate.Batch) { b.NextDeliveryNotBefore = now.Add(time.Minute) }, "minimum send interval", now.Add(time.Minute)},
		{"backing off", func(b *aggregate.Batch) { b.EligibleAfter = now.Add(time.Minute) }, "backing off after a reject", now.Add(time.Minute)},
		{"budget spent", func(b *aggregate.Batch) { b.DeliveryAttemptCount = 3 }, "attempt budget spent", time.Time{}},
	} {
		b := ok()
		tc.change(b)
		reason, wake := c.BatchHold(b, now)
		if reason != tc.reason || !wake.Equal(tc.wake) {
			t.Errorf("%s: %q until %v, want %q until %v", tc.name, reason, wake, tc.reason, tc.wake)
		}
	}
}
