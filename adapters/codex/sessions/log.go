// Package sessions is cbth's side of the Codex app-servers it delivers
// through: the shared app-server the daemon runs for `cbth cli run`
// (started when first needed, supervised, every instance probed and
// recorded), and the threads each running instance reports. It reads
// managed sessions and writes nothing of its own: what it learns goes
// into the log through the Log the daemon's Codex module hands in, or
// travels forward with the delivery that asked (a permission reading, a
// thread proven unreachable). spec/codex-cli.md describes the contract.
package sessions

import (
	"context"

	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/events"
)

// Log is the daemon's log as this package uses it, handed in by the
// daemon's Codex module: the sessions it reads, the instances a dead
// daemon left, and the instances it records as they start and end.
type Log interface {
	// Session is the managed session id, or nil when there is none.
	Session(id string) (*aggregate.Session, error)
	// Orphans are the pids of instances whose daemon died while they ran
	// (recorded ended with daemon_restarted).
	Orphans() (map[int]bool, error)
	// Started records a new instance (and what its probe proved).
	Started(ctx context.Context, st events.AppServerStarted) error
	// Exited records the end of an instance.
	Exited(ctx context.Context, nonce, reason, status string) error
}
