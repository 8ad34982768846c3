package codex

import (
	"slices"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Outcomes of the trust commands.
const (
	TrustedOutcome   engine.Outcome = "trusted"
	UntrustedOutcome engine.Outcome = "untrusted"
	// TrustUnchangedOutcome: the thread already had that trust (or none).
	TrustUnchangedOutcome engine.Outcome = "unchanged"
)

func threadStream(id string) events.StreamID { return events.StreamID{Kind: events.KindThread, ID: id} }

// CheckTrust validates a trust name.
func CheckTrust(t string) error {
	if !slices.Contains(events.Trusts, t) {
		return errs.New(errs.EINVAL, "trust %q is not one of %s", t, strings.Join(events.Trusts, ", "))
	}
	return nil
}

// threadOf is the thread's record, or nil.
func threadOf(v engine.Reader, id string) (*aggregate.Thread, error) {
	return engine.Thread(v, id)
}

// TrustOf is the trust the user gave thread itself ("" when none: the
// home's setting applies).
func TrustOf(v engine.Reader, thread string) (string, error) {
	t, err := threadOf(v, thread)
	if err != nil || t == nil || t.State != fsm.ThreadTrusted {
		return "", err
	}
	return t.Trust, nil
}

// TrustThread records the user's trust in a thread's deliveries
// (spec/codex-cli.md, "Trust"). The command is the user's: cbth offers it
// to no agent (no MCP tool records it).
type TrustThread struct {
	ThreadID string
	Trust    string
}

// Decide implements engine.Decider.
func (c TrustThread) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := command.CheckID("thread id", c.ThreadID); err != nil {
		return engine.Decision{}, err
	}
	if err := CheckTrust(c.Trust); err != nil {
		return engine.Decision{}, err
	}
	cur, err := TrustOf(v, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	if cur == c.Trust {
		return engine.Decision{Outcome: TrustUnchangedOutcome}, nil
	}
	return engine.Decision{Outcome: TrustedOutcome, Emits: []engine.Emit{{Stream: threadStream(c.ThreadID), Payload: &events.ThreadTrusted{Trust: c.Trust}}}}, nil
}

// UntrustThread takes the thread's own trust back: the home's setting
// applies again.
type UntrustThread struct {
	ThreadID string
}

// Decide implements engine.Decider.
func (c UntrustThread) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := command.CheckID("thread id", c.ThreadID); err != nil {
		return engine.Decision{}, err
	}
	cur, err := TrustOf(v, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	if cur == "" {
		return engine.Decision{Outcome: TrustUnchangedOutcome}, nil
	}
	return engine.Decision{Outcome: UntrustedOutcome, Emits: []engine.Emit{{Stream: threadStream(c.ThreadID), Payload: &events.ThreadUntrusted{}}}}, nil
}
