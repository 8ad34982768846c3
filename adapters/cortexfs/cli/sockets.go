package cli

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/runner"
	"github.com/cbth-dev/cbth/adapters/cortexfs/session"
	"github.com/cbth-dev/cbth/adapters/cortexfs/socket"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tool"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
	"github.com/cbth-dev/cbth/internal/sockfile"
)

// ModelSockets serves the .sock of every session=socket model and every
// agent of the registered trees, for as long as its context lives: the
// daemon keeps one and calls Sync whenever a tree's registrations change.
type ModelSockets struct {
	Ctx context.Context // the serving lifetime
	UID int
	Now func() time.Time
	Log *slog.Logger
	// Sessions, when set, records sessions as events (the daemon's log);
	// nil keeps them as plain files.
	Sessions session.Log
	// Jobs is what agents' cbth.job.submit calls reach.
	Jobs tool.Jobs
	// Shared maps an object ("agent/coder", "model/debug/echo") to the
	// shared space its scope-shared sessions live in (config.toml
	// [[ctx.shared]]); an object not in it refuses scope shared (EACCES).
	Shared map[string]string

	mu      sync.Mutex
	running map[string]*served // root \0 object rel path
}

type served struct {
	stop context.CancelFunc
	srv  *socket.Server
}

// Sync starts the sockets of set's socket models and agents under root and
// stops those of root whose object went away.
func (m *ModelSockets) Sync(root string, set tree.Set) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running == nil {
		m.running = map[string]*served{}
	}
	want := map[string]bool{}
	for _, o := range set.Objects {
		if o.Session == object.SessionSocket && (o.Kind == object.KindModel || o.Kind == object.KindAgent) {
			b, _ := jsonKey(o)
			want[root+"\x00"+o.Rel()+"\x00"+b] = true
		}
	}
	for key, s := range m.running {
		if strings.HasPrefix(key, root+"\x00") && !want[key] {
			s.stop()
			delete(m.running, key)
		}
	}
	for key := range want {
		if _, ok := m.running[key]; ok {
			continue
		}
		rel := strings.SplitN(key[len(root)+1:], "\x00", 2)[0]
		ctx, cancel := context.WithCancel(m.Ctx)
		s := &served{stop: cancel}
		m.running[key] = s
		srv, ln, err := m.prepare(root, rel)
		if err != nil {
			m.Log.Error("object socket", "root", root, "object", rel, "err", err)
			cancel()
			delete(m.running, key) // the next Sync tries again
			continue
		}
		s.srv = srv
		go func() {
			defer ln.Close()
			if err := srv.Serve(ctx, ln.ln); err != nil && ctx.Err() == nil {
				m.Log.Error("object socket", "root", root, "object", rel, "err", err)
			}
		}()
	}
}

// jsonKey makes an object's registration part of its key, so a changed
// agent (another model, other tools) is served anew.
func jsonKey(o object.Object) (string, error) {
	return strings.Join([]string{o.Model, strings.Join(o.Tools, ","), o.Root, o.Cwd, o.Driver.String(), o.Delivery}, "|"), nil
}

// Serves reports whether the socket of object rel ("model/P/M",
// "agent/NAME") of the tree at root is being served.
func (m *ModelSockets) Serves(root, rel string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, s := range m.running {
		parts := strings.Split(key, "\x00")
		if len(parts) >= 2 && parts[0] == root && parts[1] == rel && s.srv != nil {
			return true
		}
	}
	return false
}

// Agent returns the server of agent nm: in the one tree that has it. More
// than one tree with that agent is EINVAL (the thread id names no tree).
func (m *ModelSockets) Agent(nm string) (*socket.Server, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var found *socket.Server
	n := 0
	for key, s := range m.running {
		parts := strings.Split(key, "\x00")
		if len(parts) >= 2 && parts[1] == "agent/"+nm && s.srv != nil {
			found, n = s.srv, n+1
		}
	}
	switch {
	case n == 0:
		return nil, errs.New(errs.ENOENT, "no agent %s is served", nm)
	case n > 1:
		return nil, errs.New(errs.EINVAL, "agent %s is served in %d trees", nm, n)
	}
	return found, nil
}

func (m *ModelSockets) prepare(root, rel string) (*socket.Server, *Prepared, error) {
	var srv *socket.Server
	var p *Prepared
	var err error
	if strings.HasPrefix(rel, "agent/") {
		srv, p, err = PrepareAgent(root, strings.TrimPrefix(rel, "agent/"), m.UID, m.Sessions, m.Jobs)
	} else {
		srv, p, err = PrepareModel(root, strings.TrimPrefix(rel, "model/"), m.UID, io.Discard, m.Now, m.Sessions)
	}
	if err != nil {
		return nil, nil, err
	}
	if space := m.Shared[rel]; space != "" {
		if srv.Shared, err = SharedStore(m.Sessions, root, rel, space, m.UID, srv.Identity()); err != nil {
			p.Close()
			return nil, nil, err
		}
	}
	return srv, p, nil
}

