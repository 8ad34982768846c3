package cli

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
)

// ModelSockets serves the .sock of every session=socket model of the
// registered trees, for as long as its context lives: the daemon keeps
// one and calls Sync whenever a tree's registrations change.
type ModelSockets struct {
	Ctx context.Context // the serving lifetime
	UID int
	Now func() time.Time
	Log *slog.Logger

	mu      sync.Mutex
	running map[string]context.CancelFunc // root \0 model path
}

// Sync starts the sockets of set's socket models under root and stops
// those of root whose model went away.
func (m *ModelSockets) Sync(root string, set tree.Set) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running == nil {
		m.running = map[string]context.CancelFunc{}
	}
	want := map[string]bool{}
	for _, o := range set.Objects {
		if o.Kind == object.KindModel && o.Session == object.SessionSocket {
			want[root+"\x00"+o.Path] = true
		}
	}
	for key, stop := range m.running {
		if len(key) > len(root) && key[:len(root)+1] == root+"\x00" && !want[key] {
			stop()
			delete(m.running, key)
		}
	}
	for key := range want {
		if _, ok := m.running[key]; ok {
			continue
		}
		model := key[len(root)+1:]
		ctx, cancel := context.WithCancel(m.Ctx)
		m.running[key] = cancel
		go func() {
			err := ServeModel(ctx, root, model, m.UID, io.Discard, m.Now)
			if err != nil && ctx.Err() == nil {
				m.Log.Error("model socket", "root", root, "model", model, "err", err)
			}
		}()
	}
}
