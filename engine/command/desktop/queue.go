package desktop

import (
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The queue writeback transport (spec/desktop.md, "The queue
// transport"), experimental: for an installation with no heartbeat
// bridge, cbth hands a bound thread's head to Codex's own queue for the
// thread, which Codex Desktop shares. It is validated live, per
// installation, by a marker queued for a bound thread and seen drained in
// that thread's rollout; nothing is handed off before that.

// MaxQueueValidationWindow bounds how long a live validation of the queue
// transport waits for its marker to be drained.
const MaxQueueValidationWindow = time.Hour

// CheckQueueValidation says whether a live validation of the queue
// transport may queue a marker for thread: the installation is set up
// and the thread bound. The daemon asks before it runs `codex queue`, so
// a refusal queues nothing and appends nothing.
func CheckQueueValidation(v engine.Reader, thread string) error {
	if err := command.CheckID("source thread id", thread); err != nil {
		return err
	}
	inst, err := command.Installation(v)
	if err != nil {
		return err
	}
	if inst == nil {
		return errs.New(errs.ENOTCONF, "no Desktop installation state: repair it first (cbth desktop installation-state repair --read-transport direct_file_read)")
	}
	bd, err := command.BindingOf(v, thread)
	switch {
	case err != nil:
		return err
	case bd == nil || bd.State == fsm.BindingUnbound:
		return errs.New(errs.BindingOrCapabilityInvalid, "thread %s is not bound: a marker is queued only for a bound thread (cbth desktop binding repair --source-thread-id %s)", thread, thread)
	case bd.State == fsm.BindingDegraded:
		return errs.New(errs.BindingOrCapabilityInvalid, "thread %s's binding is degraded (%s): repair it first (cbth desktop binding repair --source-thread-id %s)", thread, bd.DegradedReason, thread)
	}
	return nil
}

// StartQueueValidation records a live validation of the queue transport
// once `codex queue` took its marker: the scanner then watches the
// thread's rollout until the deadline (now + Window). A new validation
// replaces an open one. The Value is the validation.
type StartQueueValidation struct {
	engine.Answers[events.InstallationQueueValidationStarted]

	ThreadID     string
	Marker       string
	QueuedItemID string
	CodexHome    string
	RolloutPath  string
	StartOffset  int64
	Window       time.Duration
}

// Decide implements engine.Decider.
func (c StartQueueValidation) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if c.Window <= 0 || c.Window > MaxQueueValidationWindow {
		return engine.Decision{}, errs.New(errs.EINVAL, "the validation window must be positive and at most %s", MaxQueueValidationWindow)
	}
	if len(c.Marker) < 16 || c.CodexHome == "" || c.RolloutPath == "" {
		return engine.Decision{}, errs.New(errs.EINVAL, "a queue validation needs its marker, the Codex home and the thread's rollout")
	}
	if err := CheckQueueValidation(v, c.ThreadID); err != nil {
		return engine.Decision{}, err
	}
	ev := &events.InstallationQueueValidationStarted{ThreadID: c.ThreadID, Marker: c.Marker, QueuedItemID: c.QueuedItemID,
		CodexHome: c.CodexHome, RolloutPath: c.RolloutPath, StartOffset: c.StartOffset, Deadline: now.Add(c.Window)}
	return c.Answer(engine.Decision{Outcome: command.OutcomeRequested, Emits: []engine.Emit{{Stream: installationStream(), Payload: ev}}}, *ev), nil
}

// ValidateQueueWriteback records the proof of the open validation: its
// marker seen drained in the thread's rollout before the deadline (after
// it, the sweep fails the validation). The same marker again, once
// validated, is already_validated and appends nothing.
type ValidateQueueWriteback struct {
	engine.Answers[events.InstallationQueueWritebackValidated]

	Marker string
	// Fingerprint is the validation fingerprint the daemon observes for
	// the installation's read transport.
	Fingerprint string
}

// Decide implements engine.Decider. The Value is the proof.
func (c ValidateQueueWriteback) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	inst, err := command.Installation(v)
	if err != nil {
		return engine.Decision{}, err
	}
	if inst == nil {
		return engine.Decision{}, errs.New(errs.ENOTCONF, "no Desktop installation state")
	}
	if w := inst.QueueWriteback; w != nil && w.Marker == c.Marker && inst.QueueValidation == nil {
		return c.Answer(engine.Decision{Outcome: command.OutcomeAlreadyValidated}, w.InstallationQueueWritebackValidated), nil
	}
	q := inst.QueueValidation
	switch {
	case q == nil || q.Marker != c.Marker:
		return engine.Decision{}, errs.New(errs.ESTALE, "the marker is not the one of the open queue validation")
	case !now.Before(q.Deadline):
		return engine.Decision{}, errs.New(errs.ESTALE, "the queue validation's window closed at %s", q.Deadline.Format(time.RFC3339))
	}
	proof := &events.InstallationQueueWritebackValidated{ThreadID: q.ThreadID, Marker: q.Marker, QueuedItemID: q.QueuedItemID,
		CodexHome: q.CodexHome, RolloutPath: q.RolloutPath, Fingerprint: c.Fingerprint}
	return c.Answer(engine.Decision{Outcome: command.OutcomeValidated, Emits: []engine.Emit{{Stream: installationStream(), Payload: proof}}}, *proof), nil
}

