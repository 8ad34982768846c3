package sessions

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/probe"
)

// proc is one running app-server process as an endpoint follows it: its
// connection (a new one after a reconnection to the same process), its
// end, and its notifications (supervisor.Instance for the shared
// app-server).
type proc interface {
	Client() *appserver.Client
	Exited() <-chan struct{}
	Notifications(stop <-chan struct{}, log *slog.Logger, subscribed func(first bool), each func(appserver.Message))
}

// instance is an app-server instance as recorded: the nonce its
// appserver stream and the epochs of its sessions go by, and what the
// capability probe proved.
type instance struct {
	proc   proc
	nonce  string
	report *probe.Report
	probe  error // nil when the probe passed
	// recorded is set once the instance's start is in the log (the Codex
	// daemon transport records its end only then).
	recorded bool
}

// Watcher receives, in arrival order, every notification of an instance
// on cbth's connection (instance names it by its nonce), and
// Reconnected when that connection was made again to the same process:
// what was sent in between is lost, and thread subscriptions belong to a
// connection, so a watcher resumes the threads it follows again.
type Watcher interface {
	Notification(instance string, msg appserver.Message)
	Reconnected(instance string)
}

// endpoint is what cbth knows of one app-server: its running, recorded
// instance, the last status that instance reported of each thread, the
// threads it started that have not begun a turn (they have no rollout
// yet), and the watchers its notifications go to. The shared app-server
// is one.
type endpoint struct {
	log  *slog.Logger
	book Log
	// ensure returns the running instance, starting or finding one.
	ensure func(ctx context.Context) (*instance, error)

	mu       sync.Mutex
	cur      *instance
	changed  chan struct{} // closed and replaced when cur changes
	status   map[string]string
	unborn   map[string]bool
	watchers []Watcher
}

func newEndpoint(log *slog.Logger, book Log) endpoint {
	return endpoint{log: log, book: book, changed: make(chan struct{}), status: map[string]string{}, unborn: map[string]bool{}}
}

// Watch adds a watcher (set them before anything starts).
func (e *endpoint) Watch(w Watcher) {
	e.mu.Lock()
	e.watchers = append(e.watchers, w)
	e.mu.Unlock()
}

func (e *endpoint) watching() []Watcher {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.watchers
}

// publish makes in the running instance: a new instance has loaded
// nothing, so what the last one reported is forgotten.
func (e *endpoint) publish(in *instance) {
	e.mu.Lock()
	e.cur = in
	e.status = map[string]string{}
	e.unborn = map[string]bool{}
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}

// retire forgets in once it ended.
func (e *endpoint) retire(in *instance) {
	e.mu.Lock()
	if e.cur == in {
		e.cur = nil
	}
	e.mu.Unlock()
}

// running is the current instance when it still runs, and the channel
// that closes when it changes.
func (e *endpoint) running() (*instance, chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur != nil {
		select {
		case <-e.cur.proc.Exited():
		default:
			return e.cur, e.changed
		}
	}
	return nil, e.changed
}

// Current returns the nonce of the running, recorded instance and whether
// its capability probe passed ("" when none runs); it starts nothing.
func (e *endpoint) Current() (nonce string, probed bool) {
	in, _ := e.running()
	if in == nil {
		return "", false
	}
	return in.nonce, in.probe == nil
}

// instanceOf is instance while it is the running one; ESTALE otherwise.
func (e *endpoint) instanceOf(nonce string) (*instance, error) {
	in, _ := e.running()
	if in == nil || in.nonce != nonce {
		return nil, errStale(nonce)
	}
	return in, nil
}

// Client returns cbth's connection to instance while it is the running
// one: the connection whose stream that instance's epochs number.
// ESTALE once it ended or another instance replaced it.
func (e *endpoint) Client(instance string) (*appserver.Client, error) {
	in, err := e.instanceOf(instance)
	if err != nil {
		return nil, err
	}
	return in.proc.Client(), nil
}

