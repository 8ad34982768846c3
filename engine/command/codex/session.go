// Package codex holds the commands of the Codex CLI target's managed
// sessions and the shared app-server instances their epochs number
// (spec/codex-cli.md, "Managed sessions"): attach, detach, permission
// readings, recovery. The adapter (adapters/codex/sessions) talks to
// Codex; these decide what it means. They stand on the core
// (engine/command), never the other way.
package codex

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// How a session came to be bound to its thread.
const (
	ModeBindThread = "bind_thread" // `cbth cli run --bind-thread-id`
	ModeNewThread  = "new_thread"  // `cbth cli run --new-thread`, bound from thread/started
)

// Values of a profile dimension.
const (
	ProfileAuto  = "auto"
	ProfileTrue  = "true"
	ProfileFalse = "false"
)

// Outcomes of AttachSession.
const (
	SessionCreatedOutcome  engine.Outcome = "created"
	SessionAttachedOutcome engine.Outcome = "attached"
	SessionReplacedOutcome engine.Outcome = "replaced" // the old session retired, a new one created
	SessionRefused         engine.Outcome = "refused"
)

// Reasons an instance ended (events.AppServerExited).
const (
	ExitExited         = "exited"
	ExitStopped        = "stopped"
	ExitDaemonRestart  = "daemon_restarted"
	ExitReplaced       = "replaced"
	epochAppRestarted  = "app-server restarted: a new instance is a new event stream"
	epochDaemonRestart = "daemon restarted: the event stream cannot be proven continuous"
)

// CheckProfile validates a bootstrap profile and spells an empty dimension
// "auto".
func CheckProfile(p events.SessionProfile) (events.SessionProfile, error) {
	for _, v := range []*string{&p.Approval, &p.Network, &p.WriteAccess} {
		if *v == "" {
			*v = ProfileAuto
		}
		if *v != ProfileAuto && *v != ProfileTrue && *v != ProfileFalse {
			return p, errs.New(errs.EINVAL, "a session permission is auto, true or false, not %q", *v)
		}
	}
	return p, nil
}

func profileValues(p events.SessionProfile) [3]string {
	return [3]string{p.Approval, p.Network, p.WriteAccess}
}

// startupOf is the cap a profile fixes at creation: its explicit
// dimensions; "auto" ones stay unknown until a trusted reading pins them.
func startupOf(p events.SessionProfile) events.Permissions {
	var out events.Permissions
	for i, v := range profileValues(p) {
		if v != ProfileAuto {
			out = out.Set(events.DimensionNames[i], events.AllowOf(v == ProfileTrue))
		}
	}
	return out
}

// profileMismatch lists the dimensions where an explicit request differs
// from a session's cap. "auto" matches any cap; an explicit value matches
// only the same known value.
func profileMismatch(req events.SessionProfile, s *aggregate.Session) []string {
	var out []string
	st := s.Startup.Values()
	for i, v := range profileValues(req) {
		if v == ProfileAuto {
			continue
		}
		if st[i] != events.AllowOf(v == ProfileTrue) {
			out = append(out, events.DimensionNames[i])
		}
	}
	return out
}

// Reading is one permission snapshot of a thread, parsed by the adapter
// from a thread/resume answer: Current holds what it proves (unknown where
// it could not be parsed), Snapshot the raw fields for audit.
type Reading struct {
	Current  events.Permissions
	Snapshot events.RawJSON
}

// Drift describes a reading that differs from the startup cap, for the
// stderr warning and the audit record.
type Drift struct {
	Startup    events.Permissions `json:"startup"`
	Current    events.Permissions `json:"current"`
	Effective  events.Permissions `json:"effective"`
	Direction  string             `json:"direction"`
	Dimensions []string           `json:"dimensions"`
	// Recorded says this reading appended the audit event (the drift is
	// new or changed); an unchanged drift is reported but not recorded
	// again.
	Recorded bool `json:"recorded"`
}

