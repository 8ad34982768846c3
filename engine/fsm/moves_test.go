package fsm_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The machines, written out by hand a second time: every state of each
// aggregate and every (state, event) pair it allows, spelled with the
// event types' and states' own strings rather than read from the tables,
// so a change to a table that is not also made here fails. A line is
// "from event to"; "=" for to is an update that leaves the state as it
// is. Every pair of a listed state (or none) and an event of the kind
// (from the events registry, not the tables) that has no line is refused.
// ctxsession.state_changed carries its target state as data, and so does
// a session.created of mode codex_daemon: their lines name the event with
// "/target".
var handMachines = map[events.Kind]struct {
	states  string
	allowed string
	// refused are moves the seed's rules forbid, named once more so
	// that a line allowing one by mistake is caught as a contradiction.
	refused string
}{
	events.KindJob: {
		states: "running ready failed cancelled",
		allowed: `
			none    job.submitted  running
			running job.completed  ready
			running job.failed     failed
			running job.cancelled  cancelled
			ready   job.cancelled  cancelled
			ready   job.carried    =`,
		refused: `
			ready     job.completed
			failed    job.completed
			cancelled job.completed
			failed    job.cancelled
			ready     job.failed
			running   job.carried`,
	},
	events.KindBatch: {
		states: "queued materialized cooldown closed",
		allowed: `
			none         batch.opened                queued
			queued       batch.materialized          materialized
			cooldown     batch.materialized          materialized
			materialized batch.materialized          =
			materialized batch.delivery_accepted     cooldown
			queued       batch.closed                closed
			materialized batch.closed                closed
			cooldown     batch.closed                closed
			cooldown     batch.handoff_recorded      closed
			cooldown     batch.queued_to_codex       closed
			queued       batch.superseded            closed
			materialized batch.superseded            closed
			cooldown     batch.superseded            closed
			queued       batch.jobs_added            =
			queued       batch.replay_policy_changed =
			materialized batch.replay_policy_changed =
			cooldown     batch.replay_policy_changed =
			queued       batch.eligible_after_set    =
			materialized batch.eligible_after_set    =
			cooldown     batch.eligible_after_set    =
			closed       batch.recovery_pinned       =
			closed       batch.recovery_collected    =
			queued       batch.promoted              =
			queued       batch.park_notified         =
			materialized batch.park_notified         =
			cooldown     batch.park_notified         =
			closed       batch.park_notified         =`,
		refused: `
			closed       batch.materialized
			closed       batch.closed
			materialized batch.jobs_added
			cooldown     batch.jobs_added
			queued       batch.delivery_accepted
			materialized batch.handoff_recorded
			queued       batch.recovery_pinned`,
	},
	events.KindAttempt: {
		states: "prepared accept_pending arm_pending cooldown closed superseded abandoned",
		allowed: `
			none           attempt.prepared               prepared
			prepared       attempt.arm_pending_noted      arm_pending
			arm_pending    attempt.armed                  cooldown
			prepared       attempt.accept_pending         accept_pending
			accept_pending attempt.accepted               cooldown
			accept_pending attempt.rejected_before_accept prepared
			cooldown       attempt.closed                 closed
			prepared       attempt.abandoned              abandoned
			accept_pending attempt.abandoned              abandoned
			arm_pending    attempt.abandoned              abandoned
			cooldown       attempt.abandoned              abandoned
			prepared       attempt.superseded             superseded
			accept_pending attempt.superseded             superseded
			arm_pending    attempt.superseded             superseded
			cooldown       attempt.superseded             superseded
			cooldown       attempt.turn_observed          =
			prepared       attempt.relay_marker_issued    =
			arm_pending    attempt.relay_marker_issued    =
			arm_pending    attempt.relay_consumed         =
			cooldown       attempt.relay_consumed         =`,
		refused: `
			closed         attempt.abandoned
			superseded     attempt.abandoned
			abandoned      attempt.superseded
			prepared       attempt.closed
			arm_pending    attempt.accepted
			accept_pending attempt.armed
			cooldown       attempt.rejected_before_accept`,
	},
	events.KindArtifact: {
		states: "stored collected",
		allowed: `
			none   artifact.ingested               stored
			stored artifact.collected              collected
			stored artifact.referenced             =
			stored artifact.released               =
			stored artifact.pinned                 =
			stored artifact.recovery_lease_issued  =
			stored artifact.recovery_lease_revoked =`,
		refused: `
			collected artifact.referenced
			collected artifact.recovery_lease_issued
			collected artifact.collected`,
	},
	events.KindBinding: {
		states: "unbound bound degraded",
		allowed: `
			none     binding.bound               bound
			unbound  binding.bound               bound
			degraded binding.bound               bound
			bound    binding.bound               =
			bound    binding.degraded            degraded
			bound    binding.unbound             unbound
			degraded binding.unbound             unbound
			bound    binding.armed               =
			bound    binding.quiesced            =
			degraded binding.quiesced            =
			bound    binding.relay_marker_issued =
			degraded binding.relay_marker_issued =
			bound    binding.relay_consumed      =
			degraded binding.relay_consumed      =`,
		refused: `
			unbound  binding.armed
			degraded binding.armed
			unbound  binding.degraded
			none     binding.unbound`,
	},
	events.KindInstallation: {
		states: "configured",
		allowed: `
			none       installation.repaired                   configured
			configured installation.repaired                   =
			configured installation.bridge_selected            =
			configured installation.relay_scanner_bound        =
			configured installation.relay_scanner_advanced     =
			configured installation.relay_scanner_degraded     =
			configured installation.mcp_validation_requested   =
			configured installation.mcp_writeback_validated    =
			configured installation.queue_validation_started   =
			configured installation.queue_writeback_validated  =
			configured installation.queue_validation_failed    =
			configured installation.snapshot_revisions_reserved =`,
		refused: `
			none installation.bridge_selected
			none installation.queue_validation_started
			none installation.snapshot_revisions_reserved`,
	},
	events.KindSession: {
		states: "live detached parked stale retired",
		allowed: `
			none     session.created             live
			none     session.created/detached    detached
			live     session.detached            detached
			detached session.attached            live
			stale    session.attached            live
			live     session.parked              parked
			detached session.parked              parked
			stale    session.parked              parked
			parked   session.unparked            detached
			live     session.stale               stale
			detached session.stale               stale
			live     session.retired             retired
			detached session.retired             retired
			parked   session.retired             retired
			stale    session.retired             retired
			stale    session.epoch_advanced      live
			live     session.epoch_advanced      =
			detached session.epoch_advanced      =
			parked   session.epoch_advanced      =
			live     session.permission_observed =
			detached session.permission_observed =
			live     session.permission_drifted  =
			detached session.permission_drifted  =`,
		refused: `
			retired session.attached
			retired session.epoch_advanced
			parked  session.attached
			parked  session.stale
			live    session.attached
			stale   session.permission_observed`,
	},
	events.KindCtxSession: {
		states: "active idle done error",
		allowed: `
			none   ctxsession.opened               active
			active ctxsession.state_changed/idle   idle
			active ctxsession.state_changed/done   done
			idle   ctxsession.state_changed/done   done
			active ctxsession.state_changed/error  error
			idle   ctxsession.state_changed/error  error
			idle   ctxsession.state_changed/active active
			done   ctxsession.state_changed/active active
			error  ctxsession.state_changed/active active
			active ctxsession.message              =
			idle   ctxsession.message              =
			active ctxsession.event                =
			idle   ctxsession.event                =
			done   ctxsession.event                =
			error  ctxsession.event                =`,
		refused: `
			done   ctxsession.message
			error  ctxsession.state_changed/done
			active ctxsession.state_changed/active
			idle   ctxsession.state_changed/idle`,
	},
	events.KindCursor: {
		states: "active",
		allowed: `
			none   cursor.advanced active
			active cursor.advanced =`,
	},
	events.KindCtxTree: {
		states: "active",
		allowed: `
			none   ctxtree.initialized    active
			active ctxtree.initialized    =
			active ctxtree.object_put     =
			active ctxtree.object_removed =
			active ctxtree.alias_put      =
			active ctxtree.alias_removed  =`,
		refused: `
			none ctxtree.object_put`,
	},
	events.KindAppServer: {
		states: "running exited",
		allowed: `
			none    appserver.started running
			running appserver.exited  exited`,
		refused: `
			exited  appserver.started
			exited  appserver.exited
			running appserver.started`,
	},
	events.KindTask: {
		states: "queued running stopping exited lost",
		allowed: `
			none     task.submitted queued
			queued   task.started   running
			running  task.stopping  stopping
			queued   task.exited    exited
			running  task.exited    exited
			stopping task.exited    exited
			queued   task.lost      lost
			running  task.lost      lost
			stopping task.lost      lost
			running  task.matched   =
			stopping task.matched   =
			running  task.woke      =
			stopping task.woke      =`,
		refused: `
			exited task.lost
			lost   task.exited
			queued task.stopping
			exited task.started
			queued task.matched
			exited task.woke
			lost   task.woke`,
	},
	events.KindGatewayRoute: {
		states: "active removed",
		allowed: `
			none    gateway.route_added   active
			removed gateway.route_added   active
			active  gateway.route_added   =
			active  gateway.route_removed removed`,
		refused: `
			removed gateway.route_removed
			none    gateway.route_removed`,
	},
	events.KindGatewayStream: {
		states: "open",
		allowed: `
			none gateway.envelope_recorded open
			open gateway.envelope_recorded =
			open gateway.gap_reported      =
			open gateway.mode_changed      =`,
		refused: `
			none gateway.gap_reported`,
	},
	events.KindMCP: {
		states: "active",
		allowed: `
			none   mcp.tool_called active
			active mcp.tool_called =`,
	},
	events.KindThread: {
		states: "trusted untrusted",
		allowed: `
			none      thread.trusted   trusted
			untrusted thread.trusted   trusted
			trusted   thread.trusted   =
			trusted   thread.untrusted untrusted`,
		refused: `
			none      thread.untrusted
			untrusted thread.untrusted`,
	},
}