// Alive reports whether instance is still the running one.
func (e *endpoint) Alive(instance string) bool {
	_, err := e.instanceOf(instance)
	return err == nil
}

// ThreadStatus is the last status the running instance reported for a
// thread ("" when none was seen): thread/status/changed broadcasts, and
// the answers of thread/resume, which override what came before them.
func (e *endpoint) ThreadStatus(thread string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status[thread]
}

// AwaitingFirstTurn reports whether the running instance started thread
// (thread/started) and has not seen it begin a turn: Codex has no rollout
// of it yet, so no other connection can resume it or read its
// permissions (ErrAwaitingFirstTurn).
func (e *endpoint) AwaitingFirstTurn(thread string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.unborn[thread]
}

// awaitingFirstTurn is AwaitingFirstTurn of instance, false when it is no
// longer the running one (a new instance has loaded nothing).
func (e *endpoint) awaitingFirstTurn(instance, thread string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cur != nil && e.cur.nonce == instance && e.unborn[thread]
}

// born forgets thread as awaiting its first turn: a resume of it was
// answered, so it has a rollout (a thread forked from another one has
// one before any turn).
func (e *endpoint) born(thread string) {
	e.mu.Lock()
	delete(e.unborn, thread)
	e.mu.Unlock()
}

// noteStatus records a status read in an answer (thread/resume,
// thread/read) of instance, when it is still the running one.
func (e *endpoint) noteStatus(instance, thread, status string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur != nil && e.cur.nonce == instance {
		e.status[thread] = status
	}
}

// listen reads the notifications of one instance, on cbth's connection
// and, after a reconnection to the same process, on the new one
// (notifications sent in between are lost; the instance, and with it
// every session's epoch, stays the same). ready closes once the first
// subscription is in place, before anything learns of the instance.
func (e *endpoint) listen(in *instance, stop <-chan struct{}, ready chan struct{}) {
	once := sync.OnceFunc(func() { close(ready) })
	defer once()
	in.proc.Notifications(stop, e.log, func(first bool) {
		once()
		if first {
			return
		}
		for _, w := range e.watching() {
			w.Reconnected(in.nonce)
		}
	}, func(msg appserver.Message) {
		e.notice(in, msg)
		for _, w := range e.watching() {
			w.Notification(in.nonce, msg)
		}
	})
}

// notice keeps what a notification says of a thread, before any watcher
// hears of it: its status, and whether it has begun a turn. A thread is
// marked awaiting its first turn before a watcher could bind it, so that
// no delivery for its session can find it unmarked before that turn.
func (e *endpoint) notice(in *instance, msg appserver.Message) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur != in {
		return
	}
	switch msg.Method {
	case appserver.NoteThreadStarted:
		var n appserver.ThreadStartedNote
		if json.Unmarshal(msg.Params, &n) != nil || n.Thread.ID == "" || ignoredThread(n.Thread) {
			return
		}
		e.unborn[n.Thread.ID] = true
	case appserver.NoteThreadClosed:
		var n appserver.ThreadClosedNote
		if json.Unmarshal(msg.Params, &n) == nil {
			delete(e.unborn, n.ThreadID) // unloaded: it is gone from this instance
		}
	case appserver.NoteThreadStatusChanged:
		var n appserver.ThreadStatusChangedNote
		if json.Unmarshal(msg.Params, &n) != nil || n.ThreadID == "" {
			return
		}
		e.status[n.ThreadID] = n.Status.Type
		if n.Status.Type == appserver.ThreadActive {
			delete(e.unborn, n.ThreadID) // a turn started: Codex wrote the rollout as it did
		}
	}
}

// ignoredThread reports whether a started thread is Codex's own and no
// user's: an ephemeral one, or the TUI's title generator.
func ignoredThread(t appserver.Thread) bool {
	return t.Ephemeral || (t.ThreadSource != nil && *t.ThreadSource == "thread_title")
}

// IgnoredThread is ignoredThread for the foregrounds' watcher, which binds
// a new thread only when it is a user's.
func IgnoredThread(t appserver.Thread) bool { return ignoredThread(t) }