// Warning is the drift as one line for people.
func (d *Drift) Warning(session string) string {
	return fmt.Sprintf("managed session %s: permissions drifted (%s: %s); startup %s, current %s, effective %s",
		session, d.Direction, strings.Join(d.Dimensions, ", "), permString(d.Startup), permString(d.Current), permString(d.Effective))
}

func permString(p events.Permissions) string {
	var parts []string
	for i, v := range p.Values() {
		parts = append(parts, events.DimensionNames[i]+"="+v.String())
	}
	return strings.Join(parts, " ")
}

// driftOf compares a reading with the cap: the dimensions where both are
// known and differ, and whether the reading is tighter, looser or both.
func driftOf(startup, current events.Permissions) (dims []string, direction string) {
	st, cur := startup.Values(), current.Values()
	tighter, looser := false, false
	for i := range st {
		if !st[i].Known() || !cur[i].Known() || st[i] == cur[i] {
			continue
		}
		dims = append(dims, events.DimensionNames[i])
		if cur[i] == events.AllowFalse {
			tighter = true
		} else {
			looser = true
		}
	}
	switch {
	case tighter && looser:
		direction = "mixed"
	case tighter:
		direction = "tightened"
	case looser:
		direction = "widened"
	}
	return dims, direction
}

// Observation is what recording a reading gives the caller.
type Observation struct {
	SessionID string             `json:"managed_session_id"`
	Epoch     uint64             `json:"session_epoch"`
	Revision  uint64             `json:"permission_snapshot_revision"`
	Startup   events.Permissions `json:"startup"`
	Current   events.Permissions `json:"current"`
	Effective events.Permissions `json:"effective"`
	Pinned    []string           `json:"pinned,omitempty"`
	Drift     *Drift             `json:"drift,omitempty"`
}

// observe returns the events recording reading r on session s (as it will
// be once the events before them apply): the reading, the startup pins it
// sets, and a drift audit record when the drift is new or changed.
func observe(s *aggregate.Session, r Reading) ([]engine.Emit, Observation) {
	startup := s.Startup
	cur := r.Current.Values()
	var pinned []string
	for i, v := range profileValues(s.Profile) {
		name := events.DimensionNames[i]
		if v == ProfileAuto && !startup.Values()[i].Known() && cur[i].Known() {
			startup = startup.Set(name, cur[i])
			pinned = append(pinned, name)
		}
	}
	st := sessionStream(s.ID)
	rev := s.SnapshotRevision + 1
	emits := []engine.Emit{{Stream: st, Payload: &events.SessionPermissionObserved{
		Current: r.Current, Snapshot: r.Snapshot, Revision: rev, Epoch: s.Epoch, Pinned: pinned}}}
	obs := Observation{SessionID: s.ID, Epoch: s.Epoch, Revision: rev, Startup: startup, Current: r.Current,
		Effective: startup.And(r.Current), Pinned: pinned}
	if dims, dir := driftOf(startup, r.Current); len(dims) > 0 {
		obs.Drift = &Drift{Startup: startup, Current: r.Current, Effective: obs.Effective, Direction: dir, Dimensions: dims}
		if dir != s.DriftDirection || !slices.Equal(dims, s.DriftDimensions) {
			obs.Drift.Recorded = true
			emits = append(emits, engine.Emit{Stream: st, Payload: &events.SessionPermissionDrifted{
				Startup: startup, Current: r.Current, Effective: obs.Effective, Direction: dir, Dimensions: dims, Revision: rev}})
		}
	}
	return emits, obs
}

func sessionStream(id string) events.StreamID {
	return events.StreamID{Kind: events.KindSession, ID: id}
}
func appServerStream(nonce string) events.StreamID {
	return events.StreamID{Kind: events.KindAppServer, ID: nonce}
}

// SessionOf returns a thread's non-retired session, or nil.
func SessionOf(v engine.Reader, thread string) (*aggregate.Session, error) {
	return command.Unique(v, engine.Session, index.SessionByThread, thread, "non-retired sessions")
}

