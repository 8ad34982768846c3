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
	"github.com/cbth-dev/cbth/engine/errs"
	"github.com/cbth-dev/cbth/internal/sockfile"
)

// Server serves one model object's socket.
type Server struct {
	// Request carries the model identity, native id and defaults; each
	// send fills in the messages.
	Request driver.Request
	Driver  driver.Driver
	Store   session.Store
	// UID is the only peer user allowed to connect.
	UID      int
	NewRunID func() string

	mu       sync.Mutex
	sessions map[string]*sess
	runs     map[string]*run
	wg       sync.WaitGroup
}

type sess struct {
	name string
	mu   sync.Mutex
	seq  uint64
	subs map[*conn]bool
	// msgRuns maps client message ids to their run: a retried send
	// finds its run here instead of starting a second one.
	msgRuns map[string]string
	active  *run
}

type run struct {
	id     string
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
	s.mu.Lock()
	if s.sessions == nil {
		s.sessions = map[string]*sess{}
		s.runs = map[string]*run{}
	}
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

func (s *Server) session(name string) (*sess, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[name]; ss != nil {
		return ss, nil
	}
	if err := s.Store.Ensure(name); err != nil {
		return nil, err
	}
	last, err := s.Store.LastSeq(name)
	if err != nil {
		return nil, err
	}
	ss := &sess{name: name, seq: last, subs: map[*conn]bool{}, msgRuns: map[string]string{}}
	msgs, err := s.Store.Messages(name)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if m.ID != "" {
			ss.msgRuns[m.ID] = m.Run
		}
	}
	s.sessions[name] = ss
	return ss, nil
}

// emit stores e with the next event id and writes it to every subscriber.
// Holding the session lock across the writes keeps one order for all
// readers and makes a slow reader slow down the run instead of a buffer.
func (ss *sess) emit(store session.Store, e stream.Event) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.emitLocked(store, e)
}

func (ss *sess) emitLocked(store session.Store, e stream.Event) error {
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
	ss, err := s.session(req.Session)
	if err != nil {
		return c.writeErr(err)
	}
	ss.mu.Lock()
	if req.ID != "" {
		if runID, ok := ss.msgRuns[req.ID]; ok {
			// A retry: show the original run (and follow it if live).
			err := s.Store.Events(ss.name, 0, func(_ uint64, e stream.Event) error {
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
		return c.writeErr(errs.New(errs.EAGAIN, "session %s is busy with run %s", ss.name, ss.active.id))
	}
	history, err := s.Store.Messages(ss.name)
	if err != nil {
		ss.mu.Unlock()
		return c.writeErr(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	rn := &run{id: s.NewRunID(), cancel: cancel, done: make(chan struct{})}
	for _, m := range req.Messages {
		if err := s.Store.AppendMessage(ss.name, session.Record{ID: req.ID, Run: rn.id, Role: m.Role, Content: m.Content}); err != nil {
			ss.mu.Unlock()
			cancel()
			return c.writeErr(err)
		}
	}
	if req.ID != "" {
		ss.msgRuns[req.ID] = rn.id
	}
	ss.active = rn
	ss.subs[c] = true
	ss.mu.Unlock()

	s.mu.Lock()
	s.runs[rn.id] = rn
	s.mu.Unlock()
	msgs := make([]driver.Message, 0, len(history)+len(req.Messages))
	for _, h := range history {
		msgs = append(msgs, driver.Message{Role: h.Role, Content: h.Content})
	}
	msgs = append(msgs, req.Messages...)
	s.wg.Add(1)
	// The run belongs to the session, not to the connection: its context
	// is the server's, so it goes on when the client disconnects.
	go func() {
		defer s.wg.Done()
		s.execute(rctx, ss, rn, msgs)
	}()
	return nil
}

func (s *Server) execute(ctx context.Context, ss *sess, rn *run, msgs []driver.Message) {
	defer close(rn.done)
	defer rn.cancel()
	_ = s.Store.SetState(ss.name, session.StateRunning)
	req := s.Request
	req.Messages = msgs
	var text strings.Builder
	emit := func(e stream.Event) error {
		e.Run = rn.id
		return ss.emit(s.Store, e)
	}
	err := emit(stream.Event{Type: stream.TypeStart, Model: req.Model})
	if err == nil {
		err = s.Driver.Stream(ctx, req, stream.SinkFunc(func(e stream.Event) error {
			switch e.Type {
			case stream.TypeStart, stream.TypeDone, stream.TypeError:
				return errs.New(errs.EINTERNAL, "driver emitted %s", e.Type)
			case stream.TypeDelta:
				text.WriteString(e.Text)
			}
			return emit(e)
		}))
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
	if status == stream.StatusOK {
		_ = s.Store.AppendMessage(ss.name, session.Record{Run: rn.id, Role: driver.RoleAssistant, Content: text.String()})
		_ = s.Store.SetLatest(ss.name, text.String())
	}
	_ = s.Store.SetState(ss.name, session.StateIdle)
	ss.active = nil
	rn.status = status
	_ = ss.emitLocked(s.Store, stream.Event{Type: stream.TypeDone, Run: rn.id, Status: status})
	_ = s.Store.SetState(ss.name, session.StateIdle) // also flushes the done frame
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
	ss, err := s.session(req.Session)
	if err != nil {
		return c.writeErr(err)
	}
	// Replay and subscribe under the session lock, so no live event falls
	// between the two.
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if err := s.Store.Events(ss.name, after, func(_ uint64, e stream.Event) error { return c.write(e) }); err != nil {
		return err
	}
	ss.subs[c] = true
	return nil
}
