package desktop

import (
	"slices"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The transcript relay's commands (spec/desktop.md, "The transcript
// relay"): issuing a marker, binding the scanner of a bridge thread to a
// rollout file, and consuming an envelope, which applies the very
// NoteArmPending or NoteArm a direct helper call would.

// IssueRelayMarker is `cbth desktop relay marker issue`: it binds a new
// marker (Marker, drawn by the caller from a secure random source) to an
// envelope kind, the attempt's token and the bridge request. An
// arm-pending marker needs the attempt prepared; an arm-accepted one needs
// it durably arm_pending under that request. While an unconsumed,
// unexpired marker of the same kind, bridge and request exists, it is
// returned again ("already_issued") and nothing is appended.
type IssueRelayMarker struct {
	engine.Answers[IssuedMarker]

	Kind           string
	BridgeThreadID string
	ArmToken
	Marker string
	TTL    time.Duration
}

// IssuedMarker is IssueRelayMarker's value.
type IssuedMarker struct {
	Marker    string
	ExpiresAt time.Time
}

// Decide implements engine.Decider.
func (c IssueRelayMarker) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if !slices.Contains(aggregate.RelayKinds, c.Kind) {
		return engine.Decision{}, errs.New(errs.EINVAL, "relay marker kind %q is not arm-pending, arm-accepted or paused", c.Kind)
	}
	if err := command.CheckID("bridge thread id", c.BridgeThreadID); err != nil {
		return engine.Decision{}, err
	}
	if len(c.Marker) < 32 {
		return engine.Decision{}, errs.New(errs.EINTERNAL, "relay marker too short")
	}
	if c.Kind == aggregate.RelayPaused {
		return c.pauseMarker(v, now)
	}
	if err := c.check(); err != nil {
		return engine.Decision{}, err
	}
	_, a, why, err := headAttempt(v, c.ThreadID, c.AttemptID, c.Generation)
	if err != nil {
		return engine.Decision{}, err
	}
	if why != "" {
		return engine.Decision{}, errs.New(errs.ESTALE, "stale: %s", why)
	}
	switch {
	case c.Kind == aggregate.RelayArmPending && a.State != fsm.AttemptPrepared:
		return engine.Decision{}, errs.New(errs.ESTALE, "stale: attempt %s is %s, not prepared", a.ID, a.State)
	case c.Kind == aggregate.RelayArmAccepted && (a.State != fsm.AttemptArmPending || a.BridgeRequestID != c.BridgeRequestID):
		return engine.Decision{}, errs.New(errs.ESTATE, "an arm-accepted marker is issued only once the attempt is durably arm_pending under bridge request %s (it is %s)",
			c.BridgeRequestID, a.State)
	}
	for _, m := range a.RelayMarkers {
		if m.Kind == c.Kind && m.BridgeThreadID == c.BridgeThreadID && m.BridgeRequestID == c.BridgeRequestID && m.ConsumedSHA256 == "" && now.Before(m.ExpiresAt) {
			return c.Answer(engine.Decision{Outcome: command.OutcomeAlreadyIssued}, IssuedMarker{Marker: m.Marker, ExpiresAt: m.ExpiresAt}), nil
		}
	}
	ev := &events.AttemptRelayMarkerIssued{Marker: c.Marker, Kind: c.Kind, BridgeThreadID: c.BridgeThreadID,
		BridgeRequestID: c.BridgeRequestID, ExpiresAt: now.Add(c.TTL)}
	return c.Answer(engine.Decision{Outcome: command.OutcomeIssued, Emits: []engine.Emit{{Stream: command.AttemptStream(a.ID), Payload: ev}}}, IssuedMarker{Marker: c.Marker, ExpiresAt: ev.ExpiresAt}), nil
}

