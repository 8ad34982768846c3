package command

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// DeliveryConfig holds the knobs of the delivery core. Commands take it as
// input, so the same log, config and now always decide the same.
type DeliveryConfig struct {
	MaxJobsPerBatch     int
	MaxTotalBytes       int64
	MaxWaitWindow       time.Duration
	MinSendInterval     time.Duration
	Cooldown            time.Duration
	RedeliveryWindow    time.Duration
	MaxDeliveryAttempts int
	// EligibleBackoff, EligibleBackoffMax and EligibleBackoffJitter are
	// the back-off after a proven reject (see Backoff).
	EligibleBackoff       time.Duration
	EligibleBackoffMax    time.Duration
	EligibleBackoffJitter float64
	InlinePayloadLimit    int64
	ObservationWindow     time.Duration
	MinArtifactTTL        time.Duration
	PostCloseTTL          time.Duration
}

// Backoff returns the back-off after a proven reject.
func (c DeliveryConfig) Backoff() Backoff {
	return Backoff{Base: c.EligibleBackoff, Max: c.EligibleBackoffMax, Jitter: c.EligibleBackoffJitter}
}

// Canonical close reasons.
const (
	CloseDelivered           = "delivered"
	CloseSuperseded          = "superseded"
	CloseOperatorConfirmed   = "operator_confirmed_delivery"
	CloseOperatorUnconfirmed = "operator_closed_unconfirmed"
	CloseCancelled           = "cancelled"
	CloseWindowExhausted     = "redelivery_window_exhausted"
	CloseManualExpired       = "manual_resolution_expired"
	CloseMaxAttempts         = "max_attempts_exhausted"
	CloseHandoffRecorded     = "handoff_recorded"
)

// UndeliveredReasons are the closes by which cbth itself gives a batch up
// with its result never confirmed delivered. Each is as loud as a park:
// the batch.closed event says undelivered, the batch counts in daemon
// status, the park hook runs for it and the daemon log and `cbth wait`
// warn. An operator's close is the operator's own decision and says
// nothing more.
var UndeliveredReasons = []string{CloseWindowExhausted, CloseMaxAttempts, CloseManualExpired}

// Undelivered reports whether reason is one of UndeliveredReasons.
func Undelivered(reason string) bool { return slices.Contains(UndeliveredReasons, reason) }

// ---- reading the thread FIFO ----

// OpenBatches returns a thread's open batches in FIFO order.
func OpenBatches(v engine.Reader, thread string) ([]*aggregate.Batch, error) {
	var out []*aggregate.Batch
	for _, r := range v.Scan(index.ThreadOpen, index.ThreadPrefix(thread)) {
		if _, ok := index.ThreadOpenSeq(r.Key, thread); !ok {
			continue
		}
		b, err := engine.Batch(v, r.ID)
		if err != nil {
			return nil, err
		}
		if b != nil && b.Open() {
			out = append(out, b)
		}
	}
	return out, nil
}

// LiveAttempt returns the thread's non-terminal attempt, nil if none.
func LiveAttempt(v engine.Reader, thread string) (*aggregate.Attempt, error) {
	return Unique(v, engine.Attempt, index.ThreadLive, thread, "live attempts")
}

// Unique returns the one aggregate an index holds under key, read with
// its typed getter (nil when none); more than one is corruption: the
// index exists to make it one.
func Unique[T any](v engine.Reader, get func(engine.Reader, string) (*T, error), idx, key, what string) (*T, error) {
	refs := v.Lookup(idx, key)
	if len(refs) > 1 {
		return nil, errs.New(errs.ECORRUPT, "%s has %d %s", key, len(refs), what)
	}
	if len(refs) == 0 {
		return nil, nil
	}
	return get(v, refs[0].ID)
}

// batchOf returns the batch of attempt a: it always has one, so none is
// ECORRUPT.
func batchOf(v engine.Reader, a *aggregate.Attempt) (*aggregate.Batch, error) {
	b, err := engine.Batch(v, a.BatchID)
	if err == nil && b == nil {
		err = errs.New(errs.ECORRUPT, "attempt %s: its batch %s is missing", a.ID, a.BatchID)
	}
	return b, err
}

// lastSend returns when the thread last had a delivery accepted.
func lastSend(v engine.Reader, thread string) time.Time {
	var last time.Time
	for _, r := range v.Scan(index.ThreadSends, index.ThreadPrefix(thread)) {
		if t, ok := index.SendTime(r.Key, thread); ok && t.After(last) {
			last = t
		}
	}
	return last
}

func (c DeliveryConfig) notBefore(v engine.Reader, thread string) time.Time {
	if last := lastSend(v, thread); !last.IsZero() {
		return last.Add(c.MinSendInterval)
	}
	return time.Time{}
}

// ---- placing a ready job into its thread's FIFO ----

