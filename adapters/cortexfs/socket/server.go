package socket

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/session"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
	"github.com/cbth-dev/cbth/internal/sockfile"
)

// Run is what a run sees of its session.
type Run struct {
	ID      string
	Session string
	Scope   string
	// Cwd is the working directory the run was sent with (checked by
	// Turn.Cwd), or the session's.
	Cwd string
}

// Turn carries out one run of a socket: a model call for a model socket,
// the model + tool loop for an agent's. It emits body events (never
// start, error or done) and returns the messages the run adds to the
// session after the user's: for a model the answer, for an agent also
// the tool calls and their results.
type Turn interface {
	Run(ctx context.Context, r Run, history []driver.Message, emit func(stream.Event) error) ([]driver.Message, error)
}

// CwdChecker is a Turn that checks a send's cwd before the run starts
// (an agent: the cwd must lie inside its root). It returns the cwd to
// record: rooted and clean.
type CwdChecker interface {
	CheckCwd(cwd string) (string, error)
}

// ModelTurn is the Turn of a model socket: one driver call whose deltas
// make the answer.
type ModelTurn struct {
	Request driver.Request
	Driver  driver.Driver
}

// Run implements Turn.
func (m ModelTurn) Run(ctx context.Context, _ Run, history []driver.Message, emit func(stream.Event) error) ([]driver.Message, error) {
	req := m.Request
	req.Messages = history
	var text strings.Builder
	err := m.Driver.Stream(ctx, req, stream.SinkFunc(func(e stream.Event) error {
		switch e.Type {
		case stream.TypeStart, stream.TypeDone, stream.TypeError:
			return errs.New(errs.EINTERNAL, "driver emitted %s", e.Type)
		case stream.TypeDelta:
			text.WriteString(e.Text)
		}
		return emit(e)
	}))
	if err != nil {
		return nil, err
	}
	return []driver.Message{{Role: driver.RoleAssistant, Content: text.String()}}, nil
}

// Server serves one model or agent object's socket.
type Server struct {
	// Request carries the model identity, native id and defaults; each
	// send fills in the messages. With Driver it makes the ModelTurn used
	// when Turn is nil.
	Request driver.Request
	Driver  driver.Driver
	// Turn runs the runs; nil means ModelTurn{Request, Driver}.
	Turn Turn
	// Model is the identity start frames name (default Request.Model).
	Model string
	// Store keeps private sessions. Temp sessions live in memory only
	// and are dropped with the server; shared sessions need Shared, else
	// a send or resume in that scope is EACCES.
	Store  session.Store
	Shared session.Store
	// UID is the only peer user allowed to connect.
	temp *session.Memory
	// UID is the only peer user allowed to connect.
	UID      int
	NewRunID func() string

	mu       sync.Mutex
	ctx      context.Context // Serve's: runs live as long as it
	sessions map[string]*sess
	runs     map[string]*run
	wg       sync.WaitGroup
}

type sess struct {
	name  string // as the store knows it
	label string // as clients name it
	scope string
	store session.Store
	mu    sync.Mutex
	seq   uint64
	subs  map[*conn]bool
	// msgRuns maps client message ids to their run: a retried send
	// finds its run here instead of starting a second one.
	msgRuns map[string]string
	active  *run
}

type run struct {
	id     string
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	status string
}

type conn struct {
	nc *net.UnixConn
	mu sync.Mutex
}

// write sends one frame. It blocks while the peer does not read: that is
// the backpressure, and nothing queues behind it in memory.
func (c *conn) write(e stream.Event) error {
	b, err := stream.Encode(e)
	if err != nil {
		return err
	}
	return c.writeLine(b)
}

func (c *conn) writeLine(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.nc.Write(b)
	return err
}

func (c *conn) writeErr(err error) error {
	return c.write(stream.Event{Type: stream.TypeError, Code: errs.CodeOf(err), Message: stream.PublicMessage(err)})
}

// Listen creates a unix socket at path with mode 0600 (see
// sockfile.Listen). A stale socket file is replaced; a live one is EBUSY.
func Listen(path string) (*sockfile.Listener, error) {
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, errs.New(errs.EBUSY, "%s is already served", path)
	}
	ln, err := sockfile.Listen(path)
	if err != nil {
		return nil, errs.Wrap(errs.EINTERNAL, err, "listen")
	}
	return ln, nil
}