// The transports of the cli target: the daemon's shared app-server
// ("" in the log) and the Codex daemon a plain `codex` runs.
const (
	TransportShared      = ""
	TransportCodexDaemon = fsm.SessionModeCodexDaemon
)

// RunningAppServer returns the instance of transport recorded running, or
// nil.
func RunningAppServer(v engine.Reader, transport string) (*aggregate.AppServer, error) {
	refs := v.Lookup(index.AppServerRunning, transport)
	if len(refs) == 0 {
		return nil, nil
	}
	return engine.AppServer(v, refs[len(refs)-1].ID)
}

func runningInstance(v engine.Reader, transport, nonce string) error {
	a, err := RunningAppServer(v, transport)
	if err != nil {
		return err
	}
	if a == nil || a.ID != nonce {
		return errs.New(errs.ESTALE, "codex app-server instance %s is not the running one; its event stream ended", nonce)
	}
	return nil
}

// manualBatch returns an open batch of the thread that waits for manual
// resolution, or "". Any target's: an operator must settle what is
// pending on the thread before a new automatic path opens on it.
func manualBatch(v engine.Reader, thread string) (string, error) {
	open, err := command.OpenBatches(v, thread)
	if err != nil {
		return "", err
	}
	for _, b := range open {
		if b.ReplayPolicy == aggregate.ReplayManual {
			return b.ID, nil
		}
	}
	return "", nil
}

// AttachResult is AttachSession's value.
type AttachResult struct {
	SessionID string
	// Retired is the session a changed profile replaced.
	Retired string
	// Refusal is set when Outcome is SessionRefused: the stable code and
	// why. A refusal may still append (the session parked).
	Refusal *errs.Error
	Obs     *Observation
}

// AttachSession is attach-or-create for a foreground `cbth cli run`: it
// binds the thread's one non-retired session to a live foreground, or
// creates one. Mode bind_thread comes with a Reading of the thread taken
// on Instance; new_thread is bound from thread/started before the thread
// can be read. Refusals, in order: a manual batch of the thread is
// unresolved (session_pending_manual_resolution; the session parks); a
// foreground is already attached (EBUSY, or session_profile_mismatch when
// the profile differs too); the profile differs while the thread has a
// delivery in flight (session_profile_mismatch). A profile that differs
// with nothing pending retires the old session and creates a new one: a
// session's profile is never rewritten in place. There is never a second
// non-retired session for one thread.
type AttachSession struct {
	engine.Answers[AttachResult]

	Mode     string
	ThreadID string
	Profile  events.SessionProfile
	Instance string
	Reading  *Reading
}

