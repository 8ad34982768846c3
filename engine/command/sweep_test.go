package command_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
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