// place returns the events that put a just-completed job into a batch: the
// thread's tail batch when it is still merging and within the limits,
// otherwise a new batch at the tail.
func (c DeliveryConfig) place(v engine.View, now time.Time, j *aggregate.Job, summary string, art *Ingested) (string, []engine.Emit, error) {
	size := int64(len(j.TaskSummary) + len(summary))
	needsRead := false
	var arts []string
	if art != nil {
		arts = []string{art.ArtifactID}
		if art.SizeBytes <= c.InlinePayloadLimit {
			size += art.SizeBytes
		} else {
			needsRead = true
		}
	}
	line := j.TaskKind + ": " + summary
	open, err := OpenBatches(v, j.SourceThreadID)
	if err != nil {
		return "", nil, err
	}
	if n := len(open); n > 0 {
		tail := open[n-1]
		if tail.State == fsm.BatchQueued && tail.HeadAttemptID == "" && tail.TargetKind == j.TargetKind && sameTarget(tail.DeliveryTarget, j.DeliveryTarget) &&
			len(tail.JobIDs) < c.MaxJobsPerBatch && tail.InlinePayloadBytes+size <= c.MaxTotalBytes &&
			now.Before(tail.MergeUntil) && tail.ReplayPolicy == aggregate.ReplayAutomatic {
			add := &events.BatchJobsAdded{
				JobIDs: []string{j.ID}, ArtifactIDs: arts, Summary: tail.Summary + "\n" + line, LastReadyAt: now,
				Policy: tail.Policy.Stricter(j.DeliveryPolicy), InlinePayloadBytes: tail.InlinePayloadBytes + size,
				RequiresArtifactRead: tail.RequiresArtifactRead || needsRead,
			}
			return tail.ID, []engine.Emit{{Stream: BatchStream(tail.ID), Payload: add}}, nil
		}
	}
	id := v.NewID()
	op := &events.BatchOpened{
		SourceThreadID: j.SourceThreadID, TargetKind: j.TargetKind, JobIDs: []string{j.ID}, ArtifactIDs: arts,
		Summary: line, FirstReadyAt: now, LastReadyAt: now, Policy: j.DeliveryPolicy, InlinePayloadBytes: size,
		RequiresArtifactRead: needsRead, MaxDeliveryAttempts: c.MaxDeliveryAttempts,
		RedeliveryWindowEndsAt: now.Add(c.RedeliveryWindow), MergeUntil: now.Add(c.MaxWaitWindow),
		Head: len(open) == 0, DeliveryTarget: j.DeliveryTarget,
	}
	if op.Head {
		op.NextDeliveryNotBefore = c.notBefore(v, j.SourceThreadID)
	}
	return id, []engine.Emit{{Stream: BatchStream(id), Payload: op}}, nil
}

// sameTarget says whether two jobs may share a batch as far as their
// resolved delivery targets go: a batch goes through one target.
func sameTarget(a, b *events.DeliveryTarget) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// BatchStream, AttemptStream and CursorStream name the streams of the
// delivery core's aggregates; a product's decider appends to them too
// (a Desktop arm steps the cursor, a lost session abandons an attempt).
func BatchStream(id string) events.StreamID { return events.StreamID{Kind: events.KindBatch, ID: id} }

// AttemptStream: see BatchStream.
func AttemptStream(id string) events.StreamID {
	return events.StreamID{Kind: events.KindAttempt, ID: id}
}

// CursorStream is the stream of the fair-ready cursor of scope (a target,
// or a Desktop bridge: CursorScope): see BatchStream.
func CursorStream(scope string) events.StreamID {
	return events.StreamID{Kind: events.KindCursor, ID: scope}
}

// ---- closing ----

// closeBatch returns the events that close batch b for reason: the batch
// itself, its live attempt, the artifacts it held, the promotion of the
// next batch of the thread when b was the head, and the cursor step.
func (c DeliveryConfig) closeBatch(v engine.View, now time.Time, b *aggregate.Batch, reason, detail string) ([]engine.Emit, error) {
	return c.CloseWith(v, now, b, engine.Emit{Stream: BatchStream(b.ID), Payload: &events.BatchClosed{CloseReason: reason, Detail: detail, Undelivered: Undelivered(reason)}}, reason)
}

// CloseWith is closeBatch with the event that closes the batch given:
// batch.closed, or batch.handoff_recorded for a Desktop handoff (the
// Desktop product's NoteBoundaryCrossed).
func (c DeliveryConfig) CloseWith(v engine.View, now time.Time, b *aggregate.Batch, first engine.Emit, reason string) ([]engine.Emit, error) {
	emits := []engine.Emit{first}
	if a, err := LiveAttempt(v, b.SourceThreadID); err != nil {
		return nil, err
	} else if a != nil && a.BatchID == b.ID {
		if a.State == fsm.AttemptCooldown {
			emits = append(emits, engine.Emit{Stream: AttemptStream(a.ID), Payload: &events.AttemptClosed{Reason: reason}})
		} else {
			emits = append(emits, engine.Emit{Stream: AttemptStream(a.ID), Payload: &events.AttemptAbandoned{Reason: "batch closed: " + reason}})
		}
	}
	tail, err := c.closeTail(v, now, b, reason)
	if err != nil {
		return nil, err
	}
	return append(emits, tail...), nil
}