// Decide implements engine.Decider.
func (c AttachSession) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if c.Mode != ModeBindThread && c.Mode != ModeNewThread {
		return engine.Decision{}, errs.New(errs.EINVAL, "session mode %q is not %s or %s", c.Mode, ModeBindThread, ModeNewThread)
	}
	if err := command.CheckID("thread id", c.ThreadID); err != nil {
		return engine.Decision{}, err
	}
	prof, err := CheckProfile(c.Profile)
	if err != nil {
		return engine.Decision{}, err
	}
	if err := runningInstance(v, TransportShared, c.Instance); err != nil {
		return engine.Decision{}, err
	}
	s, err := SessionOf(v, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	manual, err := manualBatch(v, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	if manual != "" {
		var emits []engine.Emit
		if s != nil && s.State != fsm.SessionParked && s.State != fsm.SessionLive {
			emits = append(emits, engine.Emit{Stream: sessionStream(s.ID), Payload: &events.SessionParked{BatchID: manual}})
		}
		return c.refuse(emits, s, errs.SessionPendingManualResolution,
			"thread %s has batch %s waiting for manual resolution; close it (`cbth batch close-head`) before attaching", c.ThreadID, manual)
	}
	if s != nil && s.State == fsm.SessionParked {
		// Parked without a manual batch: the batch was resolved since.
		// Unpark first; the attach below then goes on from detached.
		return c.attach(v, now, prof, s, []engine.Emit{{Stream: sessionStream(s.ID), Payload: &events.SessionUnparked{}}}, fsm.SessionDetached)
	}
	return c.attach(v, now, prof, s, nil, "")
}

func (c AttachSession) attach(v engine.View, now time.Time, prof events.SessionProfile, s *aggregate.Session, emits []engine.Emit, status fsm.SessionState) (engine.Decision, error) {
	if s == nil {
		return c.create(v, prof, "", emits)
	}
	if status == "" {
		status = s.State
	}
	diff := profileMismatch(prof, s)
	if status == fsm.SessionLive {
		if len(diff) > 0 {
			return c.refuse(emits, s, errs.SessionProfileMismatch,
				"session %s of thread %s has a foreground attached and another profile (%s differ)", s.ID, c.ThreadID, strings.Join(diff, ", "))
		}
		return c.refuse(emits, s, errs.EBUSY, "session %s of thread %s already has a foreground `cbth cli run` attached", s.ID, c.ThreadID)
	}
	if len(diff) > 0 {
		a, err := command.LiveAttempt(v, c.ThreadID)
		if err != nil {
			return engine.Decision{}, err
		}
		if a != nil {
			return c.refuse(emits, s, errs.SessionProfileMismatch,
				"session %s of thread %s has another profile (%s differ) and attempt %s is %s; it cannot retire until that delivery is resolved",
				s.ID, c.ThreadID, strings.Join(diff, ", "), a.ID, a.State)
		}
		emits = append(emits, engine.Emit{Stream: sessionStream(s.ID), Payload: &events.SessionRetired{
			Reason: "replaced: the requested profile differs in " + strings.Join(diff, ", ")}})
		return c.create(v, prof, s.ID, emits)
	}
	st := *s
	emits = append(emits, engine.Emit{Stream: sessionStream(s.ID), Payload: &events.SessionAttached{}})
	if s.AppServerInstance != c.Instance {
		// Every instance start advances every session's epoch, so this
		// only guards the rule: a foreground on another stream is another
		// epoch.
		st.Epoch++
		st.AppServerInstance = c.Instance
		st.Current = events.Permissions{}
		emits = append(emits, engine.Emit{Stream: sessionStream(s.ID), Payload: &events.SessionEpochAdvanced{
			Epoch: st.Epoch, Reason: "reattached on another app-server instance", AppServerInstance: c.Instance}})
	}
	res := AttachResult{SessionID: s.ID}
	if c.Reading != nil {
		more, obs := observe(&st, *c.Reading)
		emits = append(emits, more...)
		res.Obs = &obs
	}
	return c.Answer(engine.Decision{Outcome: SessionAttachedOutcome, Emits: emits}, res), nil
}

func (c AttachSession) refuse(emits []engine.Emit, s *aggregate.Session, code errs.Code, format string, args ...any) (engine.Decision, error) {
	res := AttachResult{Refusal: &errs.Error{Code: code, Message: fmt.Sprintf(format, args...)}}
	if s != nil {
		res.SessionID = s.ID
	}
	return c.Answer(engine.Decision{Outcome: SessionRefused, Emits: emits}, res), nil
}

func (c AttachSession) create(v engine.View, prof events.SessionProfile, replaces string, emits []engine.Emit) (engine.Decision, error) {
	id := v.NewID()
	created := &events.SessionCreated{BoundThreadID: c.ThreadID, Mode: c.Mode, Profile: prof, Startup: startupOf(prof),
		AppServerInstance: c.Instance, Replaces: replaces}
	emits = append(emits, engine.Emit{Stream: sessionStream(id), Payload: created})
	res := AttachResult{SessionID: id, Retired: replaces}
	if c.Reading != nil {
		st := &aggregate.Session{BoundThreadID: c.ThreadID, Profile: prof, Startup: created.Startup, Epoch: 1, AppServerInstance: c.Instance}
		st.ID = id
		more, obs := observe(st, *c.Reading)
		emits = append(emits, more...)
		res.Obs = &obs
	}
	out := SessionCreatedOutcome
	if replaces != "" {
		out = SessionReplacedOutcome
	}
	return c.Answer(engine.Decision{Outcome: out, Emits: emits}, res), nil
}

// ObservePermissions records a reading of the session's thread taken on
// Instance, the stream the session's current epoch numbers: the current
// permissions (valid for this epoch only), the startup pins of "auto"
// dimensions read for the first time, and a drift audit record. The
// adapter calls it before every automatic turn/start; its Observation's
// Effective is what the turn may be given.
type ObservePermissions struct {
	engine.Answers[Observation]

	SessionID string
	Instance  string
	Reading   Reading
}

// Decide implements engine.Decider.
func (c ObservePermissions) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	emits, obs, refused, err := c.observe(v)
	if err == nil {
		err = refused
	}
	if err != nil {
		return engine.Decision{}, err
	}
	return c.Answer(engine.Decision{Outcome: command.OutcomeObserved, Emits: emits}, obs), nil
}

