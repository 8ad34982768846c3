package target

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Debug target behaviours, set per thread by an operator.
const (
	Deliver    = "deliver"     // accepted, the turn completes: delivered
	Accept     = "accept"      // accepted, no turn reported: cooldown, then redelivery
	Async      = "async"       // accepted, turn events come later from `cbth debug turn`
	Reject     = "reject"      // refused before accepting: retried after a back-off
	Unknown    = "unknown"     // no proof either way: parked for manual resolution
	TurnFailed = "turn_failed" // accepted, then the turn fails: parked
	Hang       = "hang"        // received, never answered: times out as unknown
	Busy       = "busy"        // the gate holds the thread back (its caller is busy)
)

// Behaviours lists the debug target's behaviours.
var Behaviours = []string{Deliver, Accept, Async, Reject, Unknown, TurnFailed, Hang, Busy}

// DebugTarget delivers into $CBTH_HOME/debug/threads/<thread>.jsonl, one
// line per attempt, behaving per thread as the operator configured (default
// deliver). It is a push target shaped like the Codex CLI one: one managed
// session per thread ("debug:<thread>") whose epoch advances at every
// daemon start, turn events that may arrive after Deliver returned, a
// gate. It has no reconcile hook: it can prove nothing about a call the
// previous daemon left unanswered, so every one is parked. It makes every
// path of the core reachable through the real binary without Codex.
type DebugTarget struct {
	Dir string // $CBTH_HOME/debug
	Now func() time.Time

	mu      sync.Mutex
	epoch   uint64
	sink    Sink
	pending map[string]pendingTurn // thread -> accepted turn awaiting its events
}

type pendingTurn struct {
	attemptID, turnID, session string
	epoch                      uint64
}

// Record is one line of a thread's debug delivery file.
type Record struct {
	command.Delivery
	Behaviour string         `json:"behaviour"`
	Outcome   engine.Outcome `json:"outcome"`
	TurnID    string         `json:"delivery_turn_id,omitempty"`
	At        time.Time      `json:"at"`
}

func (t *DebugTarget) behavioursPath() string { return filepath.Join(t.Dir, "behaviours.json") }

// Behaviours returns the configured behaviour of every thread ("*" is the
// default for the others).
func (t *DebugTarget) Behaviours() (map[string]string, error) {
	b, err := os.ReadFile(t.behavioursPath())
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, errs.Wrap(errs.ECORRUPT, err, "read %s", t.behavioursPath())
	}
	return m, nil
}