// closeTail is what closing b brings with it besides its own event and
// its attempt's: its artifacts released, the next batch of its thread
// promoted, its target's cursor moved on.
func (c DeliveryConfig) closeTail(v engine.View, now time.Time, b *aggregate.Batch, reason string) ([]engine.Emit, error) {
	emits, err := c.release(v, now, b)
	if err != nil {
		return nil, err
	}
	if b.IsHead {
		open, err := OpenBatches(v, b.SourceThreadID)
		if err != nil {
			return nil, err
		}
		for _, next := range open {
			if next.ID != b.ID {
				emits = append(emits, engine.Emit{Stream: BatchStream(next.ID), Payload: &events.BatchPromoted{NextDeliveryNotBefore: c.notBefore(v, b.SourceThreadID)}})
				break
			}
		}
		scope, err := CursorScope(v, b)
		if err != nil {
			return nil, err
		}
		emits = append(emits, engine.Emit{Stream: CursorStream(scope), Payload: &events.CursorAdvanced{ReadyAt: b.FirstReadyAt, ThreadID: b.SourceThreadID, Reason: "closed: " + reason}})
	}
	return emits, nil
}

// release marks b's artifacts as no longer held by it. An artifact becomes
// eligible for GC at the latest of its minimum retention, the close plus
// the post-close TTL, and any operator pin; never while another open batch
// still holds it.
func (c DeliveryConfig) release(v engine.View, now time.Time, b *aggregate.Batch) ([]engine.Emit, error) {
	var out []engine.Emit
	for _, id := range b.ArtifactIDs {
		a, err := engine.Artifact(v, id)
		if err != nil {
			return nil, err
		}
		if a == nil || a.State != fsm.ArtifactStored {
			continue
		}
		eligible := Latest(a.MinRetentionUntil, now.Add(c.PostCloseTTL), a.OperatorPinUntil)
		out = append(out, engine.Emit{Stream: events.StreamID{Kind: events.KindArtifact, ID: id},
			Payload: &events.ArtifactReleased{BatchID: b.ID, LastBatchClosedAt: now, GCEligibleAt: eligible}})
	}
	return out, nil
}

// Latest is the latest of ts (zero when none is set): an artifact's GC
// eligibility is the latest of its retentions.
func Latest(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}

// Park is the event that moves b to manual resolution: no automatic
// replay from now on.
func Park(b *aggregate.Batch, reason, attemptID string) engine.Emit {
	return engine.Emit{Stream: BatchStream(b.ID), Payload: &events.BatchReplayPolicyChanged{ReplayPolicy: aggregate.ReplayManual, Reason: reason, AttemptID: attemptID}}
}

// ---- eligibility ----

// Eligibility explains whether a thread's head may get a fresh delivery.
type Eligibility struct {
	Batch   *aggregate.Batch
	Attempt *aggregate.Attempt // live attempt to reuse or supersede
	OK      bool
	Reason  string
	Wake    time.Time // when it may become eligible, if known
}

// Eligible decides whether thread's head batch may get a fresh delivery
// now. It reads only.
func (c DeliveryConfig) Eligible(v engine.Reader, now time.Time, thread string) (Eligibility, error) {
	open, err := OpenBatches(v, thread)
	if err != nil {
		return Eligibility{}, err
	}
	if len(open) == 0 {
		return Eligibility{Reason: "no open batch"}, nil
	}
	b := open[0]
	el := Eligibility{Batch: b}
	no := func(reason string, wake time.Time) (Eligibility, error) {
		el.Reason, el.Wake = reason, wake
		return el, nil
	}
	if reason, wake := c.BatchHold(b, now); reason != "" {
		return no(reason, wake)
	}
	a, err := LiveAttempt(v, thread)
	if err != nil {
		return Eligibility{}, err
	}
	el.Attempt = a
	if a != nil {
		switch a.State {
		case fsm.AttemptAcceptPending, fsm.AttemptArmPending:
			return no("a delivery is in flight", time.Time{})
		case fsm.AttemptCooldown:
			if now.Before(a.CooldownUntil) {
				return no("cooling down", a.CooldownUntil)
			}
			if a.ObservationState == "tracking" {
				return no("observing the accepted turn", a.ObservationDeadline)
			}
		}
	}
	el.OK = true
	return el, nil
}

// BatchHold is the part of Eligible that looks at the head batch alone:
// why it may not get a fresh delivery now ("" if nothing holds it) and
// when that may change, if known.
func (c DeliveryConfig) BatchHold(b *aggregate.Batch, now time.Time) (reason string, wake time.Time) {
	switch {
	case !b.IsHead:
		return "head not promoted", time.Time{}
	case !b.RedeliveryWindowEndsAt.IsZero() && !now.Before(b.RedeliveryWindowEndsAt):
		// The sweep closes it; until it has, nothing delivers it.
		return "redelivery window ended", time.Time{}
	case b.ReplayPolicy != aggregate.ReplayAutomatic:
		return "manual resolution only", time.Time{}
	case b.State == fsm.BatchQueued && now.Before(b.MergeUntil) && len(b.JobIDs) < c.MaxJobsPerBatch && b.InlinePayloadBytes < c.MaxTotalBytes:
		return "merge window open", b.MergeUntil
	case now.Before(b.NextDeliveryNotBefore):
		return "minimum send interval", b.NextDeliveryNotBefore
	case now.Before(b.EligibleAfter):
		return "backing off after a reject", b.EligibleAfter
	case b.DeliveryAttemptCount >= b.MaxDeliveryAttempts && b.MaxDeliveryAttempts > 0:
		return "attempt budget spent", time.Time{}
	}
	return "", time.Time{}
}

