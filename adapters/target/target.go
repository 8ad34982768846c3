// Package target holds the delivery targets: the edge that puts a batch
// into a caller's thread. The delivery core (engine/command) decides when
// and what; the daemon's scheduler asks a target whether it can take a
// thread's head now and, for push targets, calls it; the target carries
// one attempt out and says how it went. spec/delivery.md describes the
// contract for target authors.
package target

import (
	"context"
	"log/slog"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
)

// Kind says how a target takes deliveries.
type Kind string

const (
	// Push targets are called: the scheduler writes the accept_pending
	// barrier, calls Deliver and records its answer (the debug target,
	// the Codex CLI over its app-server).
	Push Kind = "push"
	// Pull targets are never called: the scheduler only prepares the
	// head's attempt (state prepared, no barrier), and the target's own
	// helper commands move it on (the Desktop bridge).
	Pull Kind = "pull"
)

// Spec declares a target.
type Spec struct {
	// Name is the target_kind jobs name it by.
	Name string
	Kind Kind
	// RPCKind and DeliveryMode are what its deliveries record unless its
	// gate routes one otherwise (command.RPCKinds, command.DeliveryModes;
	// a pull target has no rpc kind).
	RPCKind      string
	DeliveryMode string
	// AcceptTimeout bounds a push target's Deliver (0: the delivery
	// section's delivery_timeout); ObservationWindow is how long an
	// accepted turn it tracks is observed (0: the delivery section's
	// observation_window). The Codex CLI needs both longer than the
	// defaults (its [cli] section).
	AcceptTimeout     time.Duration
	ObservationWindow time.Duration
}

// Target is the target_kind Name spells. Name stays a string while the
// Codex targets that fill it in (adapters/codex) are being rewritten;
// readers take the typed value from here.
func (s Spec) Target() command.Target { return command.Target(s.Name) }

// Head is what a gate is asked about: a thread's head batch that the
// core's own rules (FIFO, merge window, send interval, back-off, budget,
// one delivery in flight per thread) already let through.
type Head struct {
	ThreadID             string
	BatchID              string
	Generation           uint64
	Policy               events.DeliveryPolicy
	RequiresArtifactRead bool
}

// Gate is a target's own eligibility answer for one head: whether the
// thread can take a delivery now (caller idle, session live, permissions
// strict enough for the batch's policy, binding bound), and if so how the
// delivery goes. When not, Reason says why (it shows as the batch's
// delivery_gate) and Retry, if known, when to ask again; the scheduler
// also asks again on every change of the log.
type Gate struct {
	OK     bool
	Reason string
	Retry  time.Time
	// Park, with OK false, says the target can never take this head
	// automatically (a Desktop batch that needs an artifact read or is not
	// low-risk): the scheduler moves it to manual resolution, with Reason.
	Park bool
	// Route: the rpc kind and delivery mode (empty: the Spec's), and the
	// managed session and epoch whose stream will report the turn. Its
	// Reading, from a Preparer, is recorded whether or not the head goes:
	// with the barrier when it does, on its own when it does not.
	Route command.Route
	// Send, in a Preparer's answer that lets the head through, carries
	// the delivery out with what Prepare acquired, once its barrier is
	// durable: Pusher.Deliver's contract.
	Send func(ctx context.Context, d command.Delivery) Result
}

// Target is a delivery target.
type Target interface {
	Spec() Spec
	// Gate must answer quickly and must not change anything; the
	// scheduler calls it outside the log's writer, before the barrier.
	Gate(ctx context.Context, h Head) Gate
}

// Pusher is a push target.
type Pusher interface {
	Target
	// Deliver carries one attempt out; its accept_pending barrier is
	// already durable. It must return by ctx's deadline
	// (delivery_timeout), and must answer command.AcceptanceUnknown
	// rather than guess whenever the channel may have acted on the
	// delivery without proof either way. Deliveries to different
	// threads run concurrently; never two to one thread.
	Deliver(ctx context.Context, d command.Delivery) Result
}

// Preparer is a push target with acquisition work to do once its gate
// let a head through and before the barrier is written: reading the
// caller's current state afresh (for the Codex CLI, a thread/resume and
// its permission reading). Prepare may talk to the channel but must have
// no side effect on the caller's thread, and writes nothing to the log:
// what it read goes forward in its answer (the route's Reading, recorded
// by the scheduler), and so does the send (Gate.Send), which runs next
// on the same worker if the core still lets the head through. Its answer
// replaces the gate's (Park and Retry as in Gate).
type Preparer interface {
	Target
	Prepare(ctx context.Context, h Head, g Gate) Gate
}

