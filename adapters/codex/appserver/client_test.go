package appserver

// The client against an in-process peer, over both transports: an io.Pipe
// pair for stdio, and a coder/websocket server on a unix socket for the
// WebSocket transport.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cbth-dev/cbth/internal/errs"
)

// guard bounds waits that should end at once; nothing asserts on time.
const guard = 10 * time.Second

// peer is the server side of a test connection.
type peer interface {
	recv(t *testing.T) Message // the next message from the client
	send(t *testing.T, raw string)
	close()
}

// transports makes a connected client transport and its peer.
var transports = map[string]func(t *testing.T) (Transport, peer){
	"stdio":     stdioPair,
	"websocket": wsPair,
}

type pipePeer struct {
	lines *bufio.Scanner
	w     io.WriteCloser
	r     io.Closer
}

// stdioPair joins the client and the peer with OS pipes, buffered as a
// child's stdio would be.
func stdioPair(t *testing.T) (Transport, peer) {
	toClientR, toClientW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	toPeerR, toPeerW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	tr := NewStdio(toClientR, toPeerW, func() error { toPeerW.Close(); return toClientR.Close() })
	sc := bufio.NewScanner(toPeerR)
	sc.Buffer(nil, 1<<20)
	p := &pipePeer{lines: sc, w: toClientW, r: toPeerR}
	t.Cleanup(func() { tr.Close(); p.close() })
	return tr, p
}

func (p *pipePeer) recv(t *testing.T) Message {
	t.Helper()
	if !p.lines.Scan() {
		t.Fatalf("peer: client closed: %v", p.lines.Err())
	}
	m, err := Decode(p.lines.Bytes())
	if err != nil {
		t.Fatalf("peer: client sent %q: %v", p.lines.Text(), err)
	}
	return m
}

func (p *pipePeer) send(t *testing.T, raw string) {
	t.Helper()
	if _, err := io.WriteString(p.w, raw+"\n"); err != nil {
		t.Fatalf("peer send: %v", err)
	}
}

func (p *pipePeer) close() { p.w.Close(); p.r.Close() }

type wsPeer struct{ c *websocket.Conn }

// shortDir makes a directory whose socket paths fit connect(2).
func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "cx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func wsServer(t *testing.T, path string) <-chan *websocket.Conn {
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan *websocket.Conn, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		c.SetReadLimit(MaxMessage)
		conns <- c
		<-r.Context().Done()
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return conns
}