// ---- delivery commands ----

// RPC kinds and delivery modes: how an attempt reached its thread
// (delivery_rpc_kind on the attempt, delivery_mode on the batch).
const (
	RPCTurnStart = "turn_start"
	RPCTurnSteer = "turn_steer"
	// RPCQueueAdd: the result is added to Codex's own queue for the
	// thread (`codex queue`), a hand-off.
	RPCQueueAdd  = "queue_add"
	DebugDeliver = "debug_deliver" // the debug target's kind and mode
	CtxTurn      = "ctx_turn"      // the ctx target's: a turn in an agent session
	ModeDesktop  = "desktop_heartbeat"
	ModeCLIStart = "cli_turn_start"
	ModeCLISteer = "cli_turn_steer"
	ModeCLIQueue = "cli_queue_handoff"
	// ModeDesktopQueue: a Desktop head handed to Codex's own queue for
	// the thread (the Desktop queue writeback transport).
	ModeDesktopQueue = "desktop_queue_handoff"
	// ModePluginStart is a host-plugin delivery: turn/start on a
	// daemon-owned app-server acquired for the batch's resolved target.
	ModePluginStart = "codex_app_server_turn_start"
)

// RPCKinds and DeliveryModes list the enums.
var (
	RPCKinds      = []string{RPCTurnStart, RPCTurnSteer, RPCQueueAdd, DebugDeliver, CtxTurn}
	DeliveryModes = []string{ModeDesktop, ModeDesktopQueue, ModeCLIStart, ModeCLISteer, ModeCLIQueue, DebugDeliver, CtxTurn, ModePluginStart}
)

// Route says how a push delivery goes, as its target decided when it let
// the delivery through: the rpc kind and delivery mode, and the managed
// session and epoch whose event stream will report the turn (empty and 0
// for targets without sessions). The barrier records all of it.
type Route struct {
	RPCKind          string
	DeliveryMode     string
	ManagedSessionID string
	SessionEpoch     uint64
	// Gate, when set, is what the target let this route through on and
	// wants checked again on the state the barrier is decided on (the
	// Codex CLI's fresh permission reading before every turn/start).
	Gate BarrierGate
}

// BarrierGate is a target's own last check of a delivery, made inside
// the barrier's decision so that nothing can change between the check
// and the barrier: its events go into the same append, and a refusal
// makes the start not_eligible. The core does not know what a target
// checks; the target hands its gate in with the Route (a product's
// package implements it: engine/command/codex's GatedReading).
type BarrierGate interface {
	// Barrier returns the events to append with the barrier, or why the
	// delivery may not start (refused non-empty; nothing is appended).
	Barrier(v engine.Reader) (emits []engine.Emit, refused string, err error)
	// Record is the command that records what the gate read on its own,
	// for a head that does not go (no barrier to record it with).
	Record() engine.Decider
}

func (r Route) validate() error {
	if !slices.Contains(RPCKinds, r.RPCKind) {
		return errs.New(errs.EINVAL, "delivery_rpc_kind %q is not one of %s", r.RPCKind, strings.Join(RPCKinds, ", "))
	}
	if !slices.Contains(DeliveryModes, r.DeliveryMode) {
		return errs.New(errs.EINVAL, "delivery_mode %q is not one of %s", r.DeliveryMode, strings.Join(DeliveryModes, ", "))
	}
	return nil
}

// Delivery is what a target needs to carry one attempt out.
type Delivery struct {
	// NotEligible says why nothing was started (outcome not_eligible).
	NotEligible string `json:"-"`

	ThreadID         string                `json:"source_thread_id"`
	TargetKind       Target                `json:"target_kind"`
	BatchID          string                `json:"batch_id"`
	AttemptID        string                `json:"attempt_id"`
	Generation       uint64                `json:"generation"`
	SnapshotRevision uint64                `json:"snapshot_revision"`
	RPCRequestID     string                `json:"delivery_rpc_request_id"`
	RPCKind          string                `json:"delivery_rpc_kind"`
	DeliveryMode     string                `json:"delivery_mode"`
	Marker           string                `json:"delivery_rpc_correlation_marker"`
	ManagedSessionID string                `json:"managed_session_id,omitempty"`
	SessionEpoch     uint64                `json:"session_epoch,omitempty"`
	JobIDs           []string              `json:"job_ids"`
	Summary          string                `json:"summary"`
	ArtifactIDs      []string              `json:"artifact_ids,omitempty"`
	Policy           events.DeliveryPolicy `json:"delivery_policy"`
	RequiresArtifact bool                  `json:"requires_artifact_read"`
}

