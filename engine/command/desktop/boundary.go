package desktop

import (
	"encoding/json"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// NoteBoundaryCrossed is `cbth desktop note-boundary-crossed`, the caller
// heartbeat's gated continuation helper. Every gate is checked before
// anything is appended:
//
//   - the head batch of the thread is BatchID, open and automatic, its
//     current attempt AttemptID at Generation, materialized at
//     ExpectedRevision, and its continuation boundary not crossed;
//   - the attempt is durably in cooldown (armed) and the binding's
//     armed_generation is Generation;
//   - the binding is bound, its mirror's transport generation and
//     fingerprint are the installation's, and the installation's read
//     transport and writeback capabilities are validated for the
//     fingerprint the daemon observes.
//
// On success, in one append: the batch is crossed_unacknowledged,
// manual_resolution_only and closed with handoff_recorded, with its
// boundary recovery envelope; the attempt closes; the FIFO moves on. The
// value carries the echoed tokens and the inline continuation. Otherwise
// the error's code is exactly one of the five classes (errs
// TransientNotReady ... UnknownAfterHelperFailure; the last is the
// client's, when the call failed after it was sent).
type NoteBoundaryCrossed struct {
	engine.Answers[Handoff]

	Config           ArmConfig
	ThreadID         string
	BatchID          string
	AttemptID        string
	Generation       uint64
	ExpectedRevision uint64
	// Fingerprints are the validation fingerprints the calling cbth
	// observes, by read transport.
	Fingerprints map[string]string
	// Transport is the writeback transport the caller crossed through:
	// WritebackMCP needs the mcp proof, any other the operator's
	// writeback_capability (spec/desktop.md, "Writeback transports").
	Transport string
}

// The writeback transports (spec/desktop.md, "Writeback transports"):
// how a heartbeat's writeback reaches the daemon.
const (
	WritebackMCP    = "mcp"    // cbth's MCP tools, which Codex runs outside the sandbox
	WritebackRelay  = "relay"  // the transcript relay (bridge steps only)
	WritebackDirect = "direct" // the helpers on a socket the heartbeat reaches
	// WritebackQueue involves no heartbeat: cbth hands the head to Codex's
	// own queue for the thread (experimental; "The queue transport").
	WritebackQueue = aggregate.WritebackQueue
)

// Handoff is what a fresh note-boundary-crossed success answers.
type Handoff struct {
	SourceThreadID   string
	BatchID          string
	AttemptID        string
	Generation       uint64
	SnapshotRevision uint64
	Summary          string
	JobIDs           []string
	ArtifactIDs      []string
	Envelope         events.RecoveryEnvelope
}

// Decide implements engine.Decider.
func (c NoteBoundaryCrossed) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	for _, f := range []struct{ what, v string }{{"source thread id", c.ThreadID}, {"batch id", c.BatchID}, {"attempt id", c.AttemptID}} {
		if err := command.CheckID(f.what, f.v); err != nil {
			return engine.Decision{}, err
		}
	}
	b, a, err := c.gate(v)
	if err != nil {
		return engine.Decision{}, err
	}
	env, size, err := c.envelope(v, now, b)
	if err != nil {
		return engine.Decision{}, err
	}
	emits, err := c.Config.Delivery.CloseWith(v, now, b, engine.Emit{Stream: command.BatchStream(b.ID), Payload: &events.BatchHandoffRecorded{
		AttemptID: a.ID, Generation: a.Generation, SnapshotRevision: b.SnapshotRevision, Envelope: env, EnvelopeBytes: size}}, command.CloseHandoffRecorded)
	if err != nil {
		return engine.Decision{}, err
	}
	return c.Answer(engine.Decision{Outcome: command.OutcomeCrossed, Emits: emits}, Handoff{SourceThreadID: b.SourceThreadID, BatchID: b.ID,
		AttemptID: a.ID, Generation: a.Generation, SnapshotRevision: b.SnapshotRevision, Summary: b.Summary,
		JobIDs: b.JobIDs, ArtifactIDs: b.ArtifactIDs, Envelope: env}), nil
}

