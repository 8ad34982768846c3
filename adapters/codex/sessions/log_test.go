package sessions_test

import (
	"context"
	"sync"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/events"
)

// testLog is sessions.Log on a real engine, as the daemon's Codex module
// hands it in (adapters/daemon/codexmod/book.go).
type testLog struct{ eng *engine.Engine }

var testMeta = engine.Meta{Actor: events.ActorAdapter, CorrelationID: "test"}

func (l testLog) Session(id string) (*aggregate.Session, error) {
	var s *aggregate.Session
	err := l.eng.Read(func(v engine.Snapshot) error {
		st, err := v.State(events.KindSession, id)
		s, _ = st.(*aggregate.Session)
		return err
	})
	return s, err
}

func (l testLog) Orphans() (map[int]bool, error) { return map[int]bool{}, nil }

func (l testLog) Started(ctx context.Context, st events.AppServerStarted) error {
	_, err := l.eng.Execute(ctx, testMeta, codex.AppServerStarted{Started: st})
	return err
}

func (l testLog) Exited(ctx context.Context, nonce, reason, status string) error {
	_, err := l.eng.Execute(ctx, testMeta, codex.AppServerExited{Nonce: nonce, Reason: reason, Status: status})
	return err
}

// countingWatcher counts reconnections.
type countingWatcher struct {
	mu sync.Mutex
	n  int
}

func (w *countingWatcher) Notification(string, appserver.Message) {}
func (w *countingWatcher) Reconnected(string) {
	w.mu.Lock()
	w.n++
	w.mu.Unlock()
}
func (w *countingWatcher) reconnected() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}