// freshAttempt returns the events that supersede the thread's live
// attempt (if any) with a new one on b: generation + 1, a new snapshot
// revision, the batch materialized for it.
func freshAttempt(v engine.View, el Eligibility, mode string) (id string, gen, rev uint64, emits []engine.Emit) {
	b := el.Batch
	if a := el.Attempt; a != nil {
		emits = append(emits, engine.Emit{Stream: AttemptStream(a.ID), Payload: &events.AttemptSuperseded{Reason: "fresh delivery after " + string(a.State)}})
	}
	id, gen, rev = v.NewID(), b.Generation+1, v.NextSeq()
	emits = append(emits,
		engine.Emit{Stream: AttemptStream(id), Payload: &events.AttemptPrepared{SourceThreadID: b.SourceThreadID, BatchID: b.ID, Generation: gen,
			SnapshotRevision: rev, SnapshotPath: snapshotPath(mode, b.SourceThreadID), DeliveryDeadline: b.RedeliveryWindowEndsAt}},
		engine.Emit{Stream: BatchStream(b.ID), Payload: &events.BatchMaterialized{AttemptID: id, Generation: gen, SnapshotRevision: rev, DeliveryMode: mode}},
	)
	return id, gen, rev, emits
}

// snapshotPath is a Desktop attempt's bridge-side locator of its thread's
// snapshot in the inbox, by-thread/<thread>.json (the ready entry's
// snapshot_path, spec/desktop.md); attempts of push targets have none.
func snapshotPath(mode, thread string) string {
	if mode != ModeDesktop {
		return ""
	}
	return "by-thread/" + url.PathEscape(thread) + ".json"
}

// StartDelivery opens (or reuses) the thread's attempt on its head batch
// and writes the accept_pending barrier, before any side effect: the rpc
// request id, the correlation marker, the rpc kind and the session and
// epoch the accepted turn must be reported on. Outcome "not_eligible"
// appends nothing.
type StartDelivery struct {
	engine.Answers[Delivery]

	Config   DeliveryConfig
	ThreadID string
	Route    Route
}

// Decide implements engine.Decider.
func (c StartDelivery) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := c.Route.validate(); err != nil {
		return engine.Decision{}, err
	}
	el, err := c.Config.Eligible(v, now, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	if !el.OK {
		return c.Answer(engine.Decision{Outcome: OutcomeNotEligible}, Delivery{NotEligible: el.Reason}), nil
	}
	b := el.Batch
	var emits []engine.Emit
	attemptID, gen, rev := "", b.Generation, b.SnapshotRevision
	if a := el.Attempt; a != nil && a.State == fsm.AttemptPrepared && a.BatchID == b.ID {
		attemptID = a.ID // a proven benign reject: retry the same attempt
	} else {
		attemptID, gen, rev, emits = freshAttempt(v, el, c.Route.DeliveryMode)
	}
	if g := c.Route.Gate; g != nil {
		gated, refused, err := g.Barrier(v)
		switch {
		case err != nil:
			return engine.Decision{}, err
		case refused != "":
			return c.Answer(engine.Decision{Outcome: OutcomeNotEligible}, Delivery{NotEligible: refused}), nil
		}
		emits = append(emits, gated...)
	}
	rpc := v.NewID()
	marker := "cbth-" + strings.ReplaceAll(rpc, "-", "")[20:]
	r := c.Route
	emits = append(emits, engine.Emit{Stream: AttemptStream(attemptID), Payload: &events.AttemptAcceptPending{
		RPCRequestID: rpc, RPCKind: r.RPCKind, CorrelationMarker: marker, ManagedSessionID: r.ManagedSessionID, SessionEpoch: r.SessionEpoch}})
	return c.Answer(engine.Decision{Outcome: OutcomeStarted, Emits: emits}, Delivery{
		ThreadID: c.ThreadID, TargetKind: b.TargetKind, BatchID: b.ID, AttemptID: attemptID, Generation: gen, SnapshotRevision: rev,
		RPCRequestID: rpc, RPCKind: r.RPCKind, DeliveryMode: r.DeliveryMode, Marker: marker,
		ManagedSessionID: r.ManagedSessionID, SessionEpoch: r.SessionEpoch, JobIDs: b.JobIDs, Summary: b.Summary,
		ArtifactIDs: b.ArtifactIDs, Policy: b.Policy, RequiresArtifact: b.RequiresArtifactRead,
	}), nil
}

// PrepareAttempt is the scheduler's whole part in a pull delivery (the
// Desktop bridge): it materializes the head batch for a fresh attempt and
// leaves it prepared, with no barrier and no call; the target's own
// helper commands move it on. Outcomes: "prepared", "already_prepared"
// (the head's attempt waits for its target), "not_eligible"; only
// "prepared" appends.
type PrepareAttempt struct {
	engine.Answers[string]

	Config       DeliveryConfig
	ThreadID     string
	DeliveryMode string
}