// observe is ObservePermissions on v: the events and the observation, or
// why the reading cannot be recorded on the session as it is (refused;
// err is for a failed read).
func (c ObservePermissions) observe(v engine.Reader) (emits []engine.Emit, obs Observation, refused, err error) {
	s, err := sessionByID(v, c.SessionID)
	if err != nil {
		return nil, Observation{}, nil, err
	}
	if refused := c.Refusal(s); refused != nil {
		return nil, Observation{}, refused, nil
	}
	emits, obs = observe(s, c.Reading)
	return emits, obs, nil, nil
}

// Refusal says why the reading cannot be recorded on session s (nil when
// it can): the session's permissions are read only while it is live or
// detached, and only on the instance its epoch numbers.
func (c ObservePermissions) Refusal(s *aggregate.Session) error {
	if s.State != fsm.SessionLive && s.State != fsm.SessionDetached {
		return errs.New(errs.ESTATE, "session %s is %s; its permissions are not read", s.ID, s.State)
	}
	if s.AppServerInstance != c.Instance {
		return errs.New(errs.ESTALE, "session %s is at epoch %d on instance %s; a reading from instance %s proves nothing about it",
			s.ID, s.Epoch, s.AppServerInstance, c.Instance)
	}
	return nil
}

// Observed is what recording the reading on session s would give, as
// ObservePermissions would record it now: read, not recorded.
func (c ObservePermissions) Observed(s *aggregate.Session) Observation {
	_, obs := observe(s, c.Reading)
	return obs
}

// GatedReading is a permission reading not recorded yet, and the
// effective permissions the Codex CLI target's gate let a delivery
// through on. It is that delivery's command.BarrierGate: recorded with
// the barrier, in the same append, and the start is refused
// (not_eligible) when, on the state the barrier is decided on, the
// reading would not give the effective permissions that were gated.
type GatedReading struct {
	ObservePermissions
	Effective events.Permissions
}

// Barrier implements command.BarrierGate.
func (g *GatedReading) Barrier(v engine.Reader) ([]engine.Emit, string, error) {
	observed, obs, refused, err := g.observe(v)
	switch {
	case err != nil:
		return nil, "", err
	case refused != nil:
		return nil, refused.Error(), nil
	case obs.Effective != g.Effective:
		return nil, "the session's permissions moved since its thread was read", nil
	}
	return observed, "", nil
}

// Record implements command.BarrierGate: the reading, recorded alone.
func (g *GatedReading) Record() engine.Decider { return g.ObservePermissions }

func sessionByID(v engine.Reader, id string) (*aggregate.Session, error) {
	s, err := engine.Session(v, id)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, errs.New(errs.ENOENT, "no managed session %s", id)
	}
	return s, nil
}

// DetachSession records that a session's foreground left. The live part
// ends: detached, or parked when a manual batch of the thread is
// unresolved, or retired when the thread never had a turn (a new thread
// before its first turn exists nowhere and can never be resumed).
type DetachSession struct {
	SessionID         string
	Reason            string
	NeverMaterialized bool
}