// SetBehaviour sets thread's behaviour ("*" for the default).
func (t *DebugTarget) SetBehaviour(thread, behaviour string) error {
	ok := false
	for _, b := range Behaviours {
		ok = ok || b == behaviour
	}
	if !ok {
		return errs.New(errs.EINVAL, "unknown behaviour %q (want one of %v)", behaviour, Behaviours)
	}
	if thread == "" {
		return errs.New(errs.EINVAL, "thread id is empty")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	m, err := t.Behaviours()
	if err != nil {
		return err
	}
	m[thread] = behaviour
	if err := home.EnsureDir(t.Dir); err != nil {
		return err
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b, _ := json.MarshalIndent(m, "", "  ")
	return home.WriteFileAtomic(t.behavioursPath(), append(b, '\n'))
}

// ThreadFile is where a thread's deliveries are written.
func (t *DebugTarget) ThreadFile(thread string) string {
	return filepath.Join(t.Dir, "threads", url.PathEscape(thread)+".jsonl")
}

// Spec implements Target.
func (t *DebugTarget) Spec() Spec {
	return Spec{Name: string(command.TargetDebug), Kind: Push, RPCKind: command.DebugDeliver, DeliveryMode: command.DebugDeliver}
}

// Session names the managed session of a thread on the debug target.
func Session(thread string) string { return "debug:" + thread }

// Start implements Starter: a new daemon is a new event stream, so the
// epoch advances (kept in $CBTH_HOME/debug/session_epoch).
func (t *DebugTarget) Start(ctx context.Context, h Host) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	path := filepath.Join(t.Dir, "session_epoch")
	var n uint64
	if b, err := os.ReadFile(path); err == nil {
		n, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := home.EnsureDir(t.Dir); err != nil {
		return err
	}
	if err := home.WriteFileAtomic(path, []byte(strconv.FormatUint(n+1, 10)+"\n")); err != nil {
		return err
	}
	t.epoch, t.sink, t.pending = n+1, h.Sink, map[string]pendingTurn{}
	return nil
}

func (t *DebugTarget) behaviour(thread string) (string, error) {
	m, err := t.Behaviours()
	if err != nil {
		return "", err
	}
	beh := m[thread]
	if beh == "" {
		beh = m["*"]
	}
	if beh == "" {
		beh = Deliver
	}
	return beh, nil
}

// Gate implements Target: a busy thread is held back; every other one
// goes on its own session and the current epoch.
func (t *DebugTarget) Gate(ctx context.Context, h Head) Gate {
	beh, err := t.behaviour(h.ThreadID)
	if err != nil {
		return Gate{Reason: "debug: " + err.Error()}
	}
	if beh == Busy {
		return Gate{Reason: "debug: the caller thread is busy"}
	}
	t.mu.Lock()
	epoch := t.epoch
	t.mu.Unlock()
	return Gate{OK: true, Route: command.Route{RPCKind: command.DebugDeliver, DeliveryMode: command.DebugDeliver,
		ManagedSessionID: Session(h.ThreadID), SessionEpoch: epoch}}
}

// Deliver implements Pusher.
func (t *DebugTarget) Deliver(ctx context.Context, d command.Delivery) Result {
	beh, err := t.behaviour(d.ThreadID)
	if err != nil {
		return Result{Outcome: command.RejectedBefore, Reason: err.Error()}
	}
	var r Result
	switch beh {
	case Deliver:
		r = Result{Outcome: command.Accepted, TurnID: "turn-" + d.AttemptID, Tracks: true, Turn: []string{"turn_started", "turn_completed"}}
	case Accept:
		r = Result{Outcome: command.Accepted, TurnID: "wake-" + d.AttemptID}
	case Async:
		r = Result{Outcome: command.Accepted, TurnID: "turn-" + d.AttemptID, Tracks: true}
	case Reject, Busy:
		// Proven: nothing reached the thread (its file).
		return Result{Outcome: command.RejectedBefore, Reason: "debug target rejects this thread"}
	case Unknown:
		r = Result{Outcome: command.AcceptanceUnknown, Reason: "debug target lost the response"}
	case TurnFailed:
		r = Result{Outcome: command.Accepted, TurnID: "turn-" + d.AttemptID, Tracks: true, Turn: []string{"turn_started", "turn_failed"}}
	case Hang:
		r = Result{Outcome: command.AcceptanceUnknown, Reason: "no answer before the delivery timeout"}
	}
	// The channel "received" the delivery whenever it may have acted on
	// it: every outcome but a proven reject is written down, before any
	// answer (a hang is received, then never answered).
	if err := t.write(Record{Delivery: d, Behaviour: beh, Outcome: r.Outcome, TurnID: r.TurnID, At: t.Now()}); err != nil {
		return Result{Outcome: command.AcceptanceUnknown, Reason: fmt.Sprintf("write delivery: %v", err)}
	}
	switch beh {
	case Hang:
		<-ctx.Done()
	case Async:
		t.mu.Lock()
		if t.pending == nil {
			t.pending = map[string]pendingTurn{}
		}
		t.pending[d.ThreadID] = pendingTurn{attemptID: d.AttemptID, turnID: r.TurnID, session: d.ManagedSessionID, epoch: d.SessionEpoch}
		t.mu.Unlock()
	}
	return r
}

// TurnReport is what became of a turn event reported with Turn.
type TurnReport struct {
	TurnEvent
	Outcome engine.Outcome
}

// Turn reports event (turn_started, turn_completed, ...) on the accepted
// turn the async behaviour left open on thread, from the current epoch
// or, when epoch is not 0, from that one. A terminal event closes the
// turn on the target's side, whatever the core made of it.
func (t *DebugTarget) Turn(ctx context.Context, thread, event string, epoch uint64) (TurnReport, error) {
	t.mu.Lock()
	p, ok := t.pending[thread]
	sink := t.sink
	t.mu.Unlock()
	if !ok || sink == nil {
		return TurnReport{}, errs.New(errs.ENOENT, "the debug target has no accepted turn open on thread %s", thread)
	}
	ev := TurnEvent{AttemptID: p.attemptID, TurnID: p.turnID, Event: event, ManagedSessionID: p.session, SessionEpoch: p.epoch}
	if epoch != 0 {
		ev.SessionEpoch = epoch
	}
	out, err := sink.Observe(ctx, ev)
	if err != nil {
		return TurnReport{}, err
	}
	if event != "turn_started" {
		t.mu.Lock()
		if t.pending[thread] == p {
			delete(t.pending, thread)
		}
		t.mu.Unlock()
	}
	return TurnReport{TurnEvent: ev, Outcome: out}, nil
}

func (t *DebugTarget) write(rec Record) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	path := t.ThreadFile(rec.ThreadID)
	if err := home.EnsureDir(filepath.Dir(path)); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, home.FileMode)
	if err != nil {
		return err
	}
	defer f.Close()
	b, _ := json.Marshal(rec)
	if _, err := f.Write(append(b, '\n')); err != nil {
		return err
	}
	return f.Sync()
}