// Decide implements engine.Decider.
func (c PrepareAttempt) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if !slices.Contains(DeliveryModes, c.DeliveryMode) {
		return engine.Decision{}, errs.New(errs.EINVAL, "delivery_mode %q is not one of %s", c.DeliveryMode, strings.Join(DeliveryModes, ", "))
	}
	el, err := c.Config.Eligible(v, now, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	if !el.OK {
		return c.Answer(engine.Decision{Outcome: OutcomeNotEligible}, el.Reason), nil
	}
	if a := el.Attempt; a != nil && a.State == fsm.AttemptPrepared && a.BatchID == el.Batch.ID {
		return c.Answer(engine.Decision{Outcome: OutcomeAlreadyPrepared}, a.ID), nil
	}
	id, _, _, emits := freshAttempt(v, el, c.DeliveryMode)
	return c.Answer(engine.Decision{Outcome: OutcomePrepared, Emits: emits}, id), nil
}

// Acceptance outcomes: what a target reports of an accept_pending
// attempt (target.Result, target.Proof), and what RecordOutcome answers
// when it records one. They are decider outcomes, typed like the others.
const (
	Accepted          engine.Outcome = "accepted"
	RejectedBefore    engine.Outcome = "rejected_before_accept"
	AcceptanceUnknown engine.Outcome = "acceptance_unknown"
	// AcquisitionFailed: the target could not be acquired after the
	// barrier (a host-plugin target's app-server would not start), so
	// nothing was sent. The attempt is rejected durably, as a proven
	// reject, and the batch goes to manual resolution rather than
	// waiting with a pending attempt.
	AcquisitionFailed engine.Outcome = "acquisition_failed"
)

// RecordOutcome records what the channel said about an accept_pending
// attempt. Only a proven reject may be retried automatically; an unknown
// outcome parks the batch for manual resolution.
type RecordOutcome struct {
	Config       DeliveryConfig
	AttemptID    string
	RPCRequestID string
	// ManagedSessionID and SessionEpoch say which event stream the answer
	// came from; it counts only from the stream the barrier named.
	ManagedSessionID string
	SessionEpoch     uint64
	Outcome          engine.Outcome
	TurnID           string
	Reason           string
	Tracks           bool // the target reports turn events (observation window applies)
	// Handoff, with Accepted, names the item of Codex's own queue the
	// result became: the batch closes handoff_recorded in the same
	// append (events.BatchQueuedToCodex), in CodexHome's queue.
	Handoff   string
	CodexHome string
}

// Decide implements engine.Decider.
func (c RecordOutcome) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	a, err := engine.Attempt(v, c.AttemptID)
	if err != nil {
		return engine.Decision{}, err
	}
	if a == nil {
		return engine.Decision{}, errs.New(errs.ENOENT, "no attempt %s", c.AttemptID)
	}
	if a.State != fsm.AttemptAcceptPending || a.RPCRequestID != c.RPCRequestID ||
		a.ManagedSessionID != c.ManagedSessionID || a.SessionEpoch != c.SessionEpoch {
		return engine.Decision{Outcome: OutcomeStale}, nil
	}
	b, err := batchOf(v, a)
	if err != nil {
		return engine.Decision{}, err
	}
	as := AttemptStream(a.ID)
	switch c.Outcome {
	case Accepted:
		acc := &events.AttemptAccepted{TurnID: c.TurnID, CooldownUntil: now.Add(c.Config.Cooldown)}
		if c.Tracks {
			acc.ObservationDeadline = now.Add(c.Config.ObservationWindow)
		}
		emits := []engine.Emit{
			{Stream: as, Payload: acc},
			{Stream: BatchStream(b.ID), Payload: &events.BatchDeliveryAccepted{AttemptID: a.ID, Generation: a.Generation,
				CooldownUntil: acc.CooldownUntil, NextDeliveryNotBefore: now.Add(c.Config.MinSendInterval),
				ObservationDeadline: acc.ObservationDeadline}},
			{Stream: CursorStream(TargetCursorScope(b.TargetKind)), Payload: &events.CursorAdvanced{ReadyAt: b.FirstReadyAt, ThreadID: b.SourceThreadID, Reason: "accepted"}},
		}
		if c.Handoff == "" {
			return engine.Decision{Outcome: Accepted, Emits: emits}, nil
		}
		// Handed off: nothing more to observe; the batch closes now, its
		// attempt with it.
		tail, err := c.Config.closeTail(v, now, b, CloseHandoffRecorded)
		if err != nil {
			return engine.Decision{}, err
		}
		emits = append(emits, engine.Emit{Stream: BatchStream(b.ID), Payload: &events.BatchQueuedToCodex{AttemptID: a.ID, Generation: a.Generation,
			QueuedItemID: c.Handoff, CodexHome: c.CodexHome}},
			engine.Emit{Stream: as, Payload: &events.AttemptClosed{Reason: CloseHandoffRecorded}})
		return engine.Decision{Outcome: Accepted, Emits: append(emits, tail...)}, nil
	case RejectedBefore:
		// The attempt is retried in place, so its rejects so far are the
		// ones this channel gave this batch since it last took one.
		n := len(a.RejectedRequestIDs) + 1
		wait := c.Config.Backoff().Delay(a.ID, n)
		return engine.Decision{Outcome: RejectedBefore, Emits: []engine.Emit{
			{Stream: as, Payload: &events.AttemptRejectedBeforeAccept{Reason: c.Reason}},
			{Stream: BatchStream(b.ID), Payload: &events.BatchEligibleAfterSet{EligibleAfter: now.Add(wait),
				Reason: fmt.Sprintf("rejected before accept (reject %d, back-off %s): %s", n, wait, c.Reason)}},
		}}, nil
	case AcquisitionFailed:
		return engine.Decision{Outcome: AcquisitionFailed, Emits: []engine.Emit{
			{Stream: as, Payload: &events.AttemptRejectedBeforeAccept{Reason: "target acquisition failed: " + c.Reason}},
			Park(b, "target acquisition failed: "+c.Reason, a.ID),
		}}, nil
	case AcceptanceUnknown:
		return engine.Decision{Outcome: AcceptanceUnknown, Emits: []engine.Emit{
			{Stream: as, Payload: &events.AttemptAbandoned{Reason: "acceptance unknown: " + c.Reason, RPCState: string(AcceptanceUnknown)}},
			Park(b, "acceptance unknown: "+c.Reason, a.ID),
		}}, nil
	}
	return engine.Decision{}, errs.New(errs.EINVAL, "unknown delivery outcome %q", c.Outcome)
}