// Decide implements engine.Decider.
func (c DetachSession) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	s, err := sessionByID(v, c.SessionID)
	if err != nil {
		return engine.Decision{}, err
	}
	if s.State != fsm.SessionLive {
		return engine.Decision{Outcome: command.Already(s.State)}, nil
	}
	return detach(v, s, c.Reason, c.NeverMaterialized)
}

func detach(v engine.Reader, s *aggregate.Session, reason string, never bool) (engine.Decision, error) {
	st := sessionStream(s.ID)
	if never {
		return engine.Decision{Outcome: command.OutcomeRetired, Emits: []engine.Emit{{Stream: st, Payload: &events.SessionRetired{
			Reason: "the new thread never had a turn, so it cannot be resumed"}}}}, nil
	}
	manual, err := manualBatch(v, s.BoundThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	if manual != "" {
		return engine.Decision{Outcome: command.OutcomeParked, Emits: []engine.Emit{{Stream: st, Payload: &events.SessionParked{BatchID: manual}}}}, nil
	}
	return engine.Decision{Outcome: command.OutcomeDetached, Emits: []engine.Emit{{Stream: st, Payload: &events.SessionDetached{Reason: reason}}}}, nil
}

// MarkSessionStale records that a session's thread can no longer be
// reached through the shared app-server (another process holds it, or it
// is gone). Reattaching with a fresh reading makes it live again.
type MarkSessionStale struct {
	SessionID string
	Reason    string
}

// StaleProof is Codex's answer proving a session's thread unreachable,
// as the CLI target's gate hands it forward with a head that does not
// go: the scheduler records it (Record), and no delivery starts on it.
type StaleProof struct{ MarkSessionStale }

// Barrier implements command.BarrierGate: a thread proven unreachable
// takes no delivery.
func (p *StaleProof) Barrier(engine.Reader) ([]engine.Emit, string, error) {
	return nil, "the session's thread is unreachable: " + p.Reason, nil
}

// Record implements command.BarrierGate.
func (p *StaleProof) Record() engine.Decider { return p.MarkSessionStale }

// Decide implements engine.Decider.
func (c MarkSessionStale) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	s, err := sessionByID(v, c.SessionID)
	if err != nil {
		return engine.Decision{}, err
	}
	if s.State != fsm.SessionLive && s.State != fsm.SessionDetached {
		return engine.Decision{Outcome: command.Already(s.State)}, nil
	}
	return engine.Decision{Outcome: command.OutcomeStale, Emits: []engine.Emit{{Stream: sessionStream(s.ID), Payload: &events.SessionStale{Reason: c.Reason}}}}, nil
}

