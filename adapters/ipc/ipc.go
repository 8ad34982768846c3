// Package ipc is the daemon's local socket: JSONL frames over a unix
// socket that only the daemon's own user may use. It is an internal
// protocol; the stable surface is the CLI.
//
// Every request frame carries the protocol number and the client's
// version, and every response the daemon's, so the version handshake costs
// no extra round trip.
package ipc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/sockfile"
)

// Proto is the frame protocol number. A mismatch is refused with EVERSION.
//
//	2: requests and replies name every field as the job, batch and attempt
//	   views do (target_kind, source_thread_id, task_summary, batch_id, …),
//	   through the typed operation table (adapters/ipc/api).
//	3: the task operations (task.run, task.inspect, task.list, task.cancel),
//	   daemon.handover, and the Codex CLI (cli.*) and Desktop (desktop.*,
//	   batch.skip_head) operations of that release; ping, daemon.status and
//	   daemon.handover are answered whatever protocol a client speaks
//	   (Server.Versionless), so a newer client can find an older daemon idle
//	   and replace it.
//	4: listings page: wait's and cli.session.list's replies are pages
//	   (next), batch.list's cursor is a batch id; a client of 3 would list
//	   only a first page, or misread the cursor.
//	5: the Desktop writeback operations (desktop.note_arm_pending,
//	   desktop.note_arm, desktop.note_paused,
//	   desktop.note_boundary_crossed, desktop.relay.marker_issue,
//	   desktop.relay.scanner_bind, desktop.relay.consume_transcript,
//	   desktop.read_artifact, desktop.artifact_lease.revoke): a daemon of 4
//	   answers a client of 5 with EVERSION (run daemon restart), never
//	   with an unknown operation that would read as a refused CAS. The
//	   host-plugin operations (plugin.handshake, app_server.ensure,
//	   delivery.enqueue, delivery.inspect) came in the same release.
//	6: the agent's MCP tools (mcp.job_submit, mcp.task_run,
//	   mcp.job_status, mcp.job_list, mcp.job_cancel); job.submit and
//	   task.run resolve an empty target_kind from the thread;
//	   desktop.artifact_lease.issue (batch.inspect no longer issues
//	   recovery leases: a read appends nothing), and
//	   desktop.relay.consume_transcript names the bridge whose rollout it
//	   reads.
//	7: the time machine: batch.inspect, batch.inspect_head and job.query
//	   take as_of_seq or as_of; audit.history and thread.history tell a
//	   batch's, a job's and a thread's story; batch.supersede; watch.next
//	   waits for a commit and answers the live view.
//	8: watchers: task.run takes watch (a client of 7 would run a watcher
//	   as a plain task), task.output, mcp.watch_start, mcp.watch_stop and
//	   mcp.task_output; the task views name a watcher's wakes.
const Proto = 8

// MaxFrame is the largest frame either side accepts, newline included.
const MaxFrame = 1 << 20

// MaxResult is the largest encoded result a reply may carry: the frame
// less room for the reply around it.
const MaxResult = MaxFrame - 1024

// Request is one client frame.
type Request struct {
	Proto   int             `json:"proto"`
	Client  string          `json:"client,omitempty"`
	ID      uint64          `json:"id"`
	Op      string          `json:"op"`
	Args    json.RawMessage `json:"args,omitempty"`
	Attach  bool            `json:"attach,omitempty"`
	Timeout int64           `json:"timeout_ms,omitempty"`
}