// gate checks every precondition, in the order of the classes a caller
// acts on: the batch's own fate first (crossed before, superseded), then
// the binding and installation, then whether the wake is early.
func (c NoteBoundaryCrossed) gate(v engine.Reader) (*aggregate.Batch, *aggregate.Attempt, error) {
	stale := func(format string, args ...any) error { return errs.New(errs.StaleOrSuperseded, format, args...) }
	invalid := func(format string, args ...any) error {
		return errs.New(errs.BindingOrCapabilityInvalid, format, args...)
	}
	b, err := engine.Batch(v, c.BatchID)
	if err != nil {
		return nil, nil, err
	}
	if b == nil || b.SourceThreadID != c.ThreadID {
		return nil, nil, stale("no batch %s on thread %s", c.BatchID, c.ThreadID)
	}
	if b.ContinuationBoundaryState != aggregate.BoundaryNot || b.CloseReason == command.CloseHandoffRecorded {
		return nil, nil, errs.New(errs.AlreadyCrossed, "batch %s crossed its continuation boundary at %s: recover it with cbth batch inspect --batch-id %s",
			b.ID, b.ContinuationBoundaryAt.Format(time.RFC3339), b.ID)
	}
	if !b.Open() {
		return nil, nil, stale("batch %s is closed (%s)", b.ID, b.CloseReason)
	}
	if !b.IsHead {
		return nil, nil, stale("batch %s is not the head of thread %s", b.ID, c.ThreadID)
	}
	if b.HeadAttemptID != c.AttemptID || b.Generation != c.Generation {
		return nil, nil, stale("batch %s is at attempt %s, generation %d", b.ID, b.HeadAttemptID, b.Generation)
	}
	if b.SnapshotRevision != c.ExpectedRevision {
		return nil, nil, stale("batch %s is materialized at revision %d, not %d", b.ID, b.SnapshotRevision, c.ExpectedRevision)
	}
	if b.ReplayPolicy != aggregate.ReplayAutomatic {
		return nil, nil, stale("batch %s is %s: %s", b.ID, b.ReplayPolicy, b.ReplayPolicyReason)
	}
	bd, err := command.BindingOf(v, c.ThreadID)
	if err != nil {
		return nil, nil, err
	}
	inst, err := command.Installation(v)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case bd == nil || bd.State != fsm.BindingBound:
		return nil, nil, invalid("thread %s is not bound (%s)", c.ThreadID, bindingWhy(bd))
	case inst == nil:
		return nil, nil, invalid("no Desktop installation state")
	case bd.Mirror.ReadTransportGeneration != inst.ReadTransportGeneration || bd.Mirror.ReadTransport != inst.ReadTransport:
		return nil, nil, invalid("the binding's mirror is read transport generation %d, the installation's %d", bd.Mirror.ReadTransportGeneration, inst.ReadTransportGeneration)
	case bd.Mirror.ValidationFingerprint != inst.ValidationFingerprint:
		return nil, nil, invalid("the binding's validation fingerprint is not the installation's")
	case inst.ReadTransportCapability != events.CapValidated:
		return nil, nil, invalid("read_transport_capability is %s", inst.ReadTransportCapability)
	case c.Transport == WritebackMCP && !inst.MCPWritebackValidated():
		return nil, nil, invalid("the mcp writeback transport is not validated for this cbth (cbth desktop validate-mcp)")
	case c.Transport != WritebackMCP && inst.WritebackCapability != events.CapValidated:
		return nil, nil, invalid("writeback_capability is %s", inst.WritebackCapability)
	case observed(c.Fingerprints, inst) != inst.ValidationFingerprint:
		return nil, nil, invalid("the running cbth's validation fingerprint is not the validated one")
	}
	a, err := engine.Attempt(v, c.AttemptID)
	if err != nil {
		return nil, nil, err
	}
	if a == nil {
		return nil, nil, stale("no attempt %s", c.AttemptID)
	}
	switch a.State {
	case fsm.AttemptCooldown:
	case fsm.AttemptPrepared, fsm.AttemptArmPending:
		return nil, nil, errs.New(errs.TransientNotReady, "attempt %s is %s: not armed yet", a.ID, a.State)
	default:
		return nil, nil, stale("attempt %s is %s", a.ID, a.State)
	}
	if bd.ArmedGeneration != c.Generation {
		return nil, nil, stale("the binding is armed for generation %d, not %d", bd.ArmedGeneration, c.Generation)
	}
	return b, a, nil
}

func bindingWhy(bd *aggregate.Binding) string {
	if bd == nil {
		return "no binding"
	}
	if bd.DegradedReason != "" && bd.State == fsm.BindingDegraded {
		return "degraded: " + bd.DegradedReason
	}
	return string(bd.State)
}

// envelope builds the boundary recovery envelope of b closing now. The
// summary is kept inline up to RecoveryInlineBytes; beyond, the envelope
// holds its first bytes and a reference to the whole, which the batch
// keeps (the log has it). Its retention is the latest of the post-close
// TTL, every linked artifact's retention and the operator pin.
func (c NoteBoundaryCrossed) envelope(v engine.Reader, now time.Time, b *aggregate.Batch) (events.RecoveryEnvelope, int64, error) {
	env := events.RecoveryEnvelope{BatchID: b.ID, SourceThreadID: b.SourceThreadID, AttemptID: b.HeadAttemptID,
		Generation: b.Generation, SnapshotRevision: b.SnapshotRevision, ClosedAt: now, CloseReason: command.CloseHandoffRecorded,
		InlinePayloadSummary: b.Summary, ArtifactIDs: b.ArtifactIDs, CreatedAt: now}
	if limit := c.Config.Desktop.RecoveryInlineBytes; limit > 0 && int64(len(b.Summary)) > limit {
		env.InlinePayloadSummary = truncateUTF8(b.Summary, int(limit))
		env.InlinePayloadRef = "batch:" + b.ID + "#summary"
	}
	retention := command.Latest(now.Add(c.Config.Delivery.PostCloseTTL), b.BoundaryRecoveryOperatorPin)
	for _, id := range b.ArtifactIDs {
		a, err := engine.Artifact(v, id)
		if err != nil {
			return env, 0, err
		}
		if a == nil {
			continue
		}
		env.ArtifactManifestRefs = append(env.ArtifactManifestRefs, a.ManifestPath)
		retention = command.Latest(retention, a.MinRetentionUntil, now.Add(c.Config.Delivery.PostCloseTTL), a.OperatorPinUntil)
	}
	env.RetentionUntil = retention
	raw, err := json.Marshal(env)
	if err != nil {
		return env, 0, errs.Wrap(errs.EINTERNAL, err, "encode the recovery envelope")
	}
	return env, int64(len(raw)), nil
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n]
}