// Serve accepts connections until ctx ends or ln fails. Runs already
// started finish before Serve returns.
func (s *Server) Serve(ctx context.Context, ln *sockfile.Listener) error {
	s.init()
	s.mu.Lock()
	s.ctx = ctx
	s.mu.Unlock()
	go func() { <-ctx.Done(); ln.Close() }()
	var conns sync.WaitGroup
	defer func() { conns.Wait(); s.wg.Wait() }()
	for {
		nc, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return errs.Wrap(errs.EINTERNAL, err, "accept")
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			s.handle(ctx, nc)
		}()
	}
}

func (s *Server) init() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions == nil {
		s.sessions = map[string]*sess{}
		s.runs = map[string]*run{}
	}
}

// serveCtx is the context runs started outside a connection live in:
// Serve's, else fallback's.
func (s *Server) serveCtx(fallback context.Context) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx != nil {
		return s.ctx
	}
	return context.WithoutCancel(fallback)
}

func (s *Server) handle(ctx context.Context, nc *net.UnixConn) {
	c := &conn{nc: nc}
	defer func() {
		s.unsubscribe(c)
		nc.Close()
	}()
	if uid, err := sockfile.PeerUID(nc); err != nil || uid != s.UID {
		c.writeErr(errs.New(errs.EACCES, "permission denied"))
		return
	}
	go func() { <-ctx.Done(); nc.Close() }()
	r := bufio.NewReaderSize(nc, MaxFrame+1)
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// Too large: skip the rest of the line without holding it.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.ReadSlice('\n')
			}
			if werr := c.writeErr(errs.New(errs.EMSGSIZE, "frame larger than %d bytes", MaxFrame)); werr != nil || err != nil {
				return
			}
			continue
		}
		if err != nil && (len(line) == 0 || err != io.EOF) {
			return
		}
		frame := strings.TrimSpace(string(line))
		if frame == "" {
			if err != nil {
				return
			}
			continue
		}
		req, perr := ParseRequest([]byte(frame))
		if perr != nil {
			if c.writeErr(perr) != nil {
				return
			}
			continue
		}
		if s.dispatch(ctx, c, req) != nil || err != nil {
			return
		}
	}
}

func (s *Server) dispatch(ctx context.Context, c *conn, req Request) error {
	switch req.Op {
	case OpPing:
		return c.write(stream.Event{Type: stream.TypePong})
	case OpCancel:
		return s.cancel(c, req.ID)
	case OpResume:
		return s.resume(c, req)
	default:
		return s.send(ctx, c, req)
	}
}

func (s *Server) turn() Turn {
	if s.Turn != nil {
		return s.Turn
	}
	return ModelTurn{Request: s.Request, Driver: s.Driver}
}

// Identity is the model identity the server's start frames name.
func (s *Server) Identity() string { return s.model() }

func (s *Server) model() string {
	if s.Model != "" {
		return s.Model
	}
	return s.Request.Model
}

func (s *Server) store(scope string) (session.Store, error) {
	switch scope {
	case session.ScopeTemp:
		if s.temp == nil {
			s.temp = &session.Memory{}
		}
		return s.temp, nil
	case session.ScopeShared:
		if s.Shared == nil {
			return nil, errs.New(errs.EACCES, "shared sessions are not allowed for this object")
		}
		return s.Shared, nil
	}
	return s.Store, nil
}

// session finds or opens a session. cwd (already checked) is recorded
// when the session is new.
func (s *Server) session(name, scope, cwd string) (*sess, error) {
	if scope == "" {
		scope = session.ScopePrivate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := scope + "\x00" + name
	if ss := s.sessions[key]; ss != nil {
		return ss, nil
	}
	st, err := s.store(scope)
	if err != nil {
		return nil, err
	}
	if err := st.Ensure(name, session.Open{Scope: scope, Cwd: cwd}); err != nil {
		return nil, err
	}
	last, err := st.LastSeq(name)
	if err != nil {
		return nil, err
	}
	ss := &sess{name: name, label: name, scope: scope, store: st, seq: last, subs: map[*conn]bool{}, msgRuns: map[string]string{}}
	msgs, err := st.Messages(name)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if m.ID != "" {
			ss.msgRuns[m.ID] = m.Run
		}
	}
	s.sessions[key] = ss
	return ss, nil
}

// emit stores e with the next event id and writes it to every subscriber.
// Holding the session lock across the writes keeps one order for all
// readers and makes a slow reader slow down the run instead of a buffer.
func (ss *sess) emit(e stream.Event) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.emitLocked(e)
}