// SharedDir is where an object's sessions in shared space live:
// <tree>/shared/<space>/agent/<name>/session/ for an agent,
// <tree>/shared/<space>/model/<provider>/<model>.d/session/ for a model.
func SharedDir(ctxRoot, rel, space string) string {
	if strings.HasPrefix(rel, "model/") {
		return filepath.Join(ctxRoot, "shared", space, rel+".d", "session")
	}
	return filepath.Join(ctxRoot, "shared", space, rel, "session")
}

// SharedStore is the store of an object's sessions in a shared space.
func SharedStore(log session.Log, ctxRoot, rel, space string, uid int, model string) (session.Store, error) {
	dir := SharedDir(ctxRoot, rel, space)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, errs.Wrap(errs.EINTERNAL, err, "create shared session dir")
	}
	if log == nil {
		return &session.Files{Dir: dir, Model: model}, nil
	}
	return &session.Logged{Log: log, Root: ctxRoot, Object: rel, Dir: dir, Scope: session.ScopeShared, UID: uid, Model: model}, nil
}

// Prepared is a listening socket and what to release with it.
type Prepared struct {
	Path string // the socket's path
	ln   *sockfile.Listener
	done func()
}

// Close stops listening and releases the object's resources.
func (p *Prepared) Close() error {
	err := p.ln.Close()
	if p.done != nil {
		p.done()
	}
	return err
}

// PrepareModel builds a model socket's server and listens on its path.
func PrepareModel(ctxRoot, model string, uid int, stderr io.Writer, now func() time.Time, log session.Log) (*socket.Server, *Prepared, error) {
	id, err := name.ParseModel(model)
	if err != nil {
		return nil, nil, err
	}
	obj, err := runner.Load(filepath.Join(ctxRoot, "model", id.Provider, id.Model))
	if err != nil {
		return nil, nil, err
	}
	if obj.Session != object.SessionSocket {
		return nil, nil, errs.New(errs.EINVAL, "model %s has session=%s; a socket is only served for session=socket", id, obj.Session)
	}
	drvName, drv, err := runner.ProcessDrivers(stderr).Pick(obj.Driver.Resolve(object.RouteSocket))
	if err != nil {
		return nil, nil, err
	}
	drv = runner.LogCalls(drv, obj.Path, object.RouteSocket, drvName, "", now)
	dir := filepath.Join(ctxRoot, "home", strconv.Itoa(uid), "model", id.Provider, id.Model+".d", "session")
	store := sessionStore(log, ctxRoot, "model/"+id.String(), dir, uid, id.String())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, errs.Wrap(errs.EINTERNAL, err, "create session dir")
	}
	ln, err := socket.Listen(obj.Path + ".sock")
	if err != nil {
		return nil, nil, err
	}
	srv := &socket.Server{Driver: drv, Store: store, UID: uid, Request: socketRequest(obj, id), NewRunID: runner.RunID}
	return srv, &Prepared{Path: obj.Path + ".sock", ln: ln}, nil
}

// PrepareAgent builds an agent socket's server and listens on its path.
// Sessions live under home/<uid>/agent/<name>/session/, apart from the
// agent's root: rebuilding the root never touches them.
func PrepareAgent(ctxRoot, nm string, uid int, log session.Log, jobs tool.Jobs) (*socket.Server, *Prepared, error) {
	obj, err := runner.Load(filepath.Join(ctxRoot, "agent", nm))
	if err != nil {
		return nil, nil, err
	}
	if obj.Kind != object.KindAgent {
		return nil, nil, errs.New(errs.EINVAL, "agent/%s is a %s", nm, obj.Kind)
	}
	env := runner.Env{Drivers: runner.ProcessDrivers(io.Discard), Jobs: jobs}
	loop, closeRoot, err := runner.LoadAgent(obj, env)
	if err != nil {
		return nil, nil, err
	}
	dir := filepath.Join(ctxRoot, "home", strconv.Itoa(uid), "agent", nm, "session")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		closeRoot()
		return nil, nil, errs.Wrap(errs.EINTERNAL, err, "create session dir")
	}
	ln, err := socket.Listen(obj.Path + ".sock")
	if err != nil {
		closeRoot()
		return nil, nil, err
	}
	store := sessionStore(log, ctxRoot, "agent/"+nm, dir, uid, loop.Request.Model)
	srv := &socket.Server{Turn: loop, Model: loop.Request.Model, Store: store, UID: uid, NewRunID: runner.RunID}
	return srv, &Prepared{Path: obj.Path + ".sock", ln: ln, done: closeRoot}, nil
}

func sessionStore(log session.Log, root, obj, dir string, uid int, model string) session.Store {
	if log == nil {
		return &session.Files{Dir: dir, Model: model}
	}
	return &session.Logged{Log: log, Root: root, Object: obj, Dir: dir, Scope: session.ScopePrivate, UID: uid, Model: model}
}

// Running counts the runs going on in every served socket: the daemon
// stays up for them (a run belongs to its session, not to a connection).
func (m *ModelSockets) Running() int {
	m.mu.Lock()
	var srvs []*socket.Server
	for _, s := range m.running {
		if s.srv != nil {
			srvs = append(srvs, s.srv)
		}
	}
	m.mu.Unlock()
	n := 0
	for _, s := range srvs {
		n += s.Running()
	}
	return n
}