// FailQueueValidation records a live validation that failed before its
// marker could be watched for: `codex queue` refused it, could not run,
// or did not end in time (Reason, events.Queue*). It voids the proof
// an earlier validation gave and ends an open one.
type FailQueueValidation struct {
	ThreadID     string
	CodexHome    string
	Marker       string // when the marker may be queued (events.QueueUnknown)
	QueuedItemID string
	Reason       string
	Detail       string
}

// Decide implements engine.Decider.
func (c FailQueueValidation) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	switch c.Reason {
	case events.QueueRefused, events.QueueNotRun, events.QueueUnknown:
	default:
		return engine.Decision{}, errs.New(errs.EINVAL, "%q is not a reason a queue validation fails before its window", c.Reason)
	}
	if err := CheckQueueValidation(v, c.ThreadID); err != nil {
		return engine.Decision{}, err
	}
	return engine.Decision{Outcome: command.OutcomeFailed, Emits: []engine.Emit{{Stream: installationStream(),
		Payload: &events.InstallationQueueValidationFailed{ThreadID: c.ThreadID, Marker: c.Marker, QueuedItemID: c.QueuedItemID,
			CodexHome: c.CodexHome, Reason: c.Reason, Detail: c.Detail}}}}, nil
}

// QueueCurrent says why the queue transport's proof does not hold for a
// daemon using codexHome with fingerprint observed ("" when it does): it
// is in use, proven for that fingerprint, and for that Codex home.
func QueueCurrent(inst *aggregate.Installation, observed, codexHome string) string {
	switch {
	case inst == nil || !inst.QueueWritebackValidated():
		return "the queue writeback transport is not validated (cbth desktop validate-queue --source-thread-id T)"
	case inst.WritebackTransport() != WritebackQueue:
		return "the writeback transport in use is " + inst.WritebackTransport() + ", not queue"
	case observed != inst.ValidationFingerprint:
		return "the running cbth's validation fingerprint differs from the validated one (cbth desktop installation-state repair, then cbth desktop validate-queue)"
	case inst.QueueWriteback.CodexHome != codexHome:
		return "the queue transport was validated for the Codex home " + inst.QueueWriteback.CodexHome + ", and this daemon uses " + codexHome + " (cbth desktop validate-queue)"
	}
	return ""
}