func (ss *sess) emitLocked(e stream.Event) error {
	store := ss.store
	ss.seq++
	e.ID = session.EventID(ss.seq)
	line, err := stream.Encode(e) // once, for the store and every reader
	if err != nil {
		return err
	}
	if err := store.AppendEvent(ss.name, line); err != nil {
		return err
	}
	for c := range ss.subs {
		if err := c.writeLine(line); err != nil {
			delete(ss.subs, c) // gone: the session goes on without it
		}
	}
	return nil
}

func (s *Server) unsubscribe(c *conn) {
	s.mu.Lock()
	list := make([]*sess, 0, len(s.sessions))
	for _, ss := range s.sessions {
		list = append(list, ss)
	}
	s.mu.Unlock()
	for _, ss := range list {
		ss.mu.Lock()
		delete(ss.subs, c)
		ss.mu.Unlock()
	}
}

func (s *Server) send(ctx context.Context, c *conn, req Request) error {
	cwd := req.Cwd
	if ck, ok := s.turn().(CwdChecker); ok {
		var err error
		if cwd, err = ck.CheckCwd(req.Cwd); err != nil {
			return c.writeErr(err)
		}
	}
	ss, err := s.session(req.Session, req.Scope, cwd)
	if err != nil {
		return c.writeErr(err)
	}
	st := ss.store
	ss.mu.Lock()
	if req.ID != "" {
		if runID, ok := ss.msgRuns[req.ID]; ok {
			// A retry: show the original run (and follow it if live).
			err := st.Events(ss.name, 0, func(_ uint64, e stream.Event) error {
				if e.Run == runID {
					return c.write(e)
				}
				return nil
			})
			if ss.active != nil && ss.active.id == runID {
				ss.subs[c] = true
			}
			ss.mu.Unlock()
			return err
		}
	}
	if ss.active != nil {
		ss.mu.Unlock()
		return c.writeErr(errs.New(errs.EAGAIN, "session %s is busy with run %s", ss.label, ss.active.id))
	}
	rn, msgs, err := s.begin(ctx, ss, req.ID, req.Messages)
	if err != nil {
		ss.mu.Unlock()
		return c.writeErr(err)
	}
	ss.subs[c] = true
	ss.mu.Unlock()
	s.launch(ss, rn, msgs, cwd)
	return nil
}

