package socket

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/debug"
	"github.com/cbth-dev/cbth/adapters/cortexfs/session"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/internal/errs"
)

// gated emits one delta per value received on step, until step closes.
type gated struct {
	step  chan struct{}
	calls atomic.Int32
}

func (g *gated) Stream(ctx context.Context, req driver.Request, out stream.Sink) error {
	g.calls.Add(1)
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case _, ok := <-g.step:
			if !ok {
				return out.Emit(stream.Message("end"))
			}
			if err := out.Emit(stream.Delta(fmt.Sprintf("d%d", i))); err != nil {
				return err
			}
		}
	}
}

// flood emits n deltas of size bytes as fast as the sink takes them.
type flood struct {
	n, size  int
	produced atomic.Int64
}

func (f *flood) Stream(ctx context.Context, req driver.Request, out stream.Sink) error {
	pad := strings.Repeat("x", f.size)
	for i := 0; i < f.n; i++ {
		if err := out.Emit(stream.Delta(fmt.Sprintf("%08d%s", i, pad))); err != nil {
			return err
		}
		f.produced.Add(1)
	}
	return nil
}

type fixture struct {
	path  string
	store *session.Files
	dir   string
	srv   *Server
	stop  func()
}

func start(t testing.TB, d driver.Driver) *fixture {
	t.Helper()
	return startWith(t, d, nil)
}

// startWith lets a test adjust the server before it serves (changing it
// afterwards would race with the connection handlers).
func startWith(t testing.TB, d driver.Driver, adjust func(*Server)) *fixture {
	t.Helper()
	dir := t.TempDir()
	var n atomic.Int64
	store := &session.Files{Dir: filepath.Join(dir, "home/1000/model/debug/echo.d/session"), Model: "debug/echo"}
	srv := &Server{Request: driver.Request{Model: "debug/echo", Provider: "debug", NativeID: "echo"},
		Driver: d, Store: store, UID: os.Getuid(),
		NewRunID: func() string { return fmt.Sprintf("run-%d", n.Add(1)) }}
	if adjust != nil {
		adjust(srv)
	}
	path := filepath.Join(dir, "echo.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	f := &fixture{path: path, store: store, dir: dir, srv: srv}
	f.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		store.Close()
	}
	t.Cleanup(f.stop)
	return f
}

type client struct {
	t  testing.TB
	c  net.Conn
	sc *bufio.Scanner
}

