// Package appserver is a JSON-RPC client for the Codex CLI's app-server
// (`codex app-server`), over its two local transports: WebSocket on a unix
// socket (`--listen unix://PATH`, DialUnix) and newline-delimited JSON on a
// child's stdio (StartStdio).
//
// The client only ever writes what its caller asks for. In particular it
// never answers a request from the app-server: approval requests reach every
// subscribed connection, any of them may answer, and they belong to the
// person at the terminal (spec/codex-cli.md).
package appserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/cbth-dev/cbth/internal/errs"
)

// DefaultSubscriberBuffer is how many messages a subscriber may fall behind
// before its subscription ends with ErrOverflow. A turn streams a few
// dozen notifications; the margin covers a subscriber busy writing events.
// The buffer is allocated whole (about 140 KiB at this size).
const DefaultSubscriberBuffer = 1024

// Options tune a Client. The zero value is usable.
type Options struct {
	Logger           *slog.Logger // default: discard
	SubscriberBuffer int          // default DefaultSubscriberBuffer
}

// Client is one JSON-RPC connection to an app-server.
type Client struct {
	t      Transport
	log    *slog.Logger
	buf    int
	nextID atomic.Int64

	mu      sync.Mutex
	pending map[int64]chan Message
	subs    map[*Subscription]struct{}
	err     error // why the connection ended; set once, before done closes

	done      chan struct{}
	closeOnce sync.Once
}

// New starts a client on t; it reads until t fails or Close is called.
func New(t Transport, opts Options) *Client {
	c := &Client{
		t:       t,
		log:     opts.Logger,
		buf:     opts.SubscriberBuffer,
		pending: map[int64]chan Message{},
		subs:    map[*Subscription]struct{}{},
		done:    make(chan struct{}),
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.buf <= 0 {
		c.buf = DefaultSubscriberBuffer
	}
	go c.read()
	return c
}

// Done is closed when the connection has ended, for whatever reason.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err says why the connection ended (wrapping ErrClosed), or nil while it
// is up.
func (c *Client) Err() error {
	select {
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.err
	default:
		return nil
	}
}

// Close ends the connection. Calls waiting for an answer fail with
// EHOSTDOWN; subscriptions end.
func (c *Client) Close() error {
	c.shutdown(errs.Wrap(errs.EHOSTDOWN, ErrClosed, "closed by cbth"))
	return c.t.Close()
}

func (c *Client) shutdown(cause error) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.err = cause
		pending, subs := c.pending, c.subs
		c.pending, c.subs = nil, nil
		c.mu.Unlock()
		close(c.done)
		for _, ch := range pending {
			close(ch)
		}
		for s := range subs {
			s.end(cause)
		}
	})
}

func (c *Client) read() {
	for {
		raw, err := c.t.Read(context.Background())
		if err != nil {
			c.shutdown(errs.Wrap(errs.EHOSTDOWN, fmt.Errorf("%w: %w", ErrClosed, err), "codex app-server connection lost"))
			c.t.Close()
			return
		}
		m, err := Decode(raw)
		if err != nil {
			// One unreadable message says nothing about the ones around it;
			// dropping it loses at most what it carried, and the log says so.
			c.log.Warn("codex app-server sent an unreadable message", "err", err)
			continue
		}
		switch m.Kind {
		case KindResponse:
			c.answer(m)
		default:
			c.publish(m)
		}
	}
}

func (c *Client) answer(m Message) {
	n, ok := m.ID.Int()
	c.mu.Lock()
	ch := c.pending[n]
	delete(c.pending, n)
	c.mu.Unlock()
	if !ok || ch == nil {
		// The caller gave up (timeout) or the id is not one of ours.
		c.log.Info("codex app-server answered a request nobody waits for", "id", m.ID.String())
		return
	}
	ch <- m
}

func (c *Client) publish(m Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.subs {
		select {
		case s.c <- m:
		default:
			delete(c.subs, s)
			s.end(errs.Wrap(errs.EAGAIN, ErrOverflow, "subscription to codex app-server dropped after %d unread messages", cap(s.c)))
		}
	}
}

