// Package clitarget is the Codex CLI delivery target: it puts a thread's
// head batch into the Codex thread a managed session is bound to, through
// turn/start on the daemon's shared app-server, and reports the accepted
// turn's end. The delivery core (engine/command) decides when and records
// what happened; adapters/codex/sessions follows the app-server and reads
// the sessions' threads. spec/codex-cli.md section 16 describes it.
package clitarget

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
)

// Config configures the target (the [cli] section).
type Config struct {
	AcceptTimeout     time.Duration
	ObservationWindow time.Duration
	ReconcileWindow   time.Duration
	SettleDelay       time.Duration
	// Trust is the home's trust, for threads the user did not trust
	// themselves: events.TrustStrict (the default) or
	// events.TrustOwnPermissions.
	Trust string
	// Steer lets a read-only batch go into a running turn classified
	// read_only_low_risk through turn/steer (off by default).
	Steer bool
	// InlineLimit is the most bytes of one artifact pasted into the
	// continuation prompt; larger ones are named.
	InlineLimit int64
	// Unavailable, when set, is why the Codex CLI cannot run at all (a
	// configuration error): every head waits with it.
	Unavailable error
	// Label starts the reasons the gate gives (a head's delivery_gate, a
	// refusal before turn/start is prepared), so they name the target
	// that gates: the plugin target runs this code as codex_app_server.
	// Empty is "cli". The send's own reasons name what failed instead.
	Label command.Target
	// CodexDaemon is the user's Codex daemon, the transport for threads
	// no `cbth cli run` foreground holds; nil turns it off.
	CodexDaemon Daemon
	// QueueHandoff hands a result to Codex's own queue when the Codex
	// daemon does not run, for threads trusted with their own
	// permissions; Codex and CodexEnv run `codex queue`.
	QueueHandoff bool
	Codex        string
	CodexEnv     []string
}

// ConfigOf is the target's configuration from the home's: the [cli]
// section and the inline payload limit of [delivery]. unavailable is
// why Codex cannot run with it, if it cannot (Config.Unavailable). The
// plugin target (plugintarget) runs on the same one.
func ConfigOf(c home.Config, unavailable error) Config {
	return Config{
		AcceptTimeout: c.CLI.AcceptanceTimeout.Duration, ObservationWindow: c.CLI.ObservationWindow.Duration,
		ReconcileWindow: c.CLI.ReconcileWindow.Duration, SettleDelay: c.CLI.SettleDelay.Duration,
		Trust: c.CLI.HomeTrust(), Steer: c.CLI.Steer, InlineLimit: c.Delivery.InlinePayloadLimit, Unavailable: unavailable,
		QueueHandoff: c.CLI.QueueHandoff, Codex: c.CodexBinaryName(),
	}
}

// Sessions is what the target needs of an app-server it delivers
// through (sessions.Shared, or a host plugin's pool).
type Sessions interface {
	Current() (instance string, probed bool)
	ThreadStatus(thread string) string
	AwaitingFirstTurn(thread string) bool
	Read(ctx context.Context, sessionID string) (sessions.ThreadReading, error)
	Client(instance string) (*appserver.Client, error)
	Alive(instance string) bool
	Watch(w sessions.Watcher)
}

// Daemon is what the target needs of the user's Codex daemon
// (sessions.Daemon): an app-server it finds rather than runs.
type Daemon interface {
	Sessions
	Ensure(ctx context.Context) (sessions.Found, error)
	Loaded(ctx context.Context, instance, thread string) (bool, error)
	Resume(ctx context.Context, instance, thread string) (appserver.ThreadSession, error)
	CodexHome() string
}

// Target is the "cli" delivery target.
type Target struct {
	cfg Config
	m   Sessions
	eng *engine.Engine
	log *slog.Logger
	now func() time.Time

	mu     sync.Mutex
	sink   target.Sink
	wake   func()
	tracks map[string]*track // thread -> the delivery whose turn is followed
	queue  chan target.TurnEvent
}

// prep is what Prepare read for the delivery that follows it (its Send).
type prep struct {
	ep                Sessions // the app-server the reading was taken on
	instance, session string
	epoch             uint64
	params            appserver.TurnStartParams // threadId and the pinned permissions
	// steer, when set, is the running turn a turn/steer goes into (the
	// steer feature on, the batch read-only, the turn read_only_low_risk).
	steer string
}