// Turn events a target may observe on an accepted turn.
var TurnEvents = []string{"turn_started", "turn_completed", "turn_failed", "turn_interrupted", "turn_replaced"}

// ObserveTurn records an event of an accepted turn. turn_completed closes
// the batch as delivered, but only while the attempt is still the tracked
// head delivery within its deadline; any negative end parks the batch.
// An event counts only from the managed session and epoch the barrier
// recorded: from any other stream it is "session_mismatch" and changes
// nothing.
type ObserveTurn struct {
	Config           DeliveryConfig
	AttemptID        string
	TurnID           string
	Event            string
	ManagedSessionID string
	SessionEpoch     uint64
}

// Outcomes of ObserveTurn besides CloseDelivered; the last two append
// nothing.
const (
	Observed        = "observed"
	Parked          = "parked"
	LateIgnored     = "late_ignored"
	SessionMismatch = "session_mismatch"
)

// Decide implements engine.Decider.
func (c ObserveTurn) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if !slices.Contains(TurnEvents, c.Event) {
		return engine.Decision{}, errs.New(errs.EINVAL, "unknown turn event %q", c.Event)
	}
	a, err := engine.Attempt(v, c.AttemptID)
	if err != nil {
		return engine.Decision{}, err
	}
	if a == nil {
		return engine.Decision{}, errs.New(errs.ENOENT, "no attempt %s", c.AttemptID)
	}
	b, err := batchOf(v, a)
	if err != nil {
		return engine.Decision{}, err
	}
	if a.ManagedSessionID != c.ManagedSessionID || a.SessionEpoch != c.SessionEpoch {
		// Not the stream the accepted turn is bound to: no proof of
		// anything about that turn.
		return engine.Decision{Outcome: SessionMismatch}, nil
	}
	if a.State != fsm.AttemptCooldown || a.TurnID != c.TurnID || b.HeadAttemptID != a.ID || !b.Open() ||
		b.ReplayPolicy != aggregate.ReplayAutomatic || (a.ObservationState != "" && a.ObservationState != "tracking") ||
		(!a.ObservationDeadline.IsZero() && now.After(a.ObservationDeadline)) {
		// Late or stale: evidence for an operator, never an automatic close.
		return engine.Decision{Outcome: LateIgnored}, nil
	}
	emits := []engine.Emit{{Stream: AttemptStream(a.ID), Payload: &events.AttemptTurnObserved{TurnID: c.TurnID, Event: c.Event}}}
	switch c.Event {
	case "turn_started":
		return engine.Decision{Outcome: Observed, Emits: emits}, nil
	case "turn_completed":
		more, err := c.Config.closeBatch(v, now, b, CloseDelivered, "turn "+c.TurnID+" completed")
		if err != nil {
			return engine.Decision{}, err
		}
		return engine.Decision{Outcome: CloseDelivered, Emits: append(emits, more...)}, nil
	default:
		emits = append(emits,
			engine.Emit{Stream: AttemptStream(a.ID), Payload: &events.AttemptAbandoned{Reason: c.Event, ObservationState: "lost"}},
			Park(b, "accepted turn ended with "+c.Event, a.ID))
		return engine.Decision{Outcome: Parked, Emits: emits}, nil
	}
}

// CloseHead is the operator's close of a thread's head batch.
type CloseHead struct {
	engine.Answers[string]

	Config   DeliveryConfig
	ThreadID string
	Reason   string
	BatchID  string // optional guard: close only if this is the head
}

// OperatorReasons are the close reasons an operator may give.
var OperatorReasons = []string{CloseOperatorUnconfirmed, CloseOperatorConfirmed, CloseCancelled}

