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

// Tables returns every aggregate's table, in events.Kinds order.
func Tables() []Table {
	return []Table{jobTable, batchTable, attemptTable, artifactTable, bindingTable, installationTable, sessionTable, ctxSessionTable, cursorTable, ctxTreeTable, appServerTable,
		taskTable, gatewayRouteTable, gatewayStreamTable, mcpTable}
}

var jobTable = Table{
	Kind:   events.KindJob,
	States: []string{"running", "ready", "failed", "cancelled"},
	Moves: []Move{
		{"job.submitted", []string{None}, "running"},
		{"job.completed", []string{"running"}, "ready"},
		{"job.failed", []string{"running"}, "failed"},
		{"job.cancelled", []string{"running", "ready"}, "cancelled"},
	},
	Updates: []Update{
		// A superseded batch's ready jobs move into the batch that
		// superseded it.
		{"job.carried", []string{"ready"}},
	},
}

var batchOpen = []string{"queued", "materialized", "cooldown"}

var batchTable = Table{
	Kind:   events.KindBatch,
	States: []string{"queued", "materialized", "cooldown", "closed"},
	Moves: []Move{
		{"batch.opened", []string{None}, "queued"},
		{"batch.materialized", []string{"queued", "cooldown"}, "materialized"},
		{"batch.delivery_accepted", []string{"materialized"}, "cooldown"},
		{"batch.closed", batchOpen, "closed"},
		{"batch.handoff_recorded", []string{"cooldown"}, "closed"},
		// An operator's supersede of the head: close_reason superseded.
		{"batch.superseded", batchOpen, "closed"},
	},
	Updates: []Update{
		{"batch.jobs_added", []string{"queued"}},
		// A fresh attempt after an abandoned one re-materializes in place.
		{"batch.materialized", []string{"materialized"}},
		{"batch.replay_policy_changed", batchOpen},
		{"batch.eligible_after_set", batchOpen},
		{"batch.recovery_pinned", []string{"closed"}},
		{"batch.recovery_collected", []string{"closed"}},
		{"batch.promoted", []string{"queued"}},
		{"batch.park_notified", []string{"queued", "materialized", "cooldown", "closed"}},
	},
}

// A CortexFS tree: its objects and aliases are registrations; the files
// under the root are their projection.
var ctxTreeTable = Table{
	Kind:   events.KindCtxTree,
	States: []string{"active"},
	Moves: []Move{
		{"ctxtree.initialized", []string{None}, "active"},
	},
	Updates: []Update{
		{"ctxtree.initialized", []string{"active"}},
		{"ctxtree.object_put", []string{"active"}},
		{"ctxtree.object_removed", []string{"active"}},
		{"ctxtree.alias_put", []string{"active"}},
		{"ctxtree.alias_removed", []string{"active"}},
	},
}

// The MCP calls of one Codex thread are an audit stream, not one of the
// seed's aggregates: every call is recorded, none changes its state.
var mcpTable = Table{
	Kind:   events.KindMCP,
	States: []string{"active"},
	Moves: []Move{
		{"mcp.tool_called", []string{None}, "active"},
	},
	Updates: []Update{
		{"mcp.tool_called", []string{"active"}},
	},
}

// The cursor is not one of the seed's aggregates but its durable
// fair-ready cursor: one per target scope, only ever advanced.
var cursorTable = Table{
	Kind:   events.KindCursor,
	States: []string{"active"},
	Moves: []Move{
		{"cursor.advanced", []string{None}, "active"},
	},
	Updates: []Update{
		{"cursor.advanced", []string{"active"}},
	},
}

var attemptLive = []string{"prepared", "accept_pending", "arm_pending", "cooldown"}

var attemptTable = Table{
	Kind:   events.KindAttempt,
	States: []string{"prepared", "accept_pending", "arm_pending", "cooldown", "closed", "superseded", "abandoned"},
	Moves: []Move{
		{"attempt.prepared", []string{None}, "prepared"},
		{"attempt.arm_pending_noted", []string{"prepared"}, "arm_pending"},
		{"attempt.armed", []string{"arm_pending"}, "cooldown"},
		{"attempt.accept_pending", []string{"prepared"}, "accept_pending"},
		{"attempt.accepted", []string{"accept_pending"}, "cooldown"},
		{"attempt.rejected_before_accept", []string{"accept_pending"}, "prepared"},
		{"attempt.closed", []string{"cooldown"}, "closed"},
		{"attempt.abandoned", attemptLive, "abandoned"},
		{"attempt.superseded", attemptLive, "superseded"},
	},
	Updates: []Update{
		{"attempt.turn_observed", []string{"cooldown"}},
		// Relay markers are issued while the bridge still has to arm;
		// a consumption lands in the append of the CAS it stands for.
		{"attempt.relay_marker_issued", []string{"prepared", "arm_pending"}},
		{"attempt.relay_consumed", []string{"arm_pending", "cooldown"}},
	},
}

var artifactTable = Table{
	Kind:   events.KindArtifact,
	States: []string{"stored", "collected"},
	Moves: []Move{
		{"artifact.ingested", []string{None}, "stored"},
		{"artifact.collected", []string{"stored"}, "collected"},
	},
	Updates: []Update{
		{"artifact.referenced", []string{"stored"}},
		{"artifact.released", []string{"stored"}},
		{"artifact.pinned", []string{"stored"}},
		{"artifact.recovery_lease_issued", []string{"stored"}},
		{"artifact.recovery_lease_revoked", []string{"stored"}},
	},
}