// Response is one daemon frame.
type Response struct {
	Proto  int             `json:"proto"`
	Daemon string          `json:"daemon,omitempty"`
	ID     uint64          `json:"id"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *ErrorBody      `json:"error,omitempty"`
}

// ErrorBody is the wire form of an error: a stable code and a message for
// people.
type ErrorBody struct {
	Code    errs.Code `json:"code"`
	Message string    `json:"message"`
}

// Handler serves one request. The returned value is encoded as the result.
// ctx carries the request's connection (ConnOf).
type Handler func(ctx context.Context, req *Request) (any, error)

// Conn is the daemon's side of one client connection, for operations
// whose effect lasts as long as the connection: a foreground `cbth cli
// run` is attached exactly while its connection is open.
type Conn struct {
	// PeerPID is the client's process as the kernel recorded it (-1 when
	// it could not be read).
	PeerPID int

	mu      sync.Mutex
	onClose []func()
	closed  bool
}

// OnClose runs f once the connection has ended (the client closed it, or
// the daemon is stopping), after its last request was answered. On a
// connection already ended, f runs at once.
func (c *Conn) OnClose(f func()) {
	c.mu.Lock()
	if !c.closed {
		c.onClose = append(c.onClose, f)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	f()
}

func (c *Conn) close() {
	c.mu.Lock()
	fs := c.onClose
	c.onClose, c.closed = nil, true
	c.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

type connKey struct{}

// ConnOf returns the connection a request arrived on, or nil outside a
// handler.
func ConnOf(ctx context.Context) *Conn {
	c, _ := ctx.Value(connKey{}).(*Conn)
	return c
}

// Server accepts connections from the daemon's own user only.
type Server struct {
	Handler Handler
	Version string
	Log     *slog.Logger
	// UID is the only peer uid served; others get EACCES and nothing else.
	UID int
	// Ready, when set, is waited on before any request is handled, so
	// requests that arrive during start-up wait instead of failing.
	Ready <-chan struct{}
	// Versionless, when set, names the operations served to a client of
	// any protocol. Their requests and replies only ever gain fields.
	Versionless func(op string) bool
	// Refuse, when set, says why the process pid (the peer, as the
	// kernel recorded it) is not served at all ("" serves it): the
	// daemon refuses the programs it runs confined.
	Refuse func(pid int) string

	attached atomic.Int64
	conns    sync.WaitGroup
	mu       sync.Mutex
	open     map[*net.UnixConn]struct{}
}

// Attached returns how many connections have declared themselves
// integration clients and are still connected.
func (s *Server) Attached() int { return int(s.attached.Load()) }

// Listen creates the socket at path with mode 0600, never reachable there
// with a wider one (see sockfile.Listen), replacing a stale socket file:
// only the holder of the daemon lock may call it. Closing the listener
// removes the file.
func Listen(path string) (*sockfile.Listener, error) {
	ln, err := sockfile.Listen(path)
	if err != nil {
		return nil, errs.Wrap(errs.EINTERNAL, err, "listen %s", path)
	}
	return ln, nil
}

// Serve accepts connections until ctx ends or ln fails.
func (s *Server) Serve(ctx context.Context, ln *sockfile.Listener) error {
	s.mu.Lock()
	if s.open == nil { // a daemon whose socket file was removed serves a second listener
		s.open = map[*net.UnixConn]struct{}{}
	}
	s.mu.Unlock()
	go func() {
		<-ctx.Done()
		ln.Close()
		// Wake every connection waiting for its next request, but let
		// one in the middle of a request write its reply first (the
		// daemon.stop request's own, for one): a read deadline ends the
		// wait, a close would cut the reply.
		s.mu.Lock()
		for c := range s.open {
			c.SetReadDeadline(time.Now())
		}
		s.mu.Unlock()
	}()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				s.conns.Wait()
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		s.conns.Add(1)
		s.mu.Lock()
		s.open[c] = struct{}{}
		s.mu.Unlock()
		go func() {
			defer s.conns.Done()
			s.serveConn(ctx, c)
			s.mu.Lock()
			delete(s.open, c)
			s.mu.Unlock()
		}()
	}
}

// serveConn serves one client. A client that hangs up mid-reply costs the
// daemon nothing: writes to a net.Conn report EPIPE as an error and never
// raise SIGPIPE, whatever descriptor the connection landed on.
func (s *Server) serveConn(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	w := bufio.NewWriter(c)
	uid, err := sockfile.PeerUID(c)
	if err != nil || uid != s.UID {
		// Say no and nothing else: no version, no detail about the daemon.
		s.Log.Warn("refused connection", "peer_uid", uid, "err", err)
		writeFrame(w, Response{Proto: Proto, OK: false, Error: &ErrorBody{Code: errs.EACCES, Message: "permission denied"}})
		return
	}
	if s.Ready != nil {
		select {
		case <-s.Ready:
		case <-ctx.Done():
			return
		}
	}
	r := bufio.NewReader(c)
	attached := false
	conn := &Conn{PeerPID: -1}
	if pid, err := sockfile.PeerPID(c); err == nil {
		conn.PeerPID = pid
	}
	if s.Refuse != nil {
		if why := s.Refuse(conn.PeerPID); why != "" {
			s.Log.Warn("refused a confined program's connection", "peer_pid", conn.PeerPID, "why", why)
			// The refusal answers the first request (read for its id,
			// never acted on), so the client reads it rather than a
			// closed connection.
			var req Request
			c.SetReadDeadline(time.Now().Add(time.Second))
			if line, err := readFrame(r); err == nil {
				_ = json.Unmarshal(bytes.TrimSpace(line), &req)
			}
			writeFrame(w, s.fail(req.ID, errs.New(errs.EACCES, "permission denied: %s, and cbth acts for no confined program", why)))
			return
		}
	}
	ctx = context.WithValue(ctx, connKey{}, conn)
	defer func() {
		// What the connection held is let go before it stops counting as
		// attached, so the daemon is never idle with a foreground still
		// recorded live.
		conn.close()
		if attached {
			s.attached.Add(-1)
		}
	}()
	for {
		line, err := readFrame(r)
		if errors.Is(err, errFrameTooLong) {
			writeFrame(w, s.fail(0, errs.New(errs.EMSGSIZE, "frame longer than %d bytes", MaxFrame)))
			return
		}
		if err != nil {
			return // EOF or a closed connection
		}
		if !utf8.Valid(line) {
			// encoding/json would read the bad bytes as U+FFFD: refuse
			// rather than act on text the client did not send.
			if !writeFrame(w, s.fail(0, errs.New(errs.EINVAL, "request frame is not valid UTF-8"))) {
				return
			}
			continue
		}
		var req Request
		if err := json.Unmarshal(bytes.TrimSpace(line), &req); err != nil {
			if !writeFrame(w, s.fail(0, errs.Wrap(errs.EINVAL, err, "malformed request frame"))) {
				return
			}
			continue
		}
		if req.Proto != Proto && (s.Versionless == nil || !s.Versionless(req.Op)) {
			writeFrame(w, s.fail(req.ID, errs.New(errs.EVERSION, "protocol %d is not %d: client %s, daemon %s", req.Proto, Proto, req.Client, s.Version)))
			return
		}
		if req.Attach && !attached {
			attached = true
			s.attached.Add(1)
		}
		res, err := s.Handler(ctx, &req)
		var resp Response
		if err != nil {
			resp = s.fail(req.ID, err)
		} else {
			b, merr := Marshal(res)
			switch {
			case merr != nil:
				resp = s.fail(req.ID, errs.Wrap(errs.EINTERNAL, merr, "encode result"))
			case len(b) > MaxResult:
				resp = s.fail(req.ID, errs.New(errs.EMSGSIZE, "%s result is %d bytes, over the frame limit; page through it", req.Op, len(b)))
			default:
				resp = Response{Proto: Proto, Daemon: s.Version, ID: req.ID, OK: true, Result: b}
			}
		}
		if !writeFrame(w, resp) {
			return
		}
	}
}

func (s *Server) fail(id uint64, err error) Response {
	code := errs.CodeOf(err)
	if code == errs.EINTERNAL {
		s.Log.Error("internal error", "err", err)
	}
	return Response{Proto: Proto, Daemon: s.Version, ID: id, OK: false, Error: &ErrorBody{Code: code, Message: err.Error()}}
}

// Marshal encodes v as a frame's JSON, without escaping <, > and & as
// json.Marshal does for HTML: nothing on this socket is HTML, and the
// escape sextuples those bytes, so text such as a test report's XML in a
// summary would take up to six times its size in a frame.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

var errFrameTooLong = errors.New("frame too long")

// readFrame reads one newline-terminated frame of at most MaxFrame bytes.
// Small frames come straight from the reader's buffer; only a long one
// grows a copy, so a connection never pays for a 1 MiB buffer up front.
func readFrame(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err == nil || !errors.Is(err, bufio.ErrBufferFull) {
		return line, err
	}
	buf := append([]byte(nil), line...)
	for {
		line, err = r.ReadSlice('\n')
		buf = append(buf, line...)
		if len(buf) > MaxFrame {
			return nil, errFrameTooLong
		}
		if err == nil || !errors.Is(err, bufio.ErrBufferFull) {
			return buf, err
		}
	}
}

func writeFrame(w *bufio.Writer, v any) bool {
	b, err := Marshal(v)
	if err != nil {
		return false
	}
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		return false
	}
	return w.Flush() == nil
}

// Client is one connection to the daemon.
type Client struct {
	conn    net.Conn
	r       *bufio.Reader
	version string
	next    uint64
	// DaemonVersion and DaemonProto are what the daemon reported on the
	// last reply (refusals included).
	DaemonVersion string
	DaemonProto   int
}

// Dial connects to the socket at path without starting anything.
func Dial(path, version string) (*Client, error) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	return &Client{conn: c, r: bufio.NewReader(c), version: version}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Wait blocks until the connection ends, for a client that holds it
// attached with no call going on (the daemon sends nothing unasked): the
// daemon stopping or dying closes it. It reports EHOSTDOWN either way; a
// caller that closed the connection itself knows to ignore that.
func (c *Client) Wait() error {
	_, err := io.Copy(io.Discard, c.r)
	if err == nil || errors.Is(err, net.ErrClosed) {
		return errs.New(errs.EHOSTDOWN, "the daemon closed the connection")
	}
	return errs.Wrap(errs.EHOSTDOWN, err, "read from daemon")
}

// Call sends one request and decodes the result into out (which may be
// nil). A daemon error comes back as an *errs.Error with its code.
func (c *Client) Call(op string, args any, out any) error {
	return c.call(&Request{Op: op}, args, out)
}

// CallAttached is Call on a connection that counts as an active
// integration client for as long as it stays open.
func (c *Client) CallAttached(op string, args any, out any) error {
	return c.call(&Request{Op: op, Attach: true}, args, out)
}

func (c *Client) call(req *Request, args any, out any) error {
	c.next++
	req.Proto, req.Client, req.ID = Proto, c.version, c.next
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return errs.Wrap(errs.EINVAL, err, "encode %s arguments", req.Op)
		}
		if err := checkText(req.Op, args, b); err != nil {
			return err
		}
		req.Args = b
	}
	b, err := json.Marshal(req)
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "encode request")
	}
	if len(b)+1 > MaxFrame {
		return errs.New(errs.EMSGSIZE, "request is %d bytes, over the %d byte frame limit", len(b)+1, MaxFrame)
	}
	if _, err := c.conn.Write(append(b, '\n')); err != nil {
		return errs.Wrap(errs.EHOSTDOWN, err, "send to daemon")
	}
	line, err := readFrame(c.r)
	if errors.Is(err, errFrameTooLong) {
		return errs.New(errs.EMSGSIZE, "the daemon's reply is longer than %d bytes", MaxFrame)
	}
	if err != nil {
		if err == io.EOF || errors.Is(err, net.ErrClosed) {
			return errs.New(errs.EHOSTDOWN, "the daemon closed the connection")
		}
		return errs.Wrap(errs.EHOSTDOWN, err, "read from daemon")
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "malformed response")
	}
	c.DaemonVersion, c.DaemonProto = resp.Daemon, resp.Proto
	if !resp.OK {
		if resp.Error == nil {
			return errs.New(errs.EINTERNAL, "daemon failed without an error")
		}
		return &errs.Error{Code: resp.Error.Code, Message: resp.Error.Message}
	}
	if out != nil && len(resp.Result) > 0 {
		if err := json.Unmarshal(resp.Result, out); err != nil {
			return errs.Wrap(errs.EINTERNAL, err, "decode %s result", req.Op)
		}
	}
	return nil
}