// pauseMarker issues a paused marker on the thread's binding, for the
// generation note-paused would accept now or later: the armed generation
// not yet quiesced (AttemptID empty), or the generation of the thread's
// arm_pending attempt under the same request (AttemptID that attempt).
func (c IssueRelayMarker) pauseMarker(v engine.View, now time.Time) (engine.Decision, error) {
	bd, err := pauseBinding(v, c.ThreadID, c.BridgeRequestID)
	if err != nil {
		return engine.Decision{}, err
	}
	switch {
	case c.AttemptID == "" && c.Generation > 0 && c.Generation == bd.ArmedGeneration && bd.Unquiesced():
	case c.AttemptID != "":
		a, err := command.LiveAttempt(v, c.ThreadID)
		if err != nil {
			return engine.Decision{}, err
		}
		if a == nil || a.ID != c.AttemptID || a.State != fsm.AttemptArmPending || a.Generation != c.Generation || a.BridgeRequestID != c.BridgeRequestID {
			return engine.Decision{}, errs.New(errs.ESTALE, "stale: attempt %s is not arm_pending for generation %d under bridge request %s",
				c.AttemptID, c.Generation, c.BridgeRequestID)
		}
	default:
		return engine.Decision{}, errs.New(errs.ESTALE, "stale: generation %d is not the binding's armed generation waiting for its pause (%d)",
			c.Generation, bd.ArmedGeneration)
	}
	for _, m := range bd.RelayMarkers {
		if m.Kind == aggregate.RelayPaused && m.BridgeThreadID == c.BridgeThreadID && m.Generation == c.Generation && m.AttemptID == c.AttemptID &&
			m.BridgeRequestID == c.BridgeRequestID && m.Valid(now) {
			return c.Answer(engine.Decision{Outcome: command.OutcomeAlreadyIssued}, IssuedMarker{Marker: m.Marker, ExpiresAt: m.ExpiresAt}), nil
		}
	}
	ev := &events.BindingRelayMarkerIssued{Marker: c.Marker, Kind: aggregate.RelayPaused, Generation: c.Generation, AttemptID: c.AttemptID,
		BridgeThreadID: c.BridgeThreadID, BridgeRequestID: c.BridgeRequestID, ExpiresAt: now.Add(c.TTL)}
	return c.Answer(engine.Decision{Outcome: command.OutcomeIssued, Emits: []engine.Emit{{Stream: command.BindingStream(bd.ID), Payload: ev}}}, IssuedMarker{Marker: c.Marker, ExpiresAt: ev.ExpiresAt}), nil
}

// IssueSnapshotMarkers is the daemon's own issuance for the published
// snapshot (spec/desktop.md, "Markers in the snapshot"): every item is
// decided on the same view and the issued ones go in one append; an item
// that is stale or already issued is left out. Outcome "issued" or
// "none"; Value is the number issued.
type IssueSnapshotMarkers struct {
	engine.Answers[int]

	Items []IssueRelayMarker
}

// Decide implements engine.Decider.
func (c IssueSnapshotMarkers) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	var emits []engine.Emit
	for _, it := range c.Items {
		d, err := it.Decide(v, now)
		if err != nil {
			if code := errs.CodeOf(err); code == errs.EINTERNAL || code == errs.ECORRUPT {
				return engine.Decision{}, err
			}
			continue
		}
		emits = append(emits, d.Emits...)
	}
	if len(emits) == 0 {
		return c.Answer(engine.Decision{Outcome: command.OutcomeNone}, 0), nil
	}
	return c.Answer(engine.Decision{Outcome: command.OutcomeIssued, Emits: emits}, len(emits)), nil
}

// BindRelayScanner binds the relay scanner of a bridge thread to one
// rollout file (resolved path, device and inode, measured by the
// caller), or rebinds it when the bridge thread got a new rollout.
// Outcomes "bound", "unchanged".
type BindRelayScanner struct {
	engine.Answers[events.InstallationRelayScannerBound]

	BridgeThreadID string
	RolloutPath    string
	Device, Inode  uint64
}

// Decide implements engine.Decider.
func (c BindRelayScanner) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := command.CheckID("bridge thread id", c.BridgeThreadID); err != nil {
		return engine.Decision{}, err
	}
	if err := command.CheckID("rollout path", c.RolloutPath); err != nil {
		return engine.Decision{}, err
	}
	inst, err := requireInstallation(v)
	if err != nil {
		return engine.Decision{}, err
	}
	cur, ok := inst.RelayScanners[c.BridgeThreadID]
	same := ok && cur.RolloutPath == c.RolloutPath && cur.Device == c.Device && cur.Inode == c.Inode
	if same && cur.DegradedReason == "" && cur.SkippedRecords == 0 {
		return c.Answer(engine.Decision{Outcome: command.OutcomeUnchanged}, cur.InstallationRelayScannerBound), nil
	}
	// A stopped binding is bound again even to the same file, read from
	// the start: the rebind is the operator's word that reading may
	// start over. One that only skipped records resumes where it is:
	// the rebind acknowledges the skip.
	ev := events.InstallationRelayScannerBound{BridgeThreadID: c.BridgeThreadID, RolloutPath: c.RolloutPath,
		Device: c.Device, Inode: c.Inode, Revision: cur.Revision + 1}
	if same && cur.DegradedReason == "" {
		ev.StartOffset, ev.StartLine = cur.Offset, cur.Line
	}
	return c.Answer(engine.Decision{Outcome: command.OutcomeBound, Emits: []engine.Emit{{Stream: installationStream(), Payload: &ev}}}, ev), nil
}

// AdvanceRelayScanner records how far the scanner of a bridge thread has
// read its rollout under binding revision Revision, and the records it
// skipped on the way. Outcomes "advanced", or "unchanged" (appending
// nothing) when the binding was replaced or degraded since, or the
// position is not past the recorded one.
type AdvanceRelayScanner struct {
	BridgeThreadID string
	Revision       uint64
	Offset, Line   int64
	Skipped        []events.RelaySkippedRecord
}

