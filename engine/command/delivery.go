package command

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/errs"
	"github.com/cbth-dev/cbth/events"
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
	EligibleBackoff     time.Duration
	InlinePayloadLimit  int64
	ObservationWindow   time.Duration
	MinArtifactTTL      time.Duration
	PostCloseTTL        time.Duration
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

// ---- reading the thread FIFO ----

// openBatches returns a thread's open batches in FIFO order.
func openBatches(v engine.View, thread string) ([]*aggregate.Batch, error) {
	var out []*aggregate.Batch
	for _, r := range v.Scan(aggregate.IndexThreadOpen, thread+"\x00") {
		if !strings.HasPrefix(r.Key, thread+"\x00") || len(r.Key) != len(thread)+9 {
			continue // another thread whose id extends this one
		}
		s, err := v.State(events.KindBatch, r.ID)
		if err != nil {
			return nil, err
		}
		if b, ok := s.(*aggregate.Batch); ok && b.Open() {
			out = append(out, b)
		}
	}
	return out, nil
}

// liveAttempt returns the thread's non-terminal attempt, if any.
func liveAttempt(v engine.View, thread string) (*aggregate.Attempt, error) {
	refs := v.Lookup(aggregate.IndexThreadLive, thread)
	if len(refs) > 1 {
		return nil, errs.New(errs.ECORRUPT, "thread %s has %d live attempts", thread, len(refs))
	}
	if len(refs) == 0 {
		return nil, nil
	}
	s, err := v.State(events.KindAttempt, refs[0].ID)
	if err != nil || s == nil {
		return nil, err
	}
	return s.(*aggregate.Attempt), nil
}

// lastSend returns when the thread last had a delivery accepted.
func lastSend(v engine.View, thread string) time.Time {
	refs := v.Scan(aggregate.IndexThreadSends, thread+"\x00")
	var last time.Time
	for _, r := range refs {
		if len(r.Key) != len(thread)+9 {
			continue
		}
		t := timeOfKey(r.Key[len(thread)+1:])
		if t.After(last) {
			last = t
		}
	}
	return last
}

func timeOfKey(k string) time.Time {
	var n uint64
	for i := 0; i < 8 && i < len(k); i++ {
		n = n<<8 | uint64(k[i])
	}
	return time.Unix(0, int64(n)).UTC()
}

func (c DeliveryConfig) notBefore(v engine.View, thread string) time.Time {
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
	open, err := openBatches(v, j.SourceThreadID)
	if err != nil {
		return "", nil, err
	}
	if n := len(open); n > 0 {
		tail := open[n-1]
		if tail.Status == "queued" && tail.HeadAttemptID == "" && tail.TargetKind == j.TargetKind &&
			len(tail.JobIDs) < c.MaxJobsPerBatch && tail.InlinePayloadBytes+size <= c.MaxTotalBytes &&
			now.Before(tail.MergeUntil) && tail.ReplayPolicy == aggregate.ReplayAutomatic {
			add := &events.BatchJobsAdded{
				JobIDs: []string{j.ID}, ArtifactIDs: arts, Summary: tail.Summary + "\n" + line, LastReadyAt: now,
				Policy: tail.Policy.Stricter(j.DeliveryPolicy), InlinePayloadBytes: tail.InlinePayloadBytes + size,
				RequiresArtifactRead: tail.RequiresArtifactRead || needsRead,
			}
			return tail.ID, []engine.Emit{{Stream: batchStream(tail.ID), Payload: add}}, nil
		}
	}
	id := v.NewID()
	op := &events.BatchOpened{
		SourceThreadID: j.SourceThreadID, TargetKind: j.TargetKind, JobIDs: []string{j.ID}, ArtifactIDs: arts,
		Summary: line, FirstReadyAt: now, LastReadyAt: now, Policy: j.DeliveryPolicy, InlinePayloadBytes: size,
		RequiresArtifactRead: needsRead, MaxDeliveryAttempts: c.MaxDeliveryAttempts,
		RedeliveryWindowEndsAt: now.Add(c.RedeliveryWindow), MergeUntil: now.Add(c.MaxWaitWindow),
		Head: len(open) == 0,
	}
	if op.Head {
		op.NextDeliveryNotBefore = c.notBefore(v, j.SourceThreadID)
	}
	return id, []engine.Emit{{Stream: batchStream(id), Payload: op}}, nil
}

