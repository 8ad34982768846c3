package codexmod

import (
	"context"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/events"
)

// meta is how the Codex module's records are attributed.
var meta = engine.Meta{Actor: events.ActorAdapter, CorrelationID: "codex-cli"}

// book is the log as the app-server code reads and records it
// (sessions.Log): the module's, so that Codex appends from this module
// and the delivery scheduler only.
type book struct{ eng *engine.Engine }

// Session implements sessions.Log.
func (b book) Session(id string) (*aggregate.Session, error) {
	var s *aggregate.Session
	err := b.eng.Read(func(v engine.Snapshot) (err error) {
		s, err = engine.Session(v, id)
		return err
	})
	return s, err
}

// Orphans implements sessions.Log.
func (b book) Orphans() (map[int]bool, error) {
	orphans := map[int]bool{}
	err := b.eng.Read(func(v engine.Snapshot) error {
		return v.ForEach(events.KindAppServer, func(st aggregate.State) error {
			a, err := engine.AppServer(v, st.Head().ID)
			// The user's Codex daemon is never an orphan of cbth's: it is
			// theirs, and outlives every cbth daemon by design.
			if a != nil && a.ExitReason == codex.ExitDaemonRestart && a.Transport == codex.TransportShared {
				orphans[a.PID] = true
			}
			return err
		})
	})
	return orphans, err
}

// Started implements sessions.Log.
func (b book) Started(ctx context.Context, st events.AppServerStarted) error {
	_, err := b.eng.Execute(ctx, meta, codex.AppServerStarted{Started: st})
	return err
}

// Exited implements sessions.Log.
func (b book) Exited(ctx context.Context, nonce, reason, status string) error {
	_, err := b.eng.Execute(ctx, meta, codex.AppServerExited{Nonce: nonce, Reason: reason, Status: status})
	return err
}