func wsPair(t *testing.T) (Transport, peer) {
	path := filepath.Join(shortDir(t), "s")
	conns := wsServer(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	tr, p, err := DialUnix(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != os.Getpid() || p.UID != os.Getuid() {
		t.Errorf("peer %+v, want this process (%d, uid %d)", p, os.Getpid(), os.Getuid())
	}
	wp := &wsPeer{c: <-conns}
	t.Cleanup(func() { tr.Close(); wp.close() })
	return tr, wp
}

func (p *wsPeer) recv(t *testing.T) Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	typ, b, err := p.c.Read(ctx)
	if err != nil {
		t.Fatalf("peer: %v", err)
	}
	if typ != websocket.MessageText {
		t.Errorf("client sent a %v frame, want text", typ)
	}
	m, err := Decode(b)
	if err != nil {
		t.Fatalf("peer: client sent %q: %v", b, err)
	}
	return m
}

func (p *wsPeer) send(t *testing.T, raw string) {
	t.Helper()
	if err := p.c.Write(context.Background(), websocket.MessageText, []byte(raw)); err != nil {
		t.Fatalf("peer send: %v", err)
	}
}

func (p *wsPeer) close() { p.c.CloseNow() }

func eachTransport(t *testing.T, f func(t *testing.T, c *Client, p peer)) {
	for name, mk := range transports {
		t.Run(name, func(t *testing.T) {
			tr, p := mk(t)
			c := New(tr, Options{SubscriberBuffer: 2})
			// The peer goes first: a WebSocket close waits for a peer
			// that is still there but no longer reading.
			t.Cleanup(func() { p.close(); c.Close() })
			f(t, c, p)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	return ctx
}

type result struct {
	v   map[string]any
	err error
}

func goCall(c *Client, ctx context.Context, method string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		var v map[string]any
		err := c.Call(ctx, method, map[string]string{"k": method}, &v)
		ch <- result{v, err}
	}()
	return ch
}

// Answers are matched to requests by id, whatever their order.
func TestCallsMatchAnswersOutOfOrder(t *testing.T) {
	eachTransport(t, func(t *testing.T, c *Client, p peer) {
		a := goCall(c, ctxT(t), "a")
		ra := p.recv(t)
		b := goCall(c, ctxT(t), "b")
		rb := p.recv(t)
		if ra.Kind != KindRequest || ra.Method != "a" || rb.Method != "b" || ra.ID == rb.ID || string(ra.Params) != `{"k":"a"}` {
			t.Fatalf("requests %+v %+v", ra, rb)
		}
		p.send(t, `{"id":`+rb.ID.String()+`,"result":{"was":"b"}}`)
		p.send(t, `{"id":`+ra.ID.String()+`,"result":{"was":"a"}}`)
		if r := <-a; r.err != nil || r.v["was"] != "a" {
			t.Errorf("call a: %+v", r)
		}
		if r := <-b; r.err != nil || r.v["was"] != "b" {
			t.Errorf("call b: %+v", r)
		}
	})
}

// Each error answer keeps its JSON-RPC code (the core tells -32001, -32600
// and -32601 apart) and gets a cbth code by class.
func TestErrorAnswersKeepTheirCode(t *testing.T) {
	eachTransport(t, func(t *testing.T, c *Client, p peer) {
		for _, tc := range []struct {
			rpc  int
			code errs.Code
		}{
			{CodeOverloaded, errs.EAGAIN},
			{CodeInvalidRequest, errs.ESTATE},
			{CodeMethodNotFound, errs.ENOTSUP},
			{CodeInvalidParams, errs.EINVAL},
			{CodeInternalError, errs.EINTERNAL},
		} {
			ch := goCall(c, ctxT(t), "x")
			req := p.recv(t)
			p.send(t, `{"id":`+req.ID.String()+`,"error":{"code":`+itoa(tc.rpc)+`,"message":"no","data":{"why":1}}}`)
			err := (<-ch).err
			got, answered := RPCCode(err)
			if !answered || got != tc.rpc || errs.CodeOf(err) != tc.code {
				t.Errorf("error %d: %v (rpc %d answered %v, code %s), want code %s", tc.rpc, err, got, answered, errs.CodeOf(err), tc.code)
			}
			var rpc *RPCError
			if !errors.As(err, &rpc) || rpc.Message != "no" || string(rpc.Data) != `{"why":1}` {
				t.Errorf("error %d: RPCError %+v", tc.rpc, rpc)
			}
		}
	})
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// No answer within the caller's deadline is ETIMEDOUT and not an answer;
// the late answer is dropped and the connection keeps working.
func TestNoAnswerIsNotAnAnswer(t *testing.T) {
	eachTransport(t, func(t *testing.T, c *Client, p peer) {
		ctx, cancel := context.WithCancel(context.Background())
		ch := goCall(c, ctx, "slow")
		req := p.recv(t)
		cancel()
		err := (<-ch).err
		if _, answered := RPCCode(err); answered || errs.CodeOf(err) != errs.ETIMEDOUT || !errors.Is(err, context.Canceled) {
			t.Fatalf("abandoned call: %v, want ETIMEDOUT and no answer", err)
		}
		p.send(t, `{"id":`+req.ID.String()+`,"result":{}}`)
		ch = goCall(c, ctxT(t), "next")
		req = p.recv(t)
		p.send(t, `{"id":`+req.ID.String()+`,"result":{"ok":true}}`)
		if r := <-ch; r.err != nil || r.v["ok"] != true {
			t.Errorf("call after a late answer: %+v", r)
		}
	})
}

// When the peer goes, a waiting call fails EHOSTDOWN (no answer), Done
// closes, Err says why, subscriptions end with the same cause, and later
// calls fail at once.
func TestConnectionLossIsReported(t *testing.T) {
	eachTransport(t, func(t *testing.T, c *Client, p peer) {
		sub := c.Subscribe()
		ch := goCall(c, ctxT(t), "pending")
		p.recv(t)
		p.close()
		err := (<-ch).err
		if _, answered := RPCCode(err); answered || errs.CodeOf(err) != errs.EHOSTDOWN || !IsClosed(err) {
			t.Fatalf("pending call on a lost connection: %v", err)
		}
		select {
		case <-c.Done():
		case <-time.After(guard):
			t.Fatal("Done not closed")
		}
		if !IsClosed(c.Err()) {
			t.Errorf("Err() = %v", c.Err())
		}
		if _, ok := <-sub.C(); ok || !IsClosed(sub.Err()) {
			t.Errorf("subscription after loss: open or Err %v", sub.Err())
		}
		if err := c.Call(ctxT(t), "after", nil, nil); errs.CodeOf(err) != errs.EHOSTDOWN {
			t.Errorf("call after loss: %v", err)
		}
		if late := c.Subscribe(); late.Err() == nil {
			t.Errorf("subscription after loss has no error")
		}
	})
}

// A request from the server reaches subscribers as a request, and the
// client answers nothing by itself: the next thing the peer reads is the
// client's own next request. An explicit Respond is sent as asked.
func TestServerRequestsAreNeverAnsweredByTheClient(t *testing.T) {
	eachTransport(t, func(t *testing.T, c *Client, p peer) {
		sub := c.Subscribe()
		p.send(t, `{"id":0,"method":"item/commandExecution/requestApproval","params":{"threadId":"t","command":"rm -rf /"}}`)
		p.send(t, `{"method":"serverRequest/resolved","params":{"threadId":"t","requestId":0}}`)
		got := []Message{<-sub.C(), <-sub.C()}
		if got[0].Kind != KindRequest || got[0].ID != IntID(0) || got[0].Method != "item/commandExecution/requestApproval" {
			t.Errorf("first message %+v, want the approval request", got[0])
		}
		if got[1].Kind != KindNotification || got[1].Method != "serverRequest/resolved" {
			t.Errorf("second message %+v", got[1])
		}
		ch := goCall(c, ctxT(t), "ping")
		if m := p.recv(t); m.Kind != KindRequest || m.Method != "ping" {
			t.Fatalf("the client sent %+v before its own request", m)
		}
		if err := c.Respond(ctxT(t), got[0].ID, map[string]string{"decision": "decline"}); err != nil {
			t.Fatal(err)
		}
		if m := p.recv(t); m.Kind != KindResponse || m.ID != IntID(0) || string(m.Result) != `{"decision":"decline"}` {
			t.Errorf("explicit answer: %+v", m)
		}
		_ = ch
	})
}

// A subscriber that falls behind is dropped with ErrOverflow instead of
// blocking the connection; other subscribers and calls carry on.
func TestSlowSubscriberIsDropped(t *testing.T) {
	eachTransport(t, func(t *testing.T, c *Client, p peer) {
		slow, fast := c.Subscribe(), c.Subscribe()
		// sync waits until the reader has handled everything sent before it.
		sync := func() {
			ch := goCall(c, ctxT(t), "sync")
			req := p.recv(t)
			p.send(t, `{"id":`+req.ID.String()+`,"result":{}}`)
			if r := <-ch; r.err != nil {
				t.Fatal(r.err)
			}
		}
		p.send(t, `{"method":"n1"}`)
		p.send(t, `{"method":"n2"}`)
		sync()
		if a, b := <-fast.C(), <-fast.C(); a.Method != "n1" || b.Method != "n2" {
			t.Fatalf("fast subscriber got %s %s", a.Method, b.Method)
		}
		p.send(t, `{"method":"n3"}`)
		sync()
		if m := <-fast.C(); m.Method != "n3" {
			t.Errorf("fast subscriber got %s, want n3", m.Method)
		}
		var methods []string
		for m := range slow.C() {
			methods = append(methods, m.Method)
		}
		if strings.Join(methods, " ") != "n1 n2" || !errors.Is(slow.Err(), ErrOverflow) || errs.CodeOf(slow.Err()) != errs.EAGAIN {
			t.Errorf("slow subscriber got %v, Err %v; want n1 n2 then ErrOverflow", methods, slow.Err())
		}
		fast.Close()
		if _, ok := <-fast.C(); ok || fast.Err() != nil {
			t.Errorf("closed subscription: still open or Err %v", fast.Err())
		}
	})
}

// An unreadable message is dropped; the ones around it still arrive.
func TestMalformedMessageIsSkipped(t *testing.T) {
	eachTransport(t, func(t *testing.T, c *Client, p peer) {
		sub := c.Subscribe()
		p.send(t, `{"method":"before"}`)
		p.send(t, `[1,2,3]`)
		p.send(t, `{"id":1,"result":{},"error":{"code":1}}`)
		p.send(t, `{"method":"after"}`)
		if a, b := <-sub.C(), <-sub.C(); a.Method != "before" || b.Method != "after" {
			t.Errorf("got %q then %q", a.Method, b.Method)
		}
	})
}

// A socket path too long for connect(2) is dialled through the symlink
// Codex makes it into.
func TestDialLongSymlinkedPath(t *testing.T) {
	real := filepath.Join(shortDir(t), "s")
	conns := wsServer(t, real)
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 120))
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(long, "codex.sock")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	tr, _, err := DialUnix(ctxT(t), link)
	if err != nil {
		t.Fatalf("dial %d-byte path: %v", len(link), err)
	}
	defer tr.Close()
	(<-conns).CloseNow()
	if _, _, err := DialUnix(ctxT(t), filepath.Join(long, "absent.sock")); errs.CodeOf(err) != errs.EHOSTDOWN {
		t.Errorf("dial an absent long path: %v, want EHOSTDOWN", err)
	}
}

// A stdio line over the limit ends the connection with EMSGSIZE rather
// than growing without bound.
func TestStdioLineTooLong(t *testing.T) {
	r := strings.NewReader(`{"method":"ok"}` + "\n" + strings.Repeat("x", 100) + "\n")
	lr := newLineReader(r, 64)
	if line, err := lr.next(); err != nil || string(line) != `{"method":"ok"}` {
		t.Fatalf("first line: %q %v", line, err)
	}
	if _, err := lr.next(); errs.CodeOf(err) != errs.EMSGSIZE {
		t.Errorf("long line: %v, want EMSGSIZE", err)
	}
}
