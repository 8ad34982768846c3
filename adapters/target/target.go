// Package target holds the delivery targets: the edge that actually puts a
// batch into a caller's thread. The delivery core decides when and what;
// a target only carries one attempt out and says how it went.
package target

import (
	"context"

	"github.com/cbth-dev/cbth/engine/command"
)

// Result is a target's account of one attempt.
type Result struct {
	// Outcome is command.Accepted, command.RejectedBefore or
	// command.AcceptanceUnknown.
	Outcome string
	Reason  string
	// TurnID identifies the accepted turn, when the channel has turns.
	TurnID string
	// Tracks says the target reports turn events for accepted attempts,
	// so an observation deadline applies.
	Tracks bool
	// Turn lists turn events the target already saw, in order (a target
	// that delivers synchronously reports the whole turn at once).
	Turn []string
}

// Target delivers one attempt. Deliver must return by ctx's deadline; a
// target that cannot tell whether the channel took the delivery returns
// AcceptanceUnknown, never a guess.
type Target interface {
	Deliver(ctx context.Context, d command.Delivery) Result
}