// begin records the user's messages of a new run and marks the session
// busy; the caller holds ss.mu.
func (s *Server) begin(ctx context.Context, ss *sess, msgID string, in []driver.Message) (*run, []driver.Message, error) {
	st := ss.store
	history, err := st.Messages(ss.name)
	if err != nil {
		return nil, nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	rn := &run{id: s.NewRunID(), ctx: rctx, cancel: cancel, done: make(chan struct{})}
	for _, m := range in {
		if err := st.AppendMessage(ss.name, session.RecordOf(msgID, rn.id, m)); err != nil {
			cancel()
			return nil, nil, err
		}
	}
	if msgID != "" {
		ss.msgRuns[msgID] = rn.id
	}
	ss.active = rn
	msgs := make([]driver.Message, 0, len(history)+len(in))
	for _, h := range history {
		msgs = append(msgs, h.Message())
	}
	return rn, append(msgs, in...), nil
}

func (s *Server) launch(ss *sess, rn *run, msgs []driver.Message, cwd string) {
	s.mu.Lock()
	s.runs[rn.id] = rn
	s.mu.Unlock()
	s.wg.Add(1)
	// The run belongs to the session, not to the connection: its context
	// is the server's, so it goes on when the client disconnects.
	go func() {
		defer s.wg.Done()
		s.execute(rn.ctx, ss, rn, msgs, cwd)
	}()
}

// Deliver starts a run in a private session as if a client had sent
// input with message id msgID, with no connection following it, and
// returns the run id and a channel closed when the run ends with its
// status. A session already running is EAGAIN; a msgID the session has
// seen returns its run (already true: replayed).
func (s *Server) Deliver(ctx context.Context, sessName, msgID, input string) (runID string, done <-chan struct{}, status func() string, replayed bool, err error) {
	if err := name.Valid(sessName); err != nil {
		return "", nil, nil, false, errs.Wrap(errs.EINVAL, err, "session")
	}
	s.init()
	ss, err := s.session(sessName, session.ScopePrivate, "")
	if err != nil {
		return "", nil, nil, false, err
	}
	ss.mu.Lock()
	if id, ok := ss.msgRuns[msgID]; ok && msgID != "" {
		ss.mu.Unlock()
		ch := make(chan struct{})
		close(ch)
		return id, ch, func() string { return "" }, true, nil
	}
	if ss.active != nil {
		ss.mu.Unlock()
		return "", nil, nil, false, errs.New(errs.EAGAIN, "session %s is busy with run %s", sessName, ss.active.id)
	}
	rn, msgs, err := s.begin(s.serveCtx(ctx), ss, msgID, []driver.Message{{Role: driver.RoleUser, Content: input}})
	ss.mu.Unlock()
	if err != nil {
		return "", nil, nil, false, err
	}
	s.launch(ss, rn, msgs, "")
	return rn.id, rn.done, func() string { return rn.status }, false, nil
}

// Busy says whether a private session has a run going on.
func (s *Server) Busy(sessName string) bool {
	s.mu.Lock()
	ss := s.sessions[session.ScopePrivate+"\x00"+sessName]
	s.mu.Unlock()
	if ss == nil {
		return false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.active != nil
}

func (s *Server) execute(ctx context.Context, ss *sess, rn *run, msgs []driver.Message, cwd string) {
	defer close(rn.done)
	defer rn.cancel()
	st := ss.store
	_ = st.SetState(ss.name, fsm.CtxSessionActive)
	emit := func(e stream.Event) error {
		e.Run = rn.id
		return ss.emit(e)
	}
	var added []driver.Message
	err := emit(stream.Event{Type: stream.TypeStart, Model: s.model()})
	if err == nil {
		added, err = s.turn().Run(ctx, Run{ID: rn.id, Session: ss.label, Scope: ss.scope, Cwd: cwd}, msgs, emit)
	}
	status := stream.StatusOK
	switch {
	case driver.Canceled(ctx, err):
		status = stream.StatusCancelled
	case err != nil:
		status = stream.StatusError
		_ = emit(stream.Event{Type: stream.TypeError, Code: errs.CodeOf(err), Message: stream.PublicMessage(err)})
	}
	// The session is settled (history, latest, state, not busy) before
	// done goes out, so a client may send its next turn on seeing done.
	ss.mu.Lock()
	defer ss.mu.Unlock()
	final := fsm.CtxSessionIdle
	if status == stream.StatusOK {
		latest := ""
		for _, m := range added {
			_ = st.AppendMessage(ss.name, session.RecordOf("", rn.id, m))
			if m.Role == driver.RoleAssistant && len(m.ToolCalls) == 0 {
				latest = m.Content
			}
		}
		_ = st.SetLatest(ss.name, latest)
	} else if status == stream.StatusError {
		final = fsm.CtxSessionError
	}
	_ = st.SetState(ss.name, final)
	ss.active = nil
	rn.status = status
	_ = ss.emitLocked(stream.Event{Type: stream.TypeDone, Run: rn.id, Status: status})
	_ = st.SetState(ss.name, final) // also flushes the done frame
}

func (s *Server) cancel(c *conn, runID string) error {
	s.mu.Lock()
	rn := s.runs[runID]
	s.mu.Unlock()
	if rn == nil {
		return c.writeErr(errs.New(errs.ENOENT, "no run %s", runID))
	}
	rn.cancel()
	return nil
}

func (s *Server) resume(c *conn, req Request) error {
	var after uint64
	if req.After != "" {
		n, err := session.Seq(req.After)
		if err != nil {
			return c.writeErr(err)
		}
		after = n
	}
	ss, err := s.session(req.Session, req.Scope, "")
	if err != nil {
		return c.writeErr(err)
	}
	// Replay and subscribe under the session lock, so no live event falls
	// between the two.
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if err := ss.store.Events(ss.name, after, func(_ uint64, e stream.Event) error { return c.write(e) }); err != nil {
		return err
	}
	ss.subs[c] = true
	return nil
}

// Running counts the sessions with a run going on.
func (s *Server) Running() int {
	s.mu.Lock()
	list := make([]*sess, 0, len(s.sessions))
	for _, ss := range s.sessions {
		list = append(list, ss)
	}
	s.mu.Unlock()
	n := 0
	for _, ss := range list {
		ss.mu.Lock()
		if ss.active != nil {
			n++
		}
		ss.mu.Unlock()
	}
	return n
}