// track follows one delivery's turn on one instance: from before
// turn/start is sent (events of a turn whose id is not known yet are kept
// by thread) to the turn's end.
type track struct {
	ep                                         Sessions
	attempt, thread, instance, session, marker string
	epoch                                      uint64
	turnID                                     string
	seen                                       []seenEvent // before the turn id was known
	recorded                                   bool        // the acceptance is durable
	pending                                    []string    // events after Deliver returned, before recorded
	ended                                      bool        // a terminal event was reported
}

type seenEvent struct{ turn, event string }

// New returns the target. eng is read for sessions and artifacts; now is
// the engine clock.
func New(cfg Config, m Sessions, eng *engine.Engine, now func() time.Time, log *slog.Logger) *Target {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Target{cfg: cfg, m: m, eng: eng, log: log, now: now,
		tracks: map[string]*track{}, queue: make(chan target.TurnEvent, 1024)}
}

// reason is a gate reason, labelled with the target that gives it.
func (t *Target) reason(format string, a ...any) string {
	label := t.cfg.Label
	if label == "" {
		label = command.TargetCodexCLI
	}
	return string(label) + ": " + fmt.Sprintf(format, a...)
}

// Spec implements target.Target.
func (t *Target) Spec() target.Spec {
	return target.Spec{Name: string(command.TargetCodexCLI), Kind: target.Push, RPCKind: command.RPCTurnStart, DeliveryMode: command.ModeCLIStart,
		AcceptTimeout: t.cfg.AcceptTimeout, ObservationWindow: t.cfg.ObservationWindow}
}

// Start implements target.Starter: it follows the app-server's
// notifications and reports turn events to the sink, one at a time, in
// order.
func (t *Target) Start(ctx context.Context, h target.Host) error {
	t.mu.Lock()
	t.sink, t.wake = h.Sink, h.Wake
	if h.Log != nil {
		t.log = h.Log
	}
	t.mu.Unlock()
	if t.m != nil {
		t.m.Watch(t)
	}
	if t.cfg.CodexDaemon != nil {
		t.cfg.CodexDaemon.Watch(t)
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-t.queue:
				out, err := h.Sink.Observe(context.WithoutCancel(ctx), ev)
				if err != nil {
					t.log.Error("record turn event", "attempt", ev.AttemptID, "event", ev.Event, "err", err)
					continue
				}
				t.log.Info("turn event", "attempt", ev.AttemptID, "turn", ev.TurnID, "event", ev.Event, "outcome", out)
			}
		}
	}()
	return nil
}

// canonical maps a turn notification to the seed's turn event: 0.169 ends
// a turn completed, failed or interrupted; any other end (a later Codex's
// "replaced", or a status cbth does not know) is a negative end.
func canonical(method, status string) (event string, terminal bool) {
	if method == appserver.NoteTurnStarted {
		return "turn_started", false
	}
	switch status {
	case appserver.TurnCompleted:
		return "turn_completed", true
	case appserver.TurnFailed:
		return "turn_failed", true
	case appserver.TurnInterrupted:
		return "turn_interrupted", true
	case appserver.TurnInProgress:
		return "", false
	}
	return "turn_replaced", true
}

func terminalEvent(ev string) bool { return ev != "turn_started" }

// Notification implements sessions.Watcher: the turn events of a
// followed delivery. Events of the turn the delivery started go to the
// core once its acceptance is durable; before its id is known they are
// kept by thread.
func (t *Target) Notification(instance string, msg appserver.Message) {
	if msg.Method == appserver.NoteThreadStatusChanged {
		// A thread that became idle may take the delivery its gate held
		// back while its own turn ran.
		var n appserver.ThreadStatusChangedNote
		if json.Unmarshal(msg.Params, &n) == nil && n.Status.Type == appserver.ThreadIdle {
			t.mu.Lock()
			wake := t.wake
			t.mu.Unlock()
			if wake != nil {
				go wake()
			}
		}
		return
	}
	if msg.Method != appserver.NoteTurnStarted && msg.Method != appserver.NoteTurnCompleted {
		return
	}
	var n appserver.TurnNote
	if json.Unmarshal(msg.Params, &n) != nil || n.ThreadID == "" {
		return
	}
	ev, _ := canonical(msg.Method, n.Turn.Status)
	if ev == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := t.tracks[n.ThreadID]
	if tr == nil || tr.instance != instance {
		return
	}
	if tr.turnID == "" {
		tr.seen = append(tr.seen, seenEvent{n.Turn.ID, ev})
		return
	}
	if n.Turn.ID == tr.turnID {
		t.reportLocked(tr, ev)
	}
}