// nonRetired lists every non-retired session.
func nonRetired(v engine.Reader) ([]*aggregate.Session, error) {
	var out []*aggregate.Session
	for _, r := range v.Scan(index.SessionByThread, "") {
		s, err := sessionByID(v, r.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// SettleSessions parks every session whose live part ended while a manual
// batch of its thread is unresolved, and unparks every parked one whose
// batches are all resolved. The daemon runs it after whatever may park or
// close a batch (sweeps, deliveries, operator closes).
type SettleSessions struct{}

// Decide implements engine.Decider.
func (SettleSessions) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	var emits []engine.Emit
	ss, err := nonRetired(v)
	if err != nil {
		return engine.Decision{}, err
	}
	for _, s := range ss {
		manual, err := manualBatch(v, s.BoundThreadID)
		if err != nil {
			return engine.Decision{}, err
		}
		switch {
		case manual != "" && (s.State == fsm.SessionDetached || s.State == fsm.SessionStale):
			emits = append(emits, engine.Emit{Stream: sessionStream(s.ID), Payload: &events.SessionParked{BatchID: manual}})
		case manual == "" && s.State == fsm.SessionParked:
			emits = append(emits, engine.Emit{Stream: sessionStream(s.ID), Payload: &events.SessionUnparked{}})
		}
	}
	return engine.Decision{Outcome: engine.Outcome(fmt.Sprintf("settled %d", len(emits))), Emits: emits}, nil
}

// SessionsUnsettled reports whether SettleSessions would do anything: a
// read the daemon does before asking the writer.
func SessionsUnsettled(v engine.Reader) (bool, error) {
	d, err := SettleSessions{}.Decide(readOnly{v}, time.Time{})
	return len(d.Emits) > 0, err
}

// readOnly is a View for decisions that create nothing.
type readOnly struct{ engine.Reader }

func (readOnly) NewID() string   { return "" }
func (readOnly) NextSeq() uint64 { return 0 }

// RecoverSessions runs at daemon start-up: a new daemon has no foreground
// attached and no app-server running yet, whatever the log says the last
// one left. Every instance recorded running ended with that daemon
// (daemon_restarted); every live session's foreground is gone.
type RecoverSessions struct{}

// Decide implements engine.Decider.
func (RecoverSessions) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	var emits []engine.Emit
	ended := map[string]bool{}
	for _, tr := range []string{TransportShared, TransportCodexDaemon} {
		for _, r := range v.Lookup(index.AppServerRunning, tr) {
			emits = append(emits, engine.Emit{Stream: appServerStream(r.ID), Payload: &events.AppServerExited{Reason: ExitDaemonRestart}})
			ended[r.ID] = true
		}
	}
	ss, err := nonRetired(v)
	if err != nil {
		return engine.Decision{}, err
	}
	for _, s := range ss {
		if ended[s.AppServerInstance] {
			// Whatever waited on the stream the last daemon followed lost
			// it with that daemon: parked now, never resent.
			lost, err := lostContinuity(v, s)
			if err != nil {
				return engine.Decision{}, err
			}
			emits = append(emits, lost...)
		}
		if s.State != fsm.SessionLive {
			continue
		}
		d, err := detach(v, s, "daemon restarted", false)
		if err != nil {
			return engine.Decision{}, err
		}
		emits = append(emits, d.Emits...)
	}
	return engine.Decision{Outcome: engine.Outcome(fmt.Sprintf("recovered %d", len(emits))), Emits: emits}, nil
}

// AppServerStarted records a new instance of an app-server and advances
// the epoch of every non-retired session bound to another instance of the
// same transport: a new instance is a new event stream. Sessions on the
// other transport keep theirs (the shared app-server restarting says
// nothing of the user's Codex daemon, and the other way round). Whatever an old epoch had in flight on
// its session (a turn/start without an answer, an accepted turn being
// observed) lost its stream: the attempt is abandoned and its batch
// parked, in the same append, never resent.
type AppServerStarted struct {
	Started events.AppServerStarted
}

// Decide implements engine.Decider.
func (c AppServerStarted) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	nonce := c.Started.Nonce
	if err := command.CheckID("app-server nonce", nonce); err != nil {
		return engine.Decision{}, err
	}
	if st, err := v.State(events.KindAppServer, nonce); err != nil {
		return engine.Decision{}, err
	} else if st != nil {
		return engine.Decision{Outcome: command.OutcomeAlreadyRecorded}, nil
	}
	transport := c.Started.Transport
	if transport != TransportShared && transport != TransportCodexDaemon {
		return engine.Decision{}, errs.New(errs.EINVAL, "app-server transport %q is not %q or %q", transport, TransportShared, TransportCodexDaemon)
	}
	var emits []engine.Emit
	for _, r := range v.Lookup(index.AppServerRunning, transport) {
		emits = append(emits, engine.Emit{Stream: appServerStream(r.ID), Payload: &events.AppServerExited{Reason: ExitReplaced}})
	}
	started := c.Started
	emits = append(emits, engine.Emit{Stream: appServerStream(nonce), Payload: &started})
	ss, err := nonRetired(v)
	if err != nil {
		return engine.Decision{}, err
	}
	for _, s := range ss {
		if s.AppServerInstance == nonce || s.State == fsm.SessionStale {
			// A stale session proves no stream; a foreground reattaching
			// it advances its epoch then (AttachSession).
			continue
		}
		reason := epochAppRestarted
		a, err := engine.AppServer(v, s.AppServerInstance)
		if err != nil {
			return engine.Decision{}, err
		}
		if (a != nil && a.Transport != transport) || (a == nil && transport != TransportShared) {
			continue
		}
		if a != nil && (a.ExitReason == ExitDaemonRestart || a.ExitReason == ExitStopped) {
			// Stopped with its daemon, or left by a daemon that died.
			reason = epochDaemonRestart
		}
		emits = append(emits, engine.Emit{Stream: sessionStream(s.ID), Payload: &events.SessionEpochAdvanced{
			Epoch: s.Epoch + 1, Reason: reason, AppServerInstance: nonce}})
		lost, err := lostContinuity(v, s)
		if err != nil {
			return engine.Decision{}, err
		}
		emits = append(emits, lost...)
	}
	return engine.Decision{Outcome: command.OutcomeRecorded, Emits: emits}, nil
}

