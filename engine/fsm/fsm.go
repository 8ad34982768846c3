// Package fsm holds the transition table of every aggregate as data and
// validates each event against it with github.com/looplab/fsm, on write and
// again on replay.
//
// A table has two kinds of rows. A move changes the aggregate's state; the
// move lists are exactly the seed's. An update is an event that records data
// without changing state, allowed only in the states it lists. Every
// (state, event) pair that is neither is illegal.
package fsm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	lfsm "github.com/looplab/fsm"
)

// None is the pseudo-state of an aggregate that does not exist yet. Only
// creating events leave it.
const None = "none"

// Move is a state-changing row: the event moves an aggregate from any of
// From to To.
type Move struct {
	Event string
	From  []string
	To    string
}

// Update is an in-place row: the event is legal in the listed states and
// leaves the state unchanged.
type Update struct {
	Event string
	In    []string
}

// Table is one aggregate's machine.
type Table struct {
	Kind    events.Kind
	States  []string // the aggregate's states, None excluded
	Moves   []Move
	Updates []Update
}

// table is one aggregate's machine written with its own state type S, so
// a row cannot name another aggregate's state or a misspelled one; Table
// gives the form the machines and the spec are built from.
type table[S ~string] struct {
	Kind    events.Kind
	States  []S
	Moves   []move[S]
	Updates []update[S]
}

type move[S ~string] struct {
	Event string
	From  []S
	To    S
}

type update[S ~string] struct {
	Event string
	In    []S
}

// Table is t with its states as strings.
func (t table[S]) Table() Table {
	out := Table{Kind: t.Kind, States: names(t.States)}
	for _, m := range t.Moves {
		out.Moves = append(out.Moves, Move{Event: m.Event, From: names(m.From), To: string(m.To)})
	}
	for _, u := range t.Updates {
		out.Updates = append(out.Updates, Update{Event: u.Event, In: names(u.In)})
	}
	return out
}

func names[S ~string](ss []S) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// stateChanged is the machine event of a ctxsession.state_changed to s: a
// payload whose target state is data (EventName).
func stateChanged(s CtxSessionState) string {
	return events.TypeCtxSessionStateChanged + "/" + string(s)
}

// Tables returns every aggregate's table, in events.Kinds order.
func Tables() []Table {
	return []Table{jobTable, batchTable, attemptTable, artifactTable, bindingTable, installationTable, sessionTable, ctxSessionTable, cursorTable, ctxTreeTable, appServerTable,
		taskTable, gatewayRouteTable, gatewayStreamTable, mcpTable, threadTable}
}

// EventName returns the machine event for a payload: its type, or for a
// payload whose target state is data, the type plus "/" and the target.
func EventName(p events.Payload) string {
	if c, ok := p.(events.CtxSessionStateChanged); ok {
		return c.EventType() + "/" + c.State
	}
	if c, ok := p.(*events.CtxSessionStateChanged); ok {
		return c.EventType() + "/" + c.State
	}
	if c, ok := p.(*events.SessionCreated); ok && c.Mode == SessionModeCodexDaemon {
		return sessionCreatedDetached
	}
	return p.EventType()
}

// Fit makes p, a payload of event's type, carry the data its machine
// event names (the inverse of EventName): the target state of a
// ctxsession.state_changed, the mode of a session created detached. For
// generators of legal events; p keeps every other field.
func Fit(event string, p events.Payload) {
	switch c := p.(type) {
	case *events.CtxSessionStateChanged:
		_, c.State, _ = strings.Cut(event, "/")
	case *events.SessionCreated:
		if event == sessionCreatedDetached {
			c.Mode = SessionModeCodexDaemon
		} else if c.Mode == SessionModeCodexDaemon {
			c.Mode = ""
		}
	}
}

// Machines validates events against every table. It is safe for concurrent
// use.
type Machines struct {
	m map[events.Kind]*machine
}

type machine struct {
	mu      sync.Mutex
	fsm     *lfsm.FSM
	updates map[string]map[string]bool // event -> states
	known   map[string]bool
	// moved remembers the moves the FSM has allowed, (from, event) ->
	// to: the tables never change, so a pair the FSM allowed once it
	// allows again, and replaying or folding an aggregate need not take
	// the FSM's lock and callbacks for every event. Refusals are not
	// remembered; they always ask the FSM.
	movedMu sync.RWMutex
	moved   map[[2]string]string
}

// New builds the machines from Tables.
func New() *Machines {
	ms := &Machines{m: make(map[events.Kind]*machine)}
	for _, t := range Tables() {
		var descs lfsm.Events
		known := map[string]bool{}
		for _, mv := range t.Moves {
			descs = append(descs, lfsm.EventDesc{Name: mv.Event, Src: mv.From, Dst: mv.To})
			known[mv.Event] = true
		}
		ups := map[string]map[string]bool{}
		for _, u := range t.Updates {
			if ups[u.Event] == nil {
				ups[u.Event] = map[string]bool{}
			}
			for _, s := range u.In {
				ups[u.Event][s] = true
			}
			known[u.Event] = true
		}
		ms.m[t.Kind] = &machine{fsm: lfsm.NewFSM(None, descs, nil), updates: ups, known: known, moved: map[[2]string]string{}}
	}
	return ms
}

// Step returns the state an aggregate of kind k moves to when event happens
// in state from. An illegal pair returns an ESTATE error and from.
func (ms *Machines) Step(k events.Kind, from, event string) (string, error) {
	m, ok := ms.m[k]
	if !ok {
		return from, errs.New(errs.EINTERNAL, "no state machine for kind %q", k)
	}
	if !m.known[event] {
		return from, errs.New(errs.ESTATE, "%s: event %s is not in the machine", k, event)
	}
	if m.updates[event][from] {
		return from, nil
	}
	pair := [2]string{from, event}
	m.movedMu.RLock()
	to, ok := m.moved[pair]
	m.movedMu.RUnlock()
	if ok {
		return to, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fsm.SetState(from)
	err := m.fsm.Event(context.Background(), event)
	var nt lfsm.NoTransitionError
	switch {
	case err == nil:
		to := m.fsm.Current()
		m.movedMu.Lock()
		m.moved[pair] = to
		m.movedMu.Unlock()
		return to, nil
	case errors.As(err, &nt):
		// Unreachable with these tables (no self-moves), kept for safety.
		return from, nil
	default:
		return from, errs.Wrap(errs.ESTATE, err, "%s: illegal transition %s from %s", k, event, from)
	}
}

// Legal reports every legal (state, event) pair of a table, for tests and
// documentation.
func (t Table) Legal() map[[2]string]string {
	out := map[[2]string]string{}
	for _, mv := range t.Moves {
		for _, f := range mv.From {
			out[[2]string{f, mv.Event}] = mv.To
		}
	}
	for _, u := range t.Updates {
		for _, s := range u.In {
			out[[2]string{s, u.Event}] = s
		}
	}
	return out
}

// Events lists a table's distinct event names in first-use order.
func (t Table) Events() []string {
	seen := map[string]bool{}
	var out []string
	add := func(e string) {
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	for _, mv := range t.Moves {
		add(mv.Event)
	}
	for _, u := range t.Updates {
		add(u.Event)
	}
	return out
}

func (t Table) String() string { return fmt.Sprintf("fsm.Table(%s)", t.Kind) }