type pair struct{ from, event string }

// parseMoves reads "from event to" lines; "=" for to is from.
func parseMoves(t *testing.T, k events.Kind, text string) map[pair]string {
	t.Helper()
	out := map[pair]string{}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		switch len(f) {
		case 0:
			continue
		case 3:
		default:
			t.Fatalf("%s: line %q is not \"from event to\"", k, line)
		}
		to := f[2]
		if to == "=" {
			to = f[0]
		}
		p := pair{f[0], f[1]}
		if _, dup := out[p]; dup {
			t.Fatalf("%s: %s %s is listed twice", k, f[0], f[1])
		}
		out[p] = to
	}
	return out
}

// Each machine allows exactly its hand-written moves, and refuses with
// ESTATE, staying where it was, every other pair.
func TestMachinesMatchTheHandWrittenMoves(t *testing.T) {
	ms := fsm.New()
	for _, tab := range fsm.Tables() {
		hand, ok := handMachines[tab.Kind]
		if !ok {
			t.Errorf("%s: a machine with no hand-written moves: write them in handMachines", tab.Kind)
			continue
		}
		states := strings.Fields(hand.states)
		if got := slices.Sorted(slices.Values(tab.States)); !slices.Equal(got, slices.Sorted(slices.Values(states))) {
			t.Errorf("%s: the machine's states are %v, the hand-written ones %v", tab.Kind, tab.States, states)
		}
		allowed := parseMoves(t, tab.Kind, hand.allowed)
		var evs []string
		for _, typ := range events.TypesOf(tab.Kind) {
			switch typ {
			case events.TypeCtxSessionStateChanged:
				for _, s := range states {
					evs = append(evs, typ+"/"+s)
				}
			case events.TypeSessionCreated:
				// A session bound through the Codex daemon starts
				// detached: its mode is data (fsm.EventName).
				evs = append(evs, typ, typ+"/detached")
			default:
				evs = append(evs, typ)
			}
		}
		for p, to := range allowed {
			if p.from != fsm.None && !slices.Contains(states, p.from) || !slices.Contains(states, to) || !slices.Contains(evs, p.event) {
				t.Errorf("%s: the hand-written line %s %s %s names a state or event the kind does not have", tab.Kind, p.from, p.event, to)
			}
		}
		for _, from := range append([]string{fsm.None}, states...) {
			for _, ev := range evs {
				got, err := ms.Step(tab.Kind, from, ev)
				want, ok := allowed[pair{from, ev}]
				switch {
				case ok && (err != nil || got != want):
					t.Errorf("%s: %s from %s = (%s, %v), the hand-written list says %s", tab.Kind, ev, from, got, err, want)
				case !ok && !errors.Is(err, errs.Sentinel(errs.ESTATE)):
					t.Errorf("%s: %s from %s = (%s, %v), the hand-written list refuses it", tab.Kind, ev, from, got, err)
				case !ok && got != from:
					t.Errorf("%s: the refused %s from %s moved to %s", tab.Kind, ev, from, got)
				}
			}
		}
	}
	for k := range handMachines {
		if !slices.ContainsFunc(fsm.Tables(), func(tab fsm.Table) bool { return tab.Kind == k }) {
			t.Errorf("%s: hand-written moves for a kind with no machine", k)
		}
	}
}

// The refused moves the seed's rules name are refused, and the allowed
// list does not contradict them.
func TestMachinesRefuseTheForbiddenMoves(t *testing.T) {
	ms := fsm.New()
	for k, hand := range handMachines {
		allowed := parseMoves(t, k, hand.allowed)
		for _, line := range strings.Split(hand.refused, "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			if len(f) != 2 {
				t.Fatalf("%s: refused line %q is not \"from event\"", k, line)
			}
			if f[0] != fsm.None && !slices.Contains(strings.Fields(hand.states), f[0]) {
				t.Errorf("%s: refused line %q names no state of the kind", k, line)
			}
			if to, ok := allowed[pair{f[0], f[1]}]; ok {
				t.Errorf("%s: %s from %s is both refused and allowed (to %s)", k, f[1], f[0], to)
			}
			if got, err := ms.Step(k, f[0], f[1]); !errors.Is(err, errs.Sentinel(errs.ESTATE)) || got != f[0] {
				t.Errorf("%s: the forbidden %s from %s = (%s, %v), want ESTATE", k, f[1], f[0], got, err)
			}
		}
	}
}