// lostContinuity abandons the attempt of s's thread that waits on s's
// current epoch (an answer, or an accepted turn's end) and parks its
// batch: that stream is gone, and only it could have told.
func lostContinuity(v engine.Reader, s *aggregate.Session) ([]engine.Emit, error) {
	a, err := command.LiveAttempt(v, s.BoundThreadID)
	if err != nil || a == nil || a.ManagedSessionID != s.ID || a.SessionEpoch != s.Epoch {
		return nil, err
	}
	var ab *events.AttemptAbandoned
	switch {
	case a.State == fsm.AttemptAcceptPending:
		ab = &events.AttemptAbandoned{Reason: "session epoch advanced while the delivery was in flight", RPCState: string(command.AcceptanceUnknown)}
	case a.Tracking():
		ab = &events.AttemptAbandoned{Reason: "session epoch advanced: the accepted turn's event stream is gone", ObservationState: "lost"}
	default:
		return nil, nil
	}
	emits := []engine.Emit{{Stream: command.AttemptStream(a.ID), Payload: ab}}
	b, err := engine.Batch(v, a.BatchID)
	if err != nil {
		return nil, err
	}
	if b != nil && b.Open() && b.ReplayPolicy == aggregate.ReplayAutomatic {
		emits = append(emits, command.Park(b, "session "+s.ID+" lost continuity at epoch "+fmt.Sprint(s.Epoch), a.ID))
	}
	return emits, nil
}

// AppServerExited records the end of an instance. Only a running one can
// end; anything else is "already_exited".
type AppServerExited struct {
	Nonce  string
	Reason string
	Status string
}

// Decide implements engine.Decider.
func (c AppServerExited) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	a, err := engine.AppServer(v, c.Nonce)
	if err != nil {
		return engine.Decision{}, err
	}
	if a == nil {
		return engine.Decision{}, errs.New(errs.ENOENT, "no app-server instance %s", c.Nonce)
	}
	if a.State != fsm.AppServerRunning {
		return engine.Decision{Outcome: command.OutcomeAlreadyExited}, nil
	}
	emits := []engine.Emit{{Stream: appServerStream(c.Nonce), Payload: &events.AppServerExited{Reason: c.Reason, Status: c.Status}}}
	if a.Transport == TransportCodexDaemon {
		// Nothing restarts the user's daemon for cbth: what waited on its
		// stream lost it now, not when the user next opens Codex.
		ss, err := nonRetired(v)
		if err != nil {
			return engine.Decision{}, err
		}
		for _, s := range ss {
			if s.AppServerInstance == c.Nonce {
				lost, err := lostContinuity(v, s)
				if err != nil {
					return engine.Decision{}, err
				}
				emits = append(emits, lost...)
			}
		}
	}
	return engine.Decision{Outcome: command.OutcomeExited, Emits: emits}, nil
}