// Decide implements engine.Decider.
func (c AdvanceRelayScanner) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	cur, ok, err := activeScanner(v, c.BridgeThreadID, c.Revision)
	if err != nil {
		return engine.Decision{}, err
	}
	if !ok || c.Offset <= cur.Offset {
		return engine.Decision{Outcome: command.OutcomeUnchanged}, nil
	}
	return engine.Decision{Outcome: command.OutcomeAdvanced, Emits: []engine.Emit{{Stream: installationStream(),
		Payload: &events.InstallationRelayScannerAdvanced{BridgeThreadID: c.BridgeThreadID, Revision: c.Revision, Offset: c.Offset, Line: c.Line,
			Skipped: c.Skipped}}}}, nil
}

// DegradeRelayScanner stops the scanner of a bridge thread (binding
// revision Revision) until a rebind, with a stable reason code. Outcomes
// "degraded", or "unchanged" when it already is or was rebound since.
type DegradeRelayScanner struct {
	BridgeThreadID string
	Revision       uint64
	Reason, Detail string
}

// Decide implements engine.Decider.
func (c DegradeRelayScanner) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	_, ok, err := activeScanner(v, c.BridgeThreadID, c.Revision)
	if err != nil {
		return engine.Decision{}, err
	}
	if !ok {
		return engine.Decision{Outcome: command.OutcomeUnchanged}, nil
	}
	return engine.Decision{Outcome: command.OutcomeDegraded, Emits: []engine.Emit{{Stream: installationStream(),
		Payload: &events.InstallationRelayScannerDegraded{BridgeThreadID: c.BridgeThreadID, Revision: c.Revision, Reason: c.Reason, Detail: c.Detail}}}}, nil
}

// ConsumeRelay applies one relay envelope found in a rollout's tool
// output. The marker must have been issued for the bridge whose rollout
// holds the envelope, unexpired, for exactly the envelope's kind, thread,
// attempt, generation and request; the envelope hash is the replay
// fence. In the same append as the consumption record it applies
// NoteArmPending (arm-pending) or NoteArm (arm-accepted, with the lease
// read from the durable attempt). Outcomes that append nothing:
// "unknown_marker", "wrong_bridge" (the marker was issued for another
// bridge: a line one bridge printed counts only in its own rollout),
// "mismatch", "expired", "already_consumed" (the same envelope again),
// "conflict" (another envelope for a consumed marker), and "refused"
// (the CAS refused: Value says why).
type ConsumeRelay struct {
	engine.Answers[Consumed]

	Config ArmConfig
	// BridgeThreadID is the bridge whose rollout the envelope was read
	// from: the scanner's, or the one the operator names.
	BridgeThreadID string
	Marker         string
	Kind           string
	ThreadID       string
	AttemptID      string
	Generation     uint64
	RequestID      string
	SHA256         string
	RolloutPath    string
	Line           int64
	// Fingerprints are the daemon's own, for NoteArmPending's gate.
	Fingerprints map[string]string
}

// Consumed is ConsumeRelay's value.
type Consumed struct {
	AttemptID string
	// Applied is the CAS's own outcome (arm_pending, already_pending,
	// armed, already_armed) when one ran.
	Applied engine.Outcome
	Reason  string
}

// Decide implements engine.Decider.
func (c ConsumeRelay) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	no := func(outcome engine.Outcome, reason string) (engine.Decision, error) {
		return c.Answer(engine.Decision{Outcome: outcome}, Consumed{Reason: reason}), nil
	}
	if c.Kind == aggregate.RelayPaused {
		return c.consumePause(v, now)
	}
	refs := v.Lookup(index.RelayMarker, c.Marker)
	if len(refs) != 1 {
		return no("unknown_marker", "the marker was never issued")
	}
	a, err := engine.Attempt(v, refs[0].ID)
	if err != nil {
		return engine.Decision{}, err
	}
	if a == nil {
		return no("unknown_marker", "the marker's attempt is gone")
	}
	if out, why := c.refuse(a.Marker(c.Marker), a.SourceThreadID, a.ID, a.Generation, now); out != "" {
		return no(out, why)
	}
	tok := ArmToken{ThreadID: c.ThreadID, AttemptID: c.AttemptID, Generation: c.Generation, BridgeRequestID: c.RequestID}
	var d engine.Decision
	if c.Kind == aggregate.RelayArmPending {
		d, err = NoteArmPending{Config: c.Config, ArmToken: tok, Fingerprints: c.Fingerprints}.Decide(v, now)
	} else {
		d, err = NoteArm{Config: c.Config, ArmToken: tok, LeaseID: a.BridgeArmLeaseID}.Decide(v, now)
	}
	if err != nil {
		if errs.CodeOf(err) == errs.EINTERNAL || errs.CodeOf(err) == errs.ECORRUPT {
			return engine.Decision{}, err
		}
		return c.Answer(engine.Decision{Outcome: command.OutcomeRefused}, Consumed{AttemptID: a.ID, Reason: string(errs.CodeOf(err)) + ": " + err.Error()}), nil
	}
	emits := append(d.Emits, engine.Emit{Stream: command.AttemptStream(a.ID), Payload: &events.AttemptRelayConsumed{Marker: c.Marker, Kind: c.Kind,
		EnvelopeSHA256: c.SHA256, RolloutPath: c.RolloutPath, Line: c.Line}})
	return c.Answer(engine.Decision{Outcome: command.OutcomeConsumed, Emits: emits}, Consumed{AttemptID: a.ID, Applied: d.Outcome}), nil
}