func (f *fixture) dial(t testing.TB) *client {
	t.Helper()
	c, err := net.Dial("unix", f.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	return &client{t: t, c: c, sc: sc}
}

func (c *client) send(frame string) {
	c.t.Helper()
	if _, err := c.c.Write([]byte(frame + "\n")); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) next() stream.Event {
	c.t.Helper()
	c.c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a hang bound, not a timing assertion
	if !c.sc.Scan() {
		c.t.Fatalf("connection ended: %v", c.sc.Err())
	}
	var e stream.Event
	if err := json.Unmarshal(c.sc.Bytes(), &e); err != nil {
		c.t.Fatalf("bad frame %q: %v", c.sc.Bytes(), err)
	}
	return e
}

// untilDone reads frames up to and including done.
func (c *client) untilDone() []stream.Event {
	c.t.Helper()
	var out []stream.Event
	for i := 0; i < 1_000_000; i++ {
		e := c.next()
		out = append(out, e)
		if e.Type == stream.TypeDone {
			return out
		}
	}
	c.t.Fatal("no done frame")
	return nil
}

func types(evs []stream.Event) string {
	var s []string
	for _, e := range evs {
		s = append(s, e.Type)
	}
	return strings.Join(s, ",")
}

func TestPingAndSocketMode(t *testing.T) {
	f := start(t, debug.Echo{})
	st, err := os.Stat(f.path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || st.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket mode %v, want 0600 socket", st.Mode())
	}
	c := f.dial(t)
	c.send(`{"op":"ping"}`)
	if e := c.next(); e.Type != stream.TypePong {
		t.Fatalf("got %+v", e)
	}
}

func TestFrameSizeLimit(t *testing.T) {
	f := start(t, debug.Echo{})
	c := f.dial(t)
	// Exactly MaxFrame bytes, with an unknown padding field: accepted.
	head := `{"op":"ping","pad":"`
	c.send(head + strings.Repeat("p", MaxFrame-len(head)-2) + `"}`)
	if e := c.next(); e.Type != stream.TypePong {
		t.Fatalf("1 MiB frame: %+v", e)
	}
	// One byte more: EMSGSIZE, and the connection keeps working.
	c.send(head + strings.Repeat("p", MaxFrame-len(head)-1) + `"}`)
	if e := c.next(); e.Type != stream.TypeError || e.Code != errs.EMSGSIZE {
		t.Fatalf("1 MiB + 1 frame: %+v", e)
	}
	c.send(`{"op":"ping"}`)
	if e := c.next(); e.Type != stream.TypePong {
		t.Fatalf("after EMSGSIZE: %+v", e)
	}
}

func TestBadFrames(t *testing.T) {
	f := start(t, debug.Echo{})
	c := f.dial(t)
	for _, frame := range []string{`{"op":"explode"}`, `{"id":"x"}`, `not json`, `{"op":"send","session":"../x","input":"hi"}`, `{"op":"send"}`, `{"op":"cancel"}`, `{"op":"resume","after":"zz"}`} {
		c.send(frame)
		if e := c.next(); e.Type != stream.TypeError || e.Code != errs.EINVAL {
			t.Errorf("%s: got %+v, want EINVAL", frame, e)
		}
	}
	c.send(`{"op":"cancel","id":"run-nope"}`)
	if e := c.next(); e.Code != errs.ENOENT {
		t.Errorf("cancel of unknown run: %+v", e)
	}
}

func TestSendUnknownFieldsAndMultiTurn(t *testing.T) {
	f := start(t, debug.Echo{})
	c := f.dial(t)
	c.send(`{"op":"send","id":"msg-1","session":"default","cwd":"/work","input":"hello","future_field":{"x":1}}`)
	evs := c.untilDone()
	if types(evs) != "start,delta,message,usage,done" || evs[1].Text != "hello" || evs[4].Status != "ok" {
		t.Fatalf("got %+v", evs)
	}
	for i, e := range evs {
		if e.Run != "run-1" || e.ID != session.EventID(uint64(i+1)) {
			t.Errorf("frame %d: run %q id %q", i, e.Run, e.ID)
		}
	}
	// Second turn: the session history goes to the driver (usage counts
	// words over all messages: hello, hello, again).
	c.send(`{"op":"send","id":"msg-2","input":"again"}`)
	evs = c.untilDone()
	if evs[1].Text != "again" || *evs[3].InputTokens != 3 {
		t.Fatalf("second turn: %+v", evs)
	}
	d := filepath.Join(f.store.Dir, "default")
	for _, name := range []string{"messages.jsonl", "events.jsonl", "latest.md", "state", "created_at", "updated_at", "meta.json"} {
		st, err := os.Stat(filepath.Join(d, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
		} else if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v", name, st.Mode())
		}
	}
	latest, _ := os.ReadFile(filepath.Join(d, "latest.md"))
	state, _ := os.ReadFile(filepath.Join(d, "state"))
	if string(latest) != "again" || string(state) != "idle\n" {
		t.Errorf("latest %q state %q", latest, state)
	}
}

func TestRetryIsIdempotent(t *testing.T) {
	g := &gated{step: make(chan struct{})}
	f := start(t, g)
	c := f.dial(t)
	c.send(`{"op":"send","id":"msg-1","input":"hi"}`)
	if e := c.next(); e.Type != stream.TypeStart {
		t.Fatal(e)
	}
	g.step <- struct{}{}
	c.next() // d0
	// Retry while running, from another connection: same run, followed live.
	c2 := f.dial(t)
	c2.send(`{"op":"send","id":"msg-1","input":"hi"}`)
	if e := c2.next(); e.Type != stream.TypeStart || e.Run != "run-1" {
		t.Fatalf("retry got %+v", e)
	}
	if e := c2.next(); e.Text != "d0" {
		t.Fatalf("retry replay %+v", e)
	}
	close(g.step)
	c.untilDone()
	if evs := c2.untilDone(); evs[len(evs)-1].Run != "run-1" || evs[len(evs)-1].Status != "ok" {
		t.Fatalf("retry follow: %+v", evs)
	}
	// Retry after the run ended: the final state, no second run.
	c3 := f.dial(t)
	c3.send(`{"op":"send","id":"msg-1","input":"hi"}`)
	evs := c3.untilDone()
	if evs[0].Run != "run-1" || evs[len(evs)-1].Status != "ok" {
		t.Fatalf("late retry: %+v", evs)
	}
	if n := g.calls.Load(); n != 1 {
		t.Fatalf("driver ran %d times, want 1", n)
	}
	msgs, _ := f.store.Messages("default")
	if len(msgs) != 2 {
		t.Fatalf("messages %+v", msgs)
	}
}

func TestCancelMidStream(t *testing.T) {
	g := &gated{step: make(chan struct{})}
	f := start(t, g)
	c := f.dial(t)
	c.send(`{"op":"send","id":"m","input":"hi"}`)
	start := c.next()
	g.step <- struct{}{}
	c.next()
	c.send(`{"op":"cancel","id":"` + start.Run + `"}`)
	evs := c.untilDone()
	if last := evs[len(evs)-1]; last.Status != stream.StatusCancelled {
		t.Fatalf("got %+v", evs)
	}
	// The session is free again.
	c.send(`{"op":"ping"}`)
	if e := c.next(); e.Type != stream.TypePong {
		t.Fatal(e)
	}
}

func TestResumeAfterEventID(t *testing.T) {
	f := start(t, debug.Echo{})
	c := f.dial(t)
	c.send(`{"op":"send","id":"a","input":"one"}`)
	c.untilDone()
	c.send(`{"op":"send","id":"b","input":"two"}`)
	second := c.untilDone()
	c2 := f.dial(t)
	c2.send(`{"op":"resume","session":"default","after":"` + second[0].ID + `"}`)
	evs := c2.untilDone()
	if len(evs) != len(second)-1 || evs[0].ID != second[1].ID || evs[len(evs)-1].ID != second[len(second)-1].ID {
		t.Fatalf("resume after %s: %+v", second[0].ID, evs)
	}
}

func TestDisconnectKeepsPrivateSession(t *testing.T) {
	g := &gated{step: make(chan struct{})}
	f := start(t, g)
	c := f.dial(t)
	c.send(`{"op":"send","id":"m1","input":"hi"}`)
	first := c.next()
	g.step <- struct{}{}
	c.next()
	c.c.Close() // client goes away mid-run
	g.step <- struct{}{}
	close(g.step)
	c2 := f.dial(t)
	c2.send(`{"op":"resume","session":"default","after":"` + first.ID + `"}`)
	evs := c2.untilDone()
	if types(evs) != "delta,delta,message,done" || evs[len(evs)-1].Status != "ok" || evs[1].Text != "d1" {
		t.Fatalf("after reconnect: %+v", evs)
	}
	// And the session takes the next turn with its history.
	c2.send(`{"op":"send","id":"m2","input":"more"}`)
	if e := c2.next(); e.Type != stream.TypeStart {
		t.Fatalf("next turn: %+v", e)
	}
	msgs, _ := f.store.Messages("default")
	if len(msgs) < 3 || msgs[2].Content != "more" || msgs[1].Role != "assistant" || msgs[1].Content != "d0d1" {
		t.Fatalf("messages: %+v", msgs)
	}
}

func TestPeerUIDChecked(t *testing.T) {
	f := startWith(t, debug.Echo{}, func(s *Server) { s.UID = os.Getuid() + 1 })
	c := f.dial(t)
	if e := c.next(); e.Code != errs.EACCES {
		t.Fatalf("got %+v", e)
	}
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A reader that stops reading stalls the run (blocking writes), so the
// server holds no growing buffer: the heap stays flat while the driver
// could have produced far more than the socket can hold.
func TestSlowReaderBackpressure(t *testing.T) {
	const n, size = 4000, 4096 // 16 MiB if nothing pushed back
	fl := &flood{n: n, size: size}
	f := start(t, fl)
	c := f.dial(t)
	before := heap()
	c.send(`{"op":"send","id":"big","input":"go"}`)
	// Wait until the producer stops advancing (bounded polling).
	var last int64 = -1
	for i := 0; i < 200; i++ {
		time.Sleep(20 * time.Millisecond)
		p := fl.produced.Load()
		if p == last {
			break
		}
		last = p
	}
	stalled := fl.produced.Load()
	grew := int64(heap()) - int64(before)
	t.Logf("producer stalled at %d/%d deltas; heap grew %d KiB", stalled, n, grew/1024)
	if stalled >= n/4 {
		t.Fatalf("producer ran ahead of a stopped reader: %d of %d deltas", stalled, n)
	}
	if grew > 4<<20 {
		t.Fatalf("heap grew %d bytes with a stopped reader", grew)
	}
	// Now read everything: all deltas, in order.
	evs := c.untilDone()
	want := 0
	for _, e := range evs {
		if e.Type == stream.TypeDelta {
			if got := e.Text[:8]; got != fmt.Sprintf("%08d", want) {
				t.Fatalf("delta %d out of order: %s", want, got)
			}
			want++
		}
	}
	if want != n {
		t.Fatalf("got %d deltas, want %d", want, n)
	}
}

func TestListenRefusesLiveSocket(t *testing.T) {
	f := start(t, debug.Echo{})
	if _, err := Listen(f.path); errs.CodeOf(err) != errs.EBUSY {
		t.Fatalf("got %v", err)
	}
}

// A socket left behind by a server that is gone is replaced, not EBUSY;
// closing (twice, as serve and its caller both do) removes the file once.
func TestListenReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.sock")
	dead, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	dead.UnixListener.Close() // the server is gone, its file stays
	ln, err := Listen(path)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	ln.Close()
	ln.Close()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file after Close: %v", err)
	}
}