// Call sends a request and waits for its answer, decoding the result into
// result (unless nil). The outcome is one of:
//   - nil: the app-server accepted the request;
//   - an error wrapping *RPCError (see RPCCode): it refused it;
//   - ETIMEDOUT (ctx ended) or EHOSTDOWN (the connection went): no answer,
//     so whether the request took effect is unknown.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	raw, err := marshalParams(params)
	if err != nil {
		return errs.Wrap(errs.EINVAL, err, "codex %s params", method)
	}
	id := c.nextID.Add(1)
	msg, err := Encode(Message{Kind: KindRequest, ID: IntID(id), Method: method, Params: raw})
	if err != nil {
		return errs.Wrap(errs.EINVAL, err, "codex %s", method)
	}
	if ctx.Err() != nil {
		return noAnswer(ctx, method)
	}
	ch := make(chan Message, 1)
	c.mu.Lock()
	if c.pending == nil {
		c.mu.Unlock()
		return c.closedErr(method)
	}
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		if c.pending != nil {
			delete(c.pending, id)
		}
		c.mu.Unlock()
	}

	if err := c.t.Write(ctx, msg); err != nil {
		forget()
		if ctx.Err() != nil {
			return noAnswer(ctx, method)
		}
		return errs.Wrap(errs.EHOSTDOWN, fmt.Errorf("%w: %w", ErrClosed, err), "codex %s not sent", method)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return c.closedErr(method)
		}
		if m.Error != nil {
			return answerError(method, m.Error)
		}
		if result != nil {
			if err := json.Unmarshal(m.Result, result); err != nil {
				return errs.Wrap(errs.EINTERNAL, err, "codex %s: unexpected result %s", method, clip(m.Result))
			}
		}
		return nil
	case <-ctx.Done():
		forget()
		return noAnswer(ctx, method)
	case <-c.done:
		return c.closedErr(method)
	}
}

func noAnswer(ctx context.Context, method string) error {
	return errs.Wrap(errs.ETIMEDOUT, ctx.Err(), "codex %s: no answer", method)
}

func (c *Client) closedErr(method string) error {
	<-c.done
	c.mu.Lock()
	cause := c.err
	c.mu.Unlock()
	return errs.Wrap(errs.EHOSTDOWN, cause, "codex %s: no answer", method)
}

// Notify sends a notification (no answer comes).
func (c *Client) Notify(ctx context.Context, method string, params any) error {
	raw, err := marshalParams(params)
	if err != nil {
		return errs.Wrap(errs.EINVAL, err, "codex %s params", method)
	}
	msg, err := Encode(Message{Kind: KindNotification, Method: method, Params: raw})
	if err != nil {
		return errs.Wrap(errs.EINVAL, err, "codex %s", method)
	}
	return c.write(ctx, method, msg)
}

// Respond answers the app-server's request id with result. Only a caller
// acting for the person who owns the decision may call it (see the package
// comment); nothing in this package does.
func (c *Client) Respond(ctx context.Context, id ID, result any) error {
	raw, err := json.Marshal(result)
	if err != nil {
		return errs.Wrap(errs.EINVAL, err, "answer to codex request %s", id)
	}
	msg, err := Encode(Message{Kind: KindResponse, ID: id, Result: raw})
	if err != nil {
		return errs.Wrap(errs.EINVAL, err, "answer to codex request %s", id)
	}
	return c.write(ctx, "response "+id.String(), msg)
}

func (c *Client) write(ctx context.Context, what string, msg []byte) error {
	select {
	case <-c.done:
		return c.closedErr(what)
	default:
	}
	if err := c.t.Write(ctx, msg); err != nil {
		if ctx.Err() != nil {
			return errs.Wrap(errs.ETIMEDOUT, ctx.Err(), "codex %s not sent", what)
		}
		return errs.Wrap(errs.EHOSTDOWN, fmt.Errorf("%w: %w", ErrClosed, err), "codex %s not sent", what)
	}
	return nil
}

func marshalParams(params any) (json.RawMessage, error) {
	if params == nil {
		return nil, nil
	}
	if raw, ok := params.(json.RawMessage); ok {
		return raw, nil
	}
	return json.Marshal(params)
}

// Subscription receives the app-server's notifications and requests, in
// the order they arrived, from the moment Subscribe returns.
type Subscription struct {
	c      chan Message
	client *Client
	once   sync.Once
	err    atomic.Pointer[error]
}

// Subscribe starts a subscription. A subscriber that falls more than the
// buffer behind is dropped (C closes, Err wraps ErrOverflow) rather than
// slowing the connection or losing a message silently.
func (c *Client) Subscribe() *Subscription {
	s := &Subscription{c: make(chan Message, c.buf), client: c}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subs == nil {
		s.end(c.err)
		return s
	}
	c.subs[s] = struct{}{}
	return s
}

// C delivers the messages; it is closed when the subscription ends.
func (s *Subscription) C() <-chan Message { return s.c }

// Err says why C closed: the connection ended, the subscriber fell behind,
// or Close was called (nil).
func (s *Subscription) Err() error {
	if p := s.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.client.mu.Lock()
	if s.client.subs != nil {
		delete(s.client.subs, s)
	}
	s.client.mu.Unlock()
	s.end(nil)
}

func (s *Subscription) end(err error) {
	s.once.Do(func() {
		if err != nil {
			s.err.Store(&err)
		}
		close(s.c)
	})
}

// IsClosed reports whether err means the connection is gone.
func IsClosed(err error) bool { return errors.Is(err, ErrClosed) }
