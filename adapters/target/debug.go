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
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/errs"
)

// Debug target behaviours, set per thread by an operator.
const (
	Deliver    = "deliver"     // accepted, the turn completes: delivered
	Accept     = "accept"      // accepted, no turn reported: cooldown, then redelivery
	Reject     = "reject"      // refused before accepting: retried after a back-off
	Unknown    = "unknown"     // no proof either way: parked for manual resolution
	TurnFailed = "turn_failed" // accepted, then the turn fails: parked
	Hang       = "hang"        // never answers: times out as unknown
)

// Behaviours lists the debug target's behaviours.
var Behaviours = []string{Deliver, Accept, Reject, Unknown, TurnFailed, Hang}

// DebugTarget delivers into $CBTH_HOME/debug/threads/<thread>.jsonl, one
// line per attempt, behaving per thread as the operator configured (default
// deliver). It makes every fail-closed path reachable through the real
// binary.
type DebugTarget struct {
	Dir string // $CBTH_HOME/debug
	Now func() time.Time

	mu sync.Mutex
}

// Record is one line of a thread's debug delivery file.
type Record struct {
	command.Delivery
	Behaviour string    `json:"behaviour"`
	Outcome   string    `json:"outcome"`
	TurnID    string    `json:"turn_id,omitempty"`
	At        time.Time `json:"at"`
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

// Deliver implements Target.
func (t *DebugTarget) Deliver(ctx context.Context, d command.Delivery) Result {
	m, err := t.Behaviours()
	if err != nil {
		return Result{Outcome: command.RejectedBefore, Reason: err.Error()}
	}
	beh := m[d.ThreadID]
	if beh == "" {
		beh = m["*"]
	}
	if beh == "" {
		beh = Deliver
	}
	var r Result
	switch beh {
	case Deliver:
		r = Result{Outcome: command.Accepted, TurnID: "turn-" + d.AttemptID, Tracks: true, Turn: []string{"turn_started", "turn_completed"}}
	case Accept:
		r = Result{Outcome: command.Accepted, TurnID: "wake-" + d.AttemptID}
	case Reject:
		return Result{Outcome: command.RejectedBefore, Reason: "debug target rejects this thread"}
	case Unknown:
		r = Result{Outcome: command.AcceptanceUnknown, Reason: "debug target lost the response"}
	case TurnFailed:
		r = Result{Outcome: command.Accepted, TurnID: "turn-" + d.AttemptID, Tracks: true, Turn: []string{"turn_started", "turn_failed"}}
	case Hang:
		<-ctx.Done()
		r = Result{Outcome: command.AcceptanceUnknown, Reason: "no answer before the delivery timeout"}
	}
	// The channel "received" the delivery whenever it may have acted on
	// it: every outcome but a proven reject is written down.
	if err := t.write(Record{Delivery: d, Behaviour: beh, Outcome: r.Outcome, TurnID: r.TurnID, At: t.Now()}); err != nil {
		return Result{Outcome: command.AcceptanceUnknown, Reason: fmt.Sprintf("write delivery: %v", err)}
	}
	return r
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
