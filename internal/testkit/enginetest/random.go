// Package enginetest drives an engine with seeded random valid events
// across every aggregate, for replay-equality, crash and benchmark runs.
package enginetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
)

// Generator picks random legal events for random aggregates. It keeps its
// own model of each aggregate's state, so every event it produces is legal
// when appended in order.
type Generator struct {
	rnd     *rand.Rand
	tables  map[events.Kind]fsm.Table
	kinds   []events.Kind
	streams map[events.Kind][]*tracked
	next    int
	prefix  string
}

type tracked struct {
	sid     events.StreamID
	state   string
	version uint64
}

// NewGenerator returns a generator seeded with seed. Stream ids start with
// prefix, so generators with different prefixes never touch each other's
// aggregates.
func NewGenerator(seed uint64, prefix string) *Generator {
	g := &Generator{
		prefix:  prefix,
		rnd:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		tables:  map[events.Kind]fsm.Table{},
		streams: map[events.Kind][]*tracked{},
	}
	for _, t := range fsm.Tables() {
		g.tables[t.Kind] = t
		g.kinds = append(g.kinds, t.Kind)
	}
	return g
}

// Step is one generated append.
type Step struct {
	Stream   events.StreamID
	Expected uint64
	Payload  events.Payload
	apply    func()
}

// Commit tells the generator the step was appended.
func (s Step) Commit() { s.apply() }

// Next returns a random legal append. About one in eight creates a new
// aggregate; the rest move or update an existing one.
func (g *Generator) Next() Step {
	for {
		k := g.kinds[g.rnd.IntN(len(g.kinds))]
		t := g.tables[k]
		list := g.streams[k]
		var tr *tracked
		if len(list) == 0 || g.rnd.IntN(8) == 0 {
			g.next++
			tr = &tracked{sid: events.StreamID{Kind: k, ID: fmt.Sprintf("%s%s-%06d", g.prefix, k, g.next)}, state: fsm.None}
		} else {
			tr = list[g.rnd.IntN(len(list))]
		}
		var options [][2]string // event, target
		for pair, to := range t.Legal() {
			if pair[0] == tr.state {
				options = append(options, [2]string{pair[1], to})
			}
		}
		if len(options) == 0 {
			continue // terminal state
		}
		sortPairs(options)
		pick := options[g.rnd.IntN(len(options))]
		p := g.payload(pick[0])
		isNew := tr.state == fsm.None
		step := Step{Stream: tr.sid, Expected: tr.version, Payload: p}
		step.apply = func() {
			if isNew {
				g.streams[k] = append(g.streams[k], tr)
			}
			tr.state = pick[1]
			tr.version++
		}
		return step
	}
}

func sortPairs(p [][2]string) {
	for i := 1; i < len(p); i++ {
		for j := i; j > 0 && (p[j][0] < p[j-1][0] || (p[j][0] == p[j-1][0] && p[j][1] < p[j-1][1])); j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
}

// payload builds a random payload for a machine event name.
func (g *Generator) payload(event string) events.Payload {
	typ, _, _ := strings.Cut(event, "/")
	p, err := events.New(typ)
	if err != nil {
		panic(err)
	}
	g.fill(reflect.ValueOf(p).Elem(), 0)
	fsm.Fit(event, p)
	return p
}

var base = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

func (g *Generator) fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", g.rnd.IntN(1000)))
	case reflect.Bool:
		v.SetBool(g.rnd.IntN(2) == 0)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(g.rnd.IntN(100000)))
	case reflect.Uint64:
		v.SetUint(uint64(g.rnd.IntN(100)))
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(events.RawJSON(nil)) {
			v.Set(reflect.ValueOf(events.RawJSON(fmt.Sprintf(`{"n":%d}`, g.rnd.IntN(100)))))
			return
		}
		n := g.rnd.IntN(3)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := 0; i < n; i++ {
			g.fill(s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(base.Add(time.Duration(g.rnd.IntN(1_000_000)) * time.Second)))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				g.fill(v.Field(i), depth+1)
			}
		}
	}
}

// Drive appends n generated steps to e, one Append each.
func Drive(ctx context.Context, e *engine.Engine, g *Generator, n int) error {
	for i := 0; i < n; i++ {
		s := g.Next()
		meta := engine.Meta{Actor: events.ActorCLI}
		if i%7 == 0 {
			meta.CommandID = fmt.Sprintf("cmd-%d", i)
		}
		if _, err := e.Append(ctx, meta, s.Stream, s.Expected, s.Payload); err != nil {
			return fmt.Errorf("step %d (%s on %s): %w", i, s.Payload.EventType(), s.Stream, err)
		}
		s.Commit()
	}
	return nil
}

// Bulk appends n generated steps in requests of up to 5,000 events each:
// fast set-up for replay benchmarks, not a durability test.
func Bulk(ctx context.Context, e *engine.Engine, g *Generator, n int) error {
	for done := 0; done < n; {
		var steps []Step
		seen := map[events.StreamID]bool{}
		for len(steps) < 5000 && done+len(steps) < n {
			s := g.Next()
			if seen[s.Stream] {
				// The generator's model moves only on Commit; one event per
				// stream per request keeps it exact.
				break
			}
			seen[s.Stream] = true
			steps = append(steps, s)
		}
		emits := make([]engine.Emit, len(steps))
		for i, s := range steps {
			emits[i] = engine.Emit{Stream: s.Stream, Payload: s.Payload}
		}
		d := engine.DeciderFunc(func(engine.View, time.Time) (engine.Decision, error) {
			return engine.Decision{Emits: emits}, nil
		})
		if _, err := e.Execute(ctx, engine.Meta{Actor: events.ActorCLI}, d); err != nil {
			return err
		}
		for _, s := range steps {
			s.Commit()
		}
		done += len(steps)
	}
	return nil
}
