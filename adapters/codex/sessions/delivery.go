package sessions

import (
	"context"
	"encoding/json"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The delivery side of the manager: what the CLI delivery target
// (adapters/codex/clitarget) needs from the shared app-server besides
// Refresh. Broadcasts and the turn notifications of subscribed threads
// reach it through one watcher; the manager itself keeps the last status
// it saw of every thread, so the target's gate can tell an idle thread
// from one whose user turn runs without asking Codex.

// Watcher receives, in arrival order, every notification of an instance
// on the daemon's connection (Instance names it by its nonce), and
// Reconnected when that connection was made again to the same process:
// what was sent in between is lost, and thread subscriptions belong to a
// connection, so a watcher resumes the threads it follows again.
type Watcher interface {
	Notification(instance string, msg appserver.Message)
	Reconnected(instance string)
}

// Watch sets the manager's watcher (one; set before anything starts).
func (m *Manager) Watch(w Watcher) {
	m.mu.Lock()
	m.watcher = w
	m.mu.Unlock()
}

func (m *Manager) watching() Watcher {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.watcher
}

// ThreadStatus is the last status the running instance reported for a
// thread ("" when none was seen): thread/status/changed broadcasts, and
// the answers of thread/resume, which override what came before them.
func (m *Manager) ThreadStatus(thread string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status[thread]
}

// AwaitingFirstTurn reports whether the running instance started thread
// (thread/started) and has not seen it begin a turn: Codex has no rollout
// of it yet, so no other connection can resume it or read its
// permissions (ErrAwaitingFirstTurn).
func (m *Manager) AwaitingFirstTurn(thread string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unborn[thread]
}

// awaitingFirstTurn is AwaitingFirstTurn of instance, false when it is no
// longer the running one (a new instance has loaded nothing).
func (m *Manager) awaitingFirstTurn(instance, thread string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur != nil && m.cur.nonce == instance && m.unborn[thread]
}

// born forgets thread as awaiting its first turn: a resume of it was
// answered, so it has a rollout (a thread forked from another one has
// one before any turn).
func (m *Manager) born(thread string) {
	m.mu.Lock()
	delete(m.unborn, thread)
	m.mu.Unlock()
}

// NoteThreadStatus records a status read in an answer (thread/resume,
// thread/read) of instance, when it is still the running one.
func (m *Manager) NoteThreadStatus(instance, thread, status string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != nil && m.cur.nonce == instance {
		m.status[thread] = status
	}
}

// Current returns the nonce of the running, recorded instance and whether
// its capability probe passed ("" when none runs); it starts nothing.
func (m *Manager) Current() (nonce string, probed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		return "", false
	}
	select {
	case <-m.cur.inst.Exited():
		return "", false
	default:
	}
	return m.cur.nonce, m.cur.probe == nil
}

// Client returns the daemon's connection to instance while it is the
// running one: the connection whose stream that instance's epochs
// number. ESTALE once another instance replaced it.
func (m *Manager) Client(instance string) (*appserver.Client, error) {
	m.mu.Lock()
	cur := m.cur
	m.mu.Unlock()
	if cur == nil || cur.nonce != instance {
		return nil, errs.New(errs.ESTALE, "codex app-server instance %s is not the running one", instance)
	}
	select {
	case <-cur.inst.Exited():
		return nil, errs.New(errs.ESTALE, "codex app-server instance %s exited", instance)
	default:
	}
	return cur.inst.Client(), nil
}

// Alive reports whether instance is still the running one.
func (m *Manager) Alive(instance string) bool {
	_, err := m.Client(instance)
	return err == nil
}

// EnsureRunning starts the shared app-server if it is not running and
// returns the running instance's nonce.
func (m *Manager) EnsureRunning(ctx context.Context) (string, error) {
	in, err := m.Ensure(ctx)
	if err != nil {
		return "", err
	}
	return in.nonce, nil
}

// track keeps the thread status of a notification and hands it to the
// watcher.
func (m *Manager) track(nonce string, msg appserver.Message) {
	if msg.Method == appserver.NoteThreadStatusChanged {
		var n appserver.ThreadStatusChangedNote
		if json.Unmarshal(msg.Params, &n) == nil && n.ThreadID != "" {
			m.NoteThreadStatus(nonce, n.ThreadID, n.Status.Type)
		}
	}
	if w := m.watching(); w != nil {
		w.Notification(nonce, msg)
	}
}