func batchStream(id string) events.StreamID { return events.StreamID{Kind: events.KindBatch, ID: id} }
func attemptStream(id string) events.StreamID {
	return events.StreamID{Kind: events.KindAttempt, ID: id}
}
func cursorStream(target string) events.StreamID {
	return events.StreamID{Kind: events.KindCursor, ID: target}
}

// ---- closing ----

// closeBatch returns the events that close batch b for reason: the batch
// itself, its live attempt, the artifacts it held, the promotion of the
// next batch of the thread when b was the head, and the cursor step.
func (c DeliveryConfig) closeBatch(v engine.View, now time.Time, b *aggregate.Batch, reason, detail string) ([]engine.Emit, error) {
	emits := []engine.Emit{{Stream: batchStream(b.ID), Payload: &events.BatchClosed{CloseReason: reason, Detail: detail}}}
	if a, err := liveAttempt(v, b.SourceThreadID); err != nil {
		return nil, err
	} else if a != nil && a.BatchID == b.ID {
		if a.Status == "cooldown" {
			emits = append(emits, engine.Emit{Stream: attemptStream(a.ID), Payload: &events.AttemptClosed{Reason: reason}})
		} else {
			emits = append(emits, engine.Emit{Stream: attemptStream(a.ID), Payload: &events.AttemptAbandoned{Reason: "batch closed: " + reason}})
		}
	}
	rel, err := c.release(v, now, b)
	if err != nil {
		return nil, err
	}
	emits = append(emits, rel...)
	if b.IsHead {
		open, err := openBatches(v, b.SourceThreadID)
		if err != nil {
			return nil, err
		}
		for _, next := range open {
			if next.ID != b.ID {
				emits = append(emits, engine.Emit{Stream: batchStream(next.ID), Payload: &events.BatchPromoted{NextDeliveryNotBefore: c.notBefore(v, b.SourceThreadID)}})
				break
			}
		}
		emits = append(emits, engine.Emit{Stream: cursorStream(b.TargetKind), Payload: &events.CursorAdvanced{ReadyAt: b.FirstReadyAt, ThreadID: b.SourceThreadID, Reason: "closed: " + reason}})
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
		s, err := v.State(events.KindArtifact, id)
		if err != nil {
			return nil, err
		}
		a, ok := s.(*aggregate.Artifact)
		if !ok || a.Status != "stored" {
			continue
		}
		eligible := latest(a.MinRetentionUntil, now.Add(c.PostCloseTTL), a.OperatorPinUntil)
		out = append(out, engine.Emit{Stream: events.StreamID{Kind: events.KindArtifact, ID: id},
			Payload: &events.ArtifactReleased{BatchID: b.ID, LastBatchClosedAt: now, GCEligibleAt: eligible}})
	}
	return out, nil
}

func latest(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}