// QueueGateOf decides whether a Desktop head may be handed to Codex's
// queue now, on states already read (bd, inst nil when absent): the same
// parking rules as the heartbeat path, the thread bound with a current
// mirror, the queue transport in use and validated for this daemon
// (QueueCurrent), no heartbeat of the thread armed and unproven quiesced,
// and the thread trusted with its own permissions (trust: the thread's,
// else the home's), since a queued item carries no permissions and runs
// as a turn with the thread's own.
func QueueGateOf(b *aggregate.Batch, bd *aggregate.Binding, inst *aggregate.Installation, observed, codexHome, trust string) aggregate.DesktopReadiness {
	r := aggregate.DesktopReadiness{Binding: bd, Installation: inst}
	if reason, park := aggregate.DesktopParkReason(b); reason != "" {
		r.Reason, r.Park = reason, park
		return r
	}
	no := func(reason string) aggregate.DesktopReadiness { r.Reason = reason; return r }
	switch {
	case inst == nil:
		return no("no Desktop installation state (cbth desktop installation-state repair)")
	case bd == nil || bd.State == fsm.BindingUnbound:
		return no("thread not bound (cbth desktop binding repair)")
	case bd.State == fsm.BindingDegraded:
		return no("binding degraded: " + bd.DegradedReason)
	case !bd.MirrorMatches(inst):
		return no("binding mirror does not match the installation state (cbth desktop binding repair)")
	}
	if why := QueueCurrent(inst, observed, codexHome); why != "" {
		return no(why)
	}
	switch {
	case bd.Unquiesced():
		return no("armed generation " + itoa(bd.ArmedGeneration) + " not yet proven quiesced: its caller heartbeat may still wake")
	case trust != events.TrustOwnPermissions:
		return no("the thread is not trusted with its own permissions, and a queued item runs as a turn with them: cbth thread trust --thread-id " + b.SourceThreadID + " --own-permissions")
	}
	r.OK = true
	return r
}

// TrustReader reads the trust the user gave a thread ("" when none).
// Trust is the Codex product's (engine/command/codex's TrustOf), and a
// product stands on the core, never on another: the adapter hands it in.
type TrustReader func(v engine.Reader, thread string) (string, error)

// QueueGate is QueueGateOf on v: the thread's binding and trust (homeTrust
// when the user gave the thread none), and the installation.
func QueueGate(v engine.Reader, b *aggregate.Batch, observed, codexHome, homeTrust string, trustOf TrustReader) (aggregate.DesktopReadiness, error) {
	inst, err := command.Installation(v)
	if err != nil {
		return aggregate.DesktopReadiness{}, err
	}
	bd, err := command.BindingOf(v, b.SourceThreadID)
	if err != nil {
		return aggregate.DesktopReadiness{}, err
	}
	trust, err := trustOf(v, b.SourceThreadID)
	if err != nil {
		return aggregate.DesktopReadiness{}, err
	}
	if trust == "" {
		trust = homeTrust
	}
	return QueueGateOf(b, bd, inst, observed, codexHome, trust), nil
}

// QueueBarrier is the queue route's last check (command.BarrierGate):
// the queue gate again on the state the accept_pending barrier is decided
// on, so a head goes to `codex queue` only while the transport holds.
type QueueBarrier struct {
	BatchID, Observed, CodexHome, HomeTrust string
	TrustOf                                 TrustReader
}

// Barrier implements command.BarrierGate.
func (g QueueBarrier) Barrier(v engine.Reader) ([]engine.Emit, string, error) {
	b, err := engine.Batch(v, g.BatchID)
	if err != nil {
		return nil, "", err
	}
	if b == nil {
		return nil, "no batch " + g.BatchID, nil
	}
	r, err := QueueGate(v, b, g.Observed, g.CodexHome, g.HomeTrust, g.TrustOf)
	if err != nil || !r.OK {
		return nil, r.Reason, err
	}
	return nil, "", nil
}

// Record implements command.BarrierGate: the queue gate reads nothing it
// records.
func (g QueueBarrier) Record() engine.Decider { return nothing{} }

// nothing appends nothing.
type nothing struct{}

func (nothing) Decide(engine.View, time.Time) (engine.Decision, error) {
	return engine.Decision{Outcome: command.OutcomeUnchanged}, nil
}