var bindingTable = Table{
	Kind:   events.KindBinding,
	States: []string{"unbound", "bound", "degraded"},
	Moves: []Move{
		{"binding.bound", []string{None, "unbound", "degraded"}, "bound"},
		{"binding.degraded", []string{"bound"}, "degraded"},
		{"binding.unbound", []string{"bound", "degraded"}, "unbound"},
	},
	Updates: []Update{
		{"binding.bound", []string{"bound"}}, // operator repair of a bound thread
		{"binding.armed", []string{"bound"}},
		{"binding.quiesced", []string{"bound", "degraded"}},
		// Pause-proof relay markers: a degraded binding's armed
		// generation may still be proven paused (note-paused).
		{"binding.relay_marker_issued", []string{"bound", "degraded"}},
		{"binding.relay_consumed", []string{"bound", "degraded"}},
	},
}

var installationTable = Table{
	Kind:   events.KindInstallation,
	States: []string{"configured"},
	Moves: []Move{
		{"installation.repaired", []string{None}, "configured"},
	},
	Updates: []Update{
		{"installation.repaired", []string{"configured"}},
		{"installation.bridge_selected", []string{"configured"}},
		{"installation.relay_scanner_bound", []string{"configured"}},
		{"installation.relay_scanner_advanced", []string{"configured"}},
		{"installation.relay_scanner_degraded", []string{"configured"}},
		{"installation.mcp_validation_requested", []string{"configured"}},
		{"installation.mcp_writeback_validated", []string{"configured"}},
		{"installation.snapshot_revisions_reserved", []string{"configured"}},
	},
}

// A CLI managed session: live while a foreground `cbth cli run` is
// attached, detached once it left, parked while a manual batch of its
// thread is unresolved, stale when the thread can no longer be reached,
// retired for good. Its epoch advances in place while it is live,
// detached or parked; a stale session's epoch advances only when a
// foreground reattaches it (attached, then epoch_advanced). The move
// stale -> live by epoch_advanced and retired from parked are legal but
// no command emits them: logs written before the session commands
// existed use them (fixtures/logs).
var sessionTable = Table{
	Kind:   events.KindSession,
	States: []string{"live", "detached", "parked", "stale", "retired"},
	Moves: []Move{
		{"session.created", []string{None}, "live"},
		{"session.detached", []string{"live"}, "detached"},
		{"session.attached", []string{"detached", "stale"}, "live"},
		{"session.parked", []string{"live", "detached", "stale"}, "parked"},
		{"session.unparked", []string{"parked"}, "detached"},
		{"session.stale", []string{"live", "detached"}, "stale"},
		{"session.retired", []string{"live", "detached", "parked", "stale"}, "retired"},
		{"session.epoch_advanced", []string{"stale"}, "live"},
	},
	Updates: []Update{
		{"session.epoch_advanced", []string{"live", "detached", "parked"}},
		{"session.permission_observed", []string{"live", "detached"}},
		{"session.permission_drifted", []string{"live", "detached"}},
	},
}

// One instance of the shared Codex app-server: started, then exited.
var appServerTable = Table{
	Kind:   events.KindAppServer,
	States: []string{"running", "exited"},
	Moves: []Move{
		{"appserver.started", []string{None}, "running"},
		{"appserver.exited", []string{"running"}, "exited"},
	},
}

var ctxSessionTable = Table{
	Kind:   events.KindCtxSession,
	States: []string{"active", "idle", "done", "error"},
	Moves: []Move{
		{"ctxsession.opened", []string{None}, "active"},
		{"ctxsession.state_changed/idle", []string{"active"}, "idle"},
		{"ctxsession.state_changed/done", []string{"active", "idle"}, "done"},
		{"ctxsession.state_changed/error", []string{"active", "idle"}, "error"},
		{"ctxsession.state_changed/active", []string{"idle", "done", "error"}, "active"},
	},
	Updates: []Update{
		{"ctxsession.message", []string{"active", "idle"}},
		{"ctxsession.event", []string{"active", "idle", "done", "error"}},
	},
}

// A task is the daemon running one job's command (cbth task run). It is
// not one of the seed's aggregates: the job keeps the seed's four states,
// and the process supervision lives beside it. A task ends exactly once:
// exited when its daemon saw the process end (or never start), lost when
// a later daemon found it unfinished and failed it closed.
var taskLive = []string{"queued", "running", "stopping"}

var taskTable = Table{
	Kind:   events.KindTask,
	States: []string{"queued", "running", "stopping", "exited", "lost"},
	Moves: []Move{
		{"task.submitted", []string{None}, "queued"},
		{"task.started", []string{"queued"}, "running"},
		{"task.stopping", []string{"running"}, "stopping"},
		{"task.exited", taskLive, "exited"},
		{"task.lost", taskLive, "lost"},
	},
}

// A gateway route (spec/channels.md): a routing key pointed at a
// destination until the operator removes it; adding again replaces it.
var gatewayRouteTable = Table{
	Kind:   events.KindGatewayRoute,
	States: []string{"active", "removed"},
	Moves: []Move{
		{"gateway.route_added", []string{None, "removed"}, "active"},
		{"gateway.route_removed", []string{"active"}, "removed"},
	},
	Updates: []Update{
		{"gateway.route_added", []string{"active"}},
	},
}

// A channel stream as the gateway saw it: sequence, gaps and remote mode
// are data, so the stream stays open.
var gatewayStreamTable = Table{
	Kind:   events.KindGatewayStream,
	States: []string{"open"},
	Moves: []Move{
		{"gateway.envelope_recorded", []string{None}, "open"},
	},
	Updates: []Update{
		{"gateway.envelope_recorded", []string{"open"}},
		{"gateway.gap_reported", []string{"open"}},
		{"gateway.mode_changed", []string{"open"}},
	},
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
	return p.EventType()
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
