package fsm

import (
	"slices"

	"github.com/cbth-dev/cbth/events"
)

// AttemptState is the state of a delivery attempt (spec/fsm.md).
type AttemptState string

// The states of a delivery attempt.
const (
	AttemptPrepared      AttemptState = "prepared"
	AttemptAcceptPending AttemptState = "accept_pending"
	AttemptArmPending    AttemptState = "arm_pending"
	AttemptCooldown      AttemptState = "cooldown"
	AttemptClosed        AttemptState = "closed"
	AttemptSuperseded    AttemptState = "superseded"
	AttemptAbandoned     AttemptState = "abandoned"
)

// attemptLive are the states of a live attempt: one that may still be
// delivered, so a thread has at most one.
var attemptLive = []AttemptState{AttemptPrepared, AttemptAcceptPending, AttemptArmPending, AttemptCooldown}

// Live reports whether an attempt in state s is live.
func (s AttemptState) Live() bool { return slices.Contains(attemptLive, s) }

var attemptTable = table[AttemptState]{
	Kind:   events.KindAttempt,
	States: []AttemptState{AttemptPrepared, AttemptAcceptPending, AttemptArmPending, AttemptCooldown, AttemptClosed, AttemptSuperseded, AttemptAbandoned},
	Moves: []move[AttemptState]{
		{events.TypeAttemptPrepared, []AttemptState{None}, AttemptPrepared},
		{events.TypeAttemptArmPendingNoted, []AttemptState{AttemptPrepared}, AttemptArmPending},
		{events.TypeAttemptArmed, []AttemptState{AttemptArmPending}, AttemptCooldown},
		{events.TypeAttemptAcceptPending, []AttemptState{AttemptPrepared}, AttemptAcceptPending},
		{events.TypeAttemptAccepted, []AttemptState{AttemptAcceptPending}, AttemptCooldown},
		{events.TypeAttemptRejectedBeforeAccept, []AttemptState{AttemptAcceptPending}, AttemptPrepared},
		{events.TypeAttemptClosed, []AttemptState{AttemptCooldown}, AttemptClosed},
		{events.TypeAttemptAbandoned, attemptLive, AttemptAbandoned},
		{events.TypeAttemptSuperseded, attemptLive, AttemptSuperseded},
	},
	Updates: []update[AttemptState]{
		{events.TypeAttemptTurnObserved, []AttemptState{AttemptCooldown}},
		// Relay markers are issued while the bridge still has to arm;
		// a consumption lands in the append of the CAS it stands for.
		{events.TypeAttemptRelayMarkerIssued, []AttemptState{AttemptPrepared, AttemptArmPending}},
		{events.TypeAttemptRelayConsumed, []AttemptState{AttemptArmPending, AttemptCooldown}},
	},
}.Table()