// Acknowledger is a push target told when the outcome Deliver returned
// is durable (and the turn events of Result.Turn with it): turn events
// it reports to the Sink after that are then sure to follow the
// acceptance in the log.
type Acknowledger interface {
	Recorded(d command.Delivery, outcome engine.Outcome)
}

// Result is a push target's account of one attempt.
type Result struct {
	// Outcome is command.Accepted, command.RejectedBefore (proven: the
	// channel did not take it, so it may be retried) or
	// command.AcceptanceUnknown.
	Outcome engine.Outcome
	Reason  string
	// TurnID identifies the accepted turn, when the channel has turns.
	TurnID string
	// Tracks says turn events will be reported for the accepted turn, so
	// the attempt is observed until delivery_observation_deadline and the
	// daemon stays up meanwhile.
	Tracks bool
	// Turn lists turn events already seen by the time Deliver returned,
	// in order (command.TurnEvents). Later ones go to the Sink.
	Turn []string
	// Handoff, with Accepted, names the item of Codex's own queue in
	// CodexHome that the result became: the batch closes
	// handoff_recorded, nothing more to observe.
	Handoff   string
	CodexHome string
}

// TurnEvent is an event of an accepted turn that a target reports after
// Deliver returned. It counts only if ManagedSessionID and SessionEpoch
// are those the attempt's barrier recorded (the delivery's route).
type TurnEvent struct {
	AttemptID        string
	TurnID           string
	Event            string // one of command.TurnEvents
	ManagedSessionID string
	SessionEpoch     uint64
}

// Sink takes turn events. Observe returns once the event is durable (or
// refused) with the core's outcome: command.Observed, command.CloseDelivered,
// command.Parked, command.LateIgnored or command.SessionMismatch.
type Sink interface {
	Observe(ctx context.Context, ev TurnEvent) (outcome engine.Outcome, err error)
}

// Host is what the daemon hands a target that starts.
type Host struct {
	Sink Sink
	Log  *slog.Logger
	// Wake asks the scheduler for a pass soon: something its gate held a
	// head back for has changed outside the log (a thread became idle).
	Wake func()
}

// Starter is a target with a lifetime: a long-lived connection, a
// supervised process. Start runs once before the daemon serves; ctx ends
// when the daemon stops.
type Starter interface {
	Start(ctx context.Context, h Host) error
}

// InFlight is an attempt the daemon found in flight when it started: its
// barrier was durable but its outcome or its turn's end was not.
type InFlight struct {
	AttemptID        string
	ThreadID         string
	BatchID          string
	State            fsm.AttemptState // accept_pending, or cooldown while tracking a turn
	RPCRequestID     string
	RPCKind          string
	Marker           string
	TurnID           string
	ManagedSessionID string
	SessionEpoch     uint64
}

// Proof is what a target could prove about one in-flight attempt at
// start-up. For an accept_pending attempt, Outcome says how its call went
// (command.Accepted or command.RejectedBefore) on the stream the barrier
// named; for a tracked turn, Continues says that stream is provably still
// the same (same session, same epoch), so observing goes on. Whatever is
// not proven is parked for manual resolution.
type Proof struct {
	AttemptID        string
	RPCRequestID     string
	ManagedSessionID string
	SessionEpoch     uint64
	Outcome          engine.Outcome
	Reason           string
	TurnID           string
	Tracks           bool
	Continues        bool
	// Turn lists turn events of the attempt's turn the target found
	// already happened (command.TurnEvents), in order: the daemon records
	// them after the outcome, as it does Result.Turn, so a turn that
	// ended while no daemon watched is closed or parked by its real end.
	Turn []string
}

// Reconciler is a target that can look for proofs after a restart.
type Reconciler interface {
	Reconcile(ctx context.Context, open []InFlight) []Proof
}

// KeepAliver is a target with its own reasons to keep the daemon up (an
// attached foreground client, a live app-server session). The daemon's
// own reasons (tracked turns, deliveries in flight, work due) need no
// target help.
type KeepAliver interface {
	KeepAlive(now time.Time) []string
}