// Decide implements engine.Decider.
func (c CloseHead) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if !slices.Contains(OperatorReasons, c.Reason) {
		return engine.Decision{}, errs.New(errs.EINVAL, "reason must be one of %s", strings.Join(OperatorReasons, ", "))
	}
	if err := CheckID("thread id", c.ThreadID); err != nil {
		return engine.Decision{}, err
	}
	if c.BatchID != "" {
		b, err := engine.Batch(v, c.BatchID)
		if err != nil {
			return engine.Decision{}, err
		}
		if b == nil || b.SourceThreadID != c.ThreadID {
			return engine.Decision{}, errs.New(errs.ENOENT, "no batch %s on thread %s", c.BatchID, c.ThreadID)
		}
		if !b.Open() {
			return c.Answer(engine.Decision{Outcome: OutcomeAlreadyClosed}, b.ID), nil
		}
		if !b.IsHead {
			return engine.Decision{}, errs.New(errs.ESTATE, "batch %s is not the head of thread %s", b.ID, c.ThreadID)
		}
	}
	open, err := OpenBatches(v, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	if len(open) == 0 {
		return engine.Decision{Outcome: OutcomeAlreadyClosed}, nil
	}
	emits, err := c.Config.closeBatch(v, now, open[0], c.Reason, "operator")
	if err != nil {
		return engine.Decision{}, err
	}
	return c.Answer(engine.Decision{Outcome: OutcomeClosed, Emits: emits}, open[0].ID), nil
}

// SessionRef names an attempt whose accepted turn's event stream a target
// proved continuous across a restart: same managed session, same epoch.
type SessionRef struct {
	AttemptID        string
	ManagedSessionID string
	SessionEpoch     uint64
}

// ReconcileInFlight runs at start-up, after the targets' reconcile hooks
// recorded what they could prove. What is left in flight has no proof:
// an attempt still accept_pending (the daemon died during the call) and
// an attempt tracking an accepted turn whose stream a target did not
// prove continuous (Continuing) cannot be told apart from one that had
// its side effect, so each is abandoned and its batch parked.
type ReconcileInFlight struct {
	Config     DeliveryConfig
	Continuing []SessionRef
}

// Decide implements engine.Decider.
func (c ReconcileInFlight) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	var emits []engine.Emit
	for _, r := range v.Scan(index.ThreadLive, "") {
		a, err := engine.Attempt(v, r.ID)
		if err != nil {
			return engine.Decision{}, err
		}
		if a == nil {
			continue
		}
		var ab *events.AttemptAbandoned
		var why string
		switch {
		case a.State == fsm.AttemptAcceptPending:
			ab = &events.AttemptAbandoned{Reason: "daemon restarted while the delivery was in flight", RPCState: string(AcceptanceUnknown)}
			why = "acceptance unknown after a restart"
		case a.Tracking() && !c.continues(a):
			ab = &events.AttemptAbandoned{Reason: "daemon restarted: the accepted turn's event stream cannot be proven continuous", ObservationState: "lost"}
			why = "observation of the accepted turn lost in a restart"
		default:
			continue
		}
		b, err := engine.Batch(v, a.BatchID)
		if err != nil {
			return engine.Decision{}, err
		}
		emits = append(emits, engine.Emit{Stream: AttemptStream(a.ID), Payload: ab})
		if b != nil && b.Open() && b.ReplayPolicy == aggregate.ReplayAutomatic {
			emits = append(emits, Park(b, why, a.ID))
		}
	}
	return engine.Decision{Outcome: engine.Outcome(fmt.Sprintf("reconciled %d", len(emits)/2)), Emits: emits}, nil
}

func (c ReconcileInFlight) continues(a *aggregate.Attempt) bool {
	for _, r := range c.Continuing {
		if r.AttemptID == a.ID && r.ManagedSessionID == a.ManagedSessionID && r.SessionEpoch == a.SessionEpoch {
			return true
		}
	}
	return false
}

// LoseStream records that the event stream of a managed session's epoch
// is gone without an epoch of its own to advance (a host-plugin target's
// app-server exited): the attempt observing an accepted turn on it is
// abandoned and its batch parked, never resent. An attempt still
// accept_pending is left to its delivery, which settles it on the same
// instance or parks it.
type LoseStream struct {
	ManagedSessionID string
	SessionEpoch     uint64
	Reason           string
}

// Decide implements engine.Decider.
func (c LoseStream) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	var emits []engine.Emit
	for _, r := range v.Scan(index.ThreadLive, "") {
		a, err := engine.Attempt(v, r.ID)
		if err != nil {
			return engine.Decision{}, err
		}
		if a == nil || !a.Tracking() || a.ManagedSessionID != c.ManagedSessionID || a.SessionEpoch != c.SessionEpoch {
			continue
		}
		emits = append(emits, engine.Emit{Stream: AttemptStream(a.ID), Payload: &events.AttemptAbandoned{Reason: c.Reason, ObservationState: "lost"}})
		b, err := engine.Batch(v, a.BatchID)
		if err != nil {
			return engine.Decision{}, err
		}
		if b != nil && b.Open() && b.ReplayPolicy == aggregate.ReplayAutomatic {
			emits = append(emits, Park(b, "continuity lost: "+c.Reason, a.ID))
		}
	}
	if len(emits) == 0 {
		return engine.Decision{Outcome: OutcomeNothingTracked}, nil
	}
	return engine.Decision{Outcome: Parked, Emits: emits}, nil
}