// consumePause applies a paused envelope: NotePaused under the marker's
// generation and request, with the consumption recorded on the binding.
func (c ConsumeRelay) consumePause(v engine.View, now time.Time) (engine.Decision, error) {
	no := func(outcome engine.Outcome, reason string) (engine.Decision, error) {
		return c.Answer(engine.Decision{Outcome: outcome}, Consumed{Reason: reason}), nil
	}
	refs := v.Lookup(index.BindingRelayMarker, c.Marker)
	if len(refs) != 1 {
		return no("unknown_marker", "the marker was never issued (or expired long ago)")
	}
	bd, err := engine.Binding(v, refs[0].ID)
	if err != nil {
		return engine.Decision{}, err
	}
	var m *aggregate.RelayMarker
	if bd != nil {
		m = bd.Marker(c.Marker)
	}
	if m == nil {
		return no("unknown_marker", "the marker was never issued")
	}
	if out, why := c.refuse(m, bd.SourceThreadID, m.AttemptID, m.Generation, now); out != "" {
		return no(out, why)
	}
	d, err := NotePaused{ThreadID: c.ThreadID, Generation: c.Generation, BridgeRequestID: c.RequestID}.Decide(v, now)
	if err != nil {
		if code := errs.CodeOf(err); code == errs.EINTERNAL || code == errs.ECORRUPT {
			return engine.Decision{}, err
		}
		return c.Answer(engine.Decision{Outcome: command.OutcomeRefused}, Consumed{AttemptID: c.AttemptID, Reason: string(errs.CodeOf(err)) + ": " + err.Error()}), nil
	}
	emits := append(d.Emits, engine.Emit{Stream: command.BindingStream(bd.ID), Payload: &events.BindingRelayConsumed{Marker: c.Marker, Kind: c.Kind,
		EnvelopeSHA256: c.SHA256, RolloutPath: c.RolloutPath, Line: c.Line}})
	return c.Answer(engine.Decision{Outcome: command.OutcomeConsumed, Emits: emits}, Consumed{AttemptID: c.AttemptID, Applied: d.Outcome}), nil
}

// activeScanner is the scanner of a bridge thread if it is still bound
// under revision and not degraded: the only one a position or a
// degradation may be recorded for.
func activeScanner(v engine.View, bridgeThreadID string, revision uint64) (aggregate.RelayScanner, bool, error) {
	inst, err := requireInstallation(v)
	if err != nil {
		return aggregate.RelayScanner{}, false, err
	}
	cur, ok := inst.RelayScanners[bridgeThreadID]
	return cur, ok && cur.Revision == revision && cur.DegradedReason == "", nil
}

// refuse says why the envelope may not consume marker m, issued for
// thread, attempt and generation, or returns an empty outcome: only the
// scanner of the marker's own bridge consumes it, with the kind and token
// it was issued for, once, before it expires.
func (c ConsumeRelay) refuse(m *aggregate.RelayMarker, thread, attempt string, generation uint64, now time.Time) (engine.Outcome, string) {
	switch {
	case m == nil:
		return "unknown_marker", "the marker was never issued"
	case m.BridgeThreadID != c.BridgeThreadID:
		return "wrong_bridge", "the marker was issued for bridge thread " + m.BridgeThreadID + ", not " + c.BridgeThreadID + ", whose rollout holds it"
	case m.Kind != c.Kind || thread != c.ThreadID || attempt != c.AttemptID || generation != c.Generation || m.BridgeRequestID != c.RequestID:
		return "mismatch", "the envelope's kind or token is not the one the marker was issued for"
	case m.ConsumedSHA256 == c.SHA256:
		return "already_consumed", "this envelope was consumed at " + m.ConsumedAt.Format(time.RFC3339)
	case m.ConsumedSHA256 != "":
		return "conflict", "another envelope consumed this marker"
	case !now.Before(m.ExpiresAt):
		return "expired", "the marker expired at " + m.ExpiresAt.Format(time.RFC3339)
	}
	return "", ""
}