// park moves b to manual resolution: no automatic replay from now on.
func park(b *aggregate.Batch, reason, attemptID string) engine.Emit {
	return engine.Emit{Stream: batchStream(b.ID), Payload: &events.BatchReplayPolicyChanged{ReplayPolicy: aggregate.ReplayManual, Reason: reason, AttemptID: attemptID}}
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
func (c DeliveryConfig) Eligible(v engine.View, now time.Time, thread string) (Eligibility, error) {
	open, err := openBatches(v, thread)
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
	if !b.IsHead {
		return no("head not promoted", time.Time{})
	}
	if b.ReplayPolicy != aggregate.ReplayAutomatic {
		return no("manual resolution only", time.Time{})
	}
	if b.Status == "queued" && now.Before(b.MergeUntil) && len(b.JobIDs) < c.MaxJobsPerBatch && b.InlinePayloadBytes < c.MaxTotalBytes {
		return no("merge window open", b.MergeUntil)
	}
	if now.Before(b.NextDeliveryNotBefore) {
		return no("minimum send interval", b.NextDeliveryNotBefore)
	}
	if now.Before(b.EligibleAfter) {
		return no("backing off after a reject", b.EligibleAfter)
	}
	if b.DeliveryAttemptCount >= b.MaxDeliveryAttempts && b.MaxDeliveryAttempts > 0 {
		return no("attempt budget spent", time.Time{})
	}
	a, err := liveAttempt(v, thread)
	if err != nil {
		return Eligibility{}, err
	}
	el.Attempt = a
	if a != nil {
		switch a.Status {
		case "accept_pending", "arm_pending":
			return no("a delivery is in flight", time.Time{})
		case "cooldown":
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

// ---- delivery commands ----

// Delivery is what a target needs to carry one attempt out.
type Delivery struct {
	ThreadID         string                `json:"source_thread_id"`
	Target           string                `json:"target"`
	BatchID          string                `json:"batch_id"`
	AttemptID        string                `json:"attempt_id"`
	Generation       uint64                `json:"generation"`
	SnapshotRevision uint64                `json:"snapshot_revision"`
	RPCRequestID     string                `json:"delivery_rpc_request_id"`
	Marker           string                `json:"correlation_marker"`
	JobIDs           []string              `json:"job_ids"`
	Summary          string                `json:"summary"`
	ArtifactIDs      []string              `json:"artifact_ids,omitempty"`
	Policy           events.DeliveryPolicy `json:"delivery_policy"`
	RequiresArtifact bool                  `json:"requires_artifact_read"`
}

// StartDelivery opens (or reuses) the thread's attempt on its head batch
// and writes the accept_pending barrier, before any side effect. Outcome
// "not_eligible" appends nothing.
type StartDelivery struct {
	Config   DeliveryConfig
	ThreadID string
	Kind     string // delivery_rpc_kind
}

// Decide implements engine.Decider.
func (c StartDelivery) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	el, err := c.Config.Eligible(v, now, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	if !el.OK {
		return engine.Decision{Outcome: "not_eligible", Value: el.Reason}, nil
	}
	b := el.Batch
	var emits []engine.Emit
	attemptID, gen, rev := "", b.Generation, b.SnapshotRevision
	if a := el.Attempt; a != nil && a.Status == "prepared" && a.BatchID == b.ID {
		attemptID = a.ID // a proven benign reject: retry the same attempt
	} else {
		if a != nil {
			emits = append(emits, engine.Emit{Stream: attemptStream(a.ID), Payload: &events.AttemptSuperseded{Reason: "fresh delivery after " + a.Status}})
		}
		attemptID, gen, rev = v.NewID(), b.Generation+1, v.NextSeq()
		emits = append(emits,
			engine.Emit{Stream: attemptStream(attemptID), Payload: &events.AttemptPrepared{SourceThreadID: c.ThreadID, BatchID: b.ID, Generation: gen, SnapshotRevision: rev}},
			engine.Emit{Stream: batchStream(b.ID), Payload: &events.BatchMaterialized{AttemptID: attemptID, Generation: gen, SnapshotRevision: rev, DeliveryMode: c.Kind}},
		)
	}
	rpc := v.NewID()
	marker := "cbth-" + strings.ReplaceAll(rpc, "-", "")[20:]
	emits = append(emits, engine.Emit{Stream: attemptStream(attemptID), Payload: &events.AttemptAcceptPending{RPCRequestID: rpc, RPCKind: c.Kind, CorrelationMarker: marker}})
	return engine.Decision{Outcome: "started", Emits: emits, Value: Delivery{
		ThreadID: c.ThreadID, Target: b.TargetKind, BatchID: b.ID, AttemptID: attemptID, Generation: gen, SnapshotRevision: rev,
		RPCRequestID: rpc, Marker: marker, JobIDs: b.JobIDs, Summary: b.Summary, ArtifactIDs: b.ArtifactIDs,
		Policy: b.Policy, RequiresArtifact: b.RequiresArtifactRead,
	}}, nil
}

// Acceptance outcomes a target reports.
const (
	Accepted          = "accepted"
	RejectedBefore    = "rejected_before_accept"
	AcceptanceUnknown = "acceptance_unknown"
)

// RecordOutcome records what the channel said about an accept_pending
// attempt. Only a proven reject may be retried automatically; an unknown
// outcome parks the batch for manual resolution.
type RecordOutcome struct {
	Config       DeliveryConfig
	AttemptID    string
	RPCRequestID string
	Outcome      string
	TurnID       string
	Reason       string
	Tracks       bool // the target reports turn events (observation window applies)
}

// Decide implements engine.Decider.
func (c RecordOutcome) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	s, err := v.State(events.KindAttempt, c.AttemptID)
	if err != nil {
		return engine.Decision{}, err
	}
	a, ok := s.(*aggregate.Attempt)
	if !ok {
		return engine.Decision{}, errs.New(errs.ENOENT, "no attempt %s", c.AttemptID)
	}
	if a.Status != "accept_pending" || a.RPCRequestID != c.RPCRequestID {
		return engine.Decision{Outcome: "stale"}, nil
	}
	bs, err := v.State(events.KindBatch, a.BatchID)
	if err != nil {
		return engine.Decision{}, err
	}
	b := bs.(*aggregate.Batch)
	as := attemptStream(a.ID)
	switch c.Outcome {
	case Accepted:
		acc := &events.AttemptAccepted{TurnID: c.TurnID, CooldownUntil: now.Add(c.Config.Cooldown)}
		if c.Tracks {
			acc.ObservationDeadline = now.Add(c.Config.ObservationWindow)
		}
		return engine.Decision{Outcome: Accepted, Emits: []engine.Emit{
			{Stream: as, Payload: acc},
			{Stream: batchStream(b.ID), Payload: &events.BatchDeliveryAccepted{AttemptID: a.ID, Generation: a.Generation,
				CooldownUntil: acc.CooldownUntil, NextDeliveryNotBefore: now.Add(c.Config.MinSendInterval)}},
			{Stream: cursorStream(b.TargetKind), Payload: &events.CursorAdvanced{ReadyAt: b.FirstReadyAt, ThreadID: b.SourceThreadID, Reason: "accepted"}},
		}}, nil
	case RejectedBefore:
		return engine.Decision{Outcome: RejectedBefore, Emits: []engine.Emit{
			{Stream: as, Payload: &events.AttemptRejectedBeforeAccept{Reason: c.Reason}},
			{Stream: batchStream(b.ID), Payload: &events.BatchEligibleAfterSet{EligibleAfter: now.Add(c.Config.EligibleBackoff), Reason: "rejected before accept: " + c.Reason}},
		}}, nil
	case AcceptanceUnknown:
		return engine.Decision{Outcome: AcceptanceUnknown, Emits: []engine.Emit{
			{Stream: as, Payload: &events.AttemptAbandoned{Reason: "acceptance unknown: " + c.Reason, RPCState: AcceptanceUnknown}},
			park(b, "acceptance unknown: "+c.Reason, a.ID),
		}}, nil
	}
	return engine.Decision{}, errs.New(errs.EINVAL, "unknown delivery outcome %q", c.Outcome)
}

// Turn events a target may observe on an accepted turn.
var TurnEvents = []string{"turn_started", "turn_completed", "turn_failed", "turn_interrupted", "turn_replaced"}

// ObserveTurn records an event of an accepted turn. turn_completed closes
// the batch as delivered, but only while the attempt is still the tracked
// head delivery within its deadline; any negative end parks the batch.
type ObserveTurn struct {
	Config    DeliveryConfig
	AttemptID string
	TurnID    string
	Event     string
}

// Decide implements engine.Decider.
func (c ObserveTurn) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if !slices.Contains(TurnEvents, c.Event) {
		return engine.Decision{}, errs.New(errs.EINVAL, "unknown turn event %q", c.Event)
	}
	s, err := v.State(events.KindAttempt, c.AttemptID)
	if err != nil {
		return engine.Decision{}, err
	}
	a, ok := s.(*aggregate.Attempt)
	if !ok {
		return engine.Decision{}, errs.New(errs.ENOENT, "no attempt %s", c.AttemptID)
	}
	bs, err := v.State(events.KindBatch, a.BatchID)
	if err != nil {
		return engine.Decision{}, err
	}
	b := bs.(*aggregate.Batch)
	if a.Status != "cooldown" || a.TurnID != c.TurnID || b.HeadAttemptID != a.ID || !b.Open() ||
		b.ReplayPolicy != aggregate.ReplayAutomatic || (a.ObservationState != "" && a.ObservationState != "tracking") ||
		(!a.ObservationDeadline.IsZero() && now.After(a.ObservationDeadline)) {
		// Late or stale: evidence for an operator, never an automatic close.
		return engine.Decision{Outcome: "late_ignored"}, nil
	}
	emits := []engine.Emit{{Stream: attemptStream(a.ID), Payload: &events.AttemptTurnObserved{TurnID: c.TurnID, Event: c.Event}}}
	switch c.Event {
	case "turn_started":
		return engine.Decision{Outcome: "observed", Emits: emits}, nil
	case "turn_completed":
		more, err := c.Config.closeBatch(v, now, b, CloseDelivered, "turn "+c.TurnID+" completed")
		if err != nil {
			return engine.Decision{}, err
		}
		return engine.Decision{Outcome: CloseDelivered, Emits: append(emits, more...)}, nil
	default:
		emits = append(emits,
			engine.Emit{Stream: attemptStream(a.ID), Payload: &events.AttemptAbandoned{Reason: c.Event, ObservationState: "lost"}},
			park(b, "accepted turn ended with "+c.Event, a.ID))
		return engine.Decision{Outcome: "parked", Emits: emits}, nil
	}
}

// CloseHead is the operator's close of a thread's head batch.
type CloseHead struct {
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
	if err := checkID("thread id", c.ThreadID); err != nil {
		return engine.Decision{}, err
	}
	if c.BatchID != "" {
		s, err := v.State(events.KindBatch, c.BatchID)
		if err != nil {
			return engine.Decision{}, err
		}
		b, ok := s.(*aggregate.Batch)
		if !ok || b.SourceThreadID != c.ThreadID {
			return engine.Decision{}, errs.New(errs.ENOENT, "no batch %s on thread %s", c.BatchID, c.ThreadID)
		}
		if !b.Open() {
			return engine.Decision{Outcome: "already_closed", Value: b.ID}, nil
		}
		if !b.IsHead {
			return engine.Decision{}, errs.New(errs.ESTATE, "batch %s is not the head of thread %s", b.ID, c.ThreadID)
		}
	}
	open, err := openBatches(v, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	if len(open) == 0 {
		return engine.Decision{Outcome: "already_closed"}, nil
	}
	emits, err := c.Config.closeBatch(v, now, open[0], c.Reason, "operator")
	if err != nil {
		return engine.Decision{}, err
	}
	return engine.Decision{Outcome: "closed", Emits: emits, Value: open[0].ID}, nil
}

// ReconcileInFlight runs at start-up: an attempt left accept_pending by a
// crash has no proof either way, so it is abandoned and its batch parked.
type ReconcileInFlight struct{ Config DeliveryConfig }

// Decide implements engine.Decider.
func (c ReconcileInFlight) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	var emits []engine.Emit
	for _, r := range v.Scan(aggregate.IndexThreadLive, "") {
		s, err := v.State(events.KindAttempt, r.ID)
		if err != nil {
			return engine.Decision{}, err
		}
		a, ok := s.(*aggregate.Attempt)
		if !ok || a.Status != "accept_pending" {
			continue
		}
		bs, err := v.State(events.KindBatch, a.BatchID)
		if err != nil {
			return engine.Decision{}, err
		}
		emits = append(emits,
			engine.Emit{Stream: attemptStream(a.ID), Payload: &events.AttemptAbandoned{Reason: "daemon restarted while the delivery was in flight", RPCState: AcceptanceUnknown}},
			park(bs.(*aggregate.Batch), "acceptance unknown after a restart", a.ID))
	}
	return engine.Decision{Outcome: fmt.Sprintf("reconciled %d", len(emits)/2), Emits: emits}, nil
}