func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{`{"op":"ping"}`, `{"op":"send","id":"m","session":"default","input":"hi"}`,
		`{"op":"resume","session":"s","after":"e1"}`, `{"op":"cancel","id":"r"}`, `{"op":"x"}`, `[]`, `{"op":"send","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequest(b)
		if err != nil {
			if errs.CodeOf(err) != errs.EINVAL {
				t.Fatalf("code %s for %q", errs.CodeOf(err), b)
			}
			return
		}
		switch r.Op {
		case OpPing, OpCancel:
		case OpSend, OpResume:
			if r.Session == "" {
				t.Fatal("send/resume without a session")
			}
		default:
			t.Fatalf("accepted op %q", r.Op)
		}
	})
}

func TestChatClientInterrupts(t *testing.T) {
	g := &gated{step: make(chan struct{})}
	f := start(t, g)
	conn, err := net.Dial("unix", f.path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	sig := make(chan os.Signal)
	done := make(chan error, 1)
	var errOut strings.Builder
	go func() { done <- Chat(context.Background(), conn, "repl", inR, outW, &errOut, sig) }()
	go inW.Write([]byte("hello\n"))
	g.step <- struct{}{}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(outR, buf); err != nil || string(buf) != "d0" {
		t.Fatalf("first delta %q %v", buf, err)
	}
	sig <- os.Interrupt // first: cancel the run, keep the client
	// The run ends cancelled; the client prints the newline of done.
	if _, err := io.ReadFull(outR, buf[:1]); err != nil || buf[0] != '\n' {
		t.Fatalf("after cancel %q %v", buf[:1], err)
	}
	var last stream.Event
	f.store.Events("repl", 0, func(_ uint64, e stream.Event) error { last = e; return nil })
	if last.Type != stream.TypeDone || last.Status != stream.StatusCancelled {
		t.Fatalf("last stored event %+v", last)
	}
	sig <- os.Interrupt // second (idle): exit
	if err := <-done; err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if g.calls.Load() != 1 {
		t.Fatalf("runs: %d", g.calls.Load())
	}
}