// reportLocked reports ev on tr's turn: queued for the sink once the
// acceptance is durable, held until then.
func (t *Target) reportLocked(tr *track, ev string) {
	if tr.ended {
		return
	}
	if !tr.recorded {
		tr.pending = append(tr.pending, ev)
		return
	}
	if terminalEvent(ev) {
		tr.ended = true
		if t.tracks[tr.thread] == tr {
			delete(t.tracks, tr.thread)
		}
	}
	select {
	case t.queue <- target.TurnEvent{AttemptID: tr.attempt, TurnID: tr.turnID, Event: ev, ManagedSessionID: tr.session, SessionEpoch: tr.epoch}:
	default:
		// A full queue loses the event: the attempt then expires at its
		// deadline and is parked, never closed on a guess.
		t.log.Error("turn event queue full; event dropped", "attempt", tr.attempt, "event", ev)
	}
}

// Recorded implements target.Acknowledger: once the acceptance is durable
// the events held meanwhile go to the core, in order.
func (t *Target) Recorded(d command.Delivery, outcome engine.Outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := t.tracks[d.ThreadID]
	if tr == nil || tr.attempt != d.AttemptID {
		return
	}
	if outcome != command.Accepted || tr.ended {
		delete(t.tracks, d.ThreadID)
		return
	}
	tr.recorded = true
	held := tr.pending
	tr.pending = nil
	for _, ev := range held {
		t.reportLocked(tr, ev)
	}
}

// Reconnected implements sessions.Watcher: the daemon's connection to the
// same instance was made again, so the turn events sent in between are
// lost and the thread subscriptions with them. Each followed turn is
// looked up on the new connection (the thread resumed again, its turns
// listed): one that ended meanwhile is reported, the others go on being
// followed. The epoch stays: the instance is the same.
func (t *Target) Reconnected(instance string) {
	t.mu.Lock()
	var follow []*track
	for _, tr := range t.tracks {
		if tr.instance == instance && tr.turnID != "" && !tr.ended {
			follow = append(follow, tr)
		}
	}
	t.mu.Unlock()
	for _, tr := range follow {
		go t.lookup(tr)
	}
}

func (t *Target) lookup(tr *track) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := tr.ep.Client(tr.instance)
	if err != nil {
		return // another instance: the epoch advanced and the attempt parked
	}
	if _, err := c.ThreadResume(ctx, appserver.ThreadResumeParams{ThreadID: tr.thread, ExcludeTurns: true}); err != nil {
		t.log.Warn("resume after reconnection", "thread", tr.thread, "err", err)
	}
	turns, err := listTurns(ctx, c, tr.thread)
	if err != nil {
		t.log.Warn("look up turn after reconnection", "thread", tr.thread, "turn", tr.turnID, "err", err)
		return
	}
	for _, turn := range turns {
		if turn.ID != tr.turnID {
			continue
		}
		if ev, end := canonical(appserver.NoteTurnCompleted, turn.Status); end {
			t.mu.Lock()
			t.reportLocked(tr, ev)
			t.mu.Unlock()
		}
	}
}

// Follows reports whether the accepted turn of attemptID is being
// observed on a running instance.
func (t *Target) Follows(attemptID string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tr := range t.tracks {
		if tr.attempt == attemptID && tr.turnID != "" && !tr.ended {
			return tr.ep.Alive(tr.instance)
		}
	}
	return false
}

// LookUp looks the followed turn of attemptID up on its instance, as
// after a reconnection, and reports an end no notification told.
func (t *Target) LookUp(attemptID string) {
	t.mu.Lock()
	var found *track
	for _, tr := range t.tracks {
		if tr.attempt == attemptID && tr.turnID != "" && !tr.ended {
			found = tr
		}
	}
	t.mu.Unlock()
	if found != nil {
		t.lookup(found)
	}
}

var (
	_ target.Preparer     = (*Target)(nil)
	_ target.Acknowledger = (*Target)(nil)
	_ target.Starter      = (*Target)(nil)
	_ sessions.Watcher    = (*Target)(nil)
)
