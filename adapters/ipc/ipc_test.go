package ipc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cbth-dev/cbth/internal/errs"
)

func serve(t *testing.T) string {
	t.Helper()
	return serveAs(t, os.Getuid())
}

// serveAs serves requests from peers with the given uid only.
func serveAs(t *testing.T, uid int) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ipc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &Server{Version: "test", Log: slog.New(slog.DiscardHandler), UID: uid,
		Versionless: func(op string) bool { return op == "hello" },
		Handler: func(ctx context.Context, r *Request) (any, error) {
			if r.Op == "echo" || r.Op == "hello" {
				return map[string]int{"args": len(r.Args)}, nil
			}
			return nil, errs.New(errs.EINVAL, "unknown op %q", r.Op)
		}}
	done := make(chan struct{})
	go func() { srv.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return path
}

// A frame of exactly 1 MiB (newline included) is served; one byte more is
// refused with EMSGSIZE.
func TestFrameLimit(t *testing.T) {
	path := serve(t)
	frame := func(total int) []byte {
		head := fmt.Sprintf(`{"proto":%d,"id":1,"op":"echo","args":"`, Proto)
		tail := `"}` + "\n"
		return []byte(head + strings.Repeat("x", total-len(head)-len(tail)) + tail)
	}
	for _, tc := range []struct {
		size int
		code errs.Code
	}{{MaxFrame, ""}, {MaxFrame + 1, errs.EMSGSIZE}} {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		f := frame(tc.size)
		if len(f) != tc.size {
			t.Fatalf("built a %d byte frame, want %d", len(f), tc.size)
		}
		go c.Write(f)
		line, err := bufio.NewReader(c).ReadBytes('\n')
		c.Close()
		if err != nil {
			t.Fatalf("size %d: %v", tc.size, err)
		}
		var resp Response
		if err := json.Unmarshal(line, &resp); err != nil {
			t.Fatal(err)
		}
		got := errs.Code("")
		if resp.Error != nil {
			got = resp.Error.Code
		}
		if got != tc.code || resp.OK != (tc.code == "") {
			t.Fatalf("frame of %d bytes: ok=%v code=%q, want %q", tc.size, resp.OK, got, tc.code)
		}
	}
}

// Bad frames get a stable code and the connection goes on serving.
func TestBadFramesAndVersion(t *testing.T) {
	path := serve(t)
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	send := func(s string) Response {
		c.Write([]byte(s + "\n"))
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var resp Response
		json.Unmarshal(line, &resp)
		return resp
	}
	if resp := send(`{not json`); resp.Error == nil || resp.Error.Code != errs.EINVAL {
		t.Fatalf("malformed frame: %+v", resp)
	}
	if resp := send(fmt.Sprintf(`{"proto":%d,"id":2,"op":"nope"}`, Proto)); resp.Error == nil || resp.Error.Code != errs.EINVAL || resp.ID != 2 {
		t.Fatalf("unknown op: %+v", resp)
	}
	if resp := send(fmt.Sprintf(`{"proto":%d,"id":3,"op":"echo","future_field":true}`, Proto)); !resp.OK || resp.Daemon != "test" {
		t.Fatalf("unknown field not ignored: %+v", resp)
	}
	// A versionless operation is served to a client of another protocol;
	// the reply carries the daemon's protocol and version.
	if resp := send(`{"proto":99,"id":4,"op":"hello"}`); !resp.OK || resp.Proto != Proto || resp.Daemon != "test" {
		t.Fatalf("versionless op refused to another protocol: %+v", resp)
	}
	if resp := send(`{"proto":99,"id":5,"op":"echo"}`); resp.Error == nil || resp.Error.Code != errs.EVERSION || resp.Proto != Proto {
		t.Fatalf("protocol mismatch: %+v", resp)
	}
}

// The client's own path: Dial, a call answered, a daemon error as a coded
// error, and the socket file private to the user.
func TestClientCallAndSocketMode(t *testing.T) {
	path := serve(t)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want 0600 socket", st.Mode())
	}
	c, err := Dial(path, "v-test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out map[string]int
	if err := c.Call("echo", map[string]string{"a": "b"}, &out); err != nil || out["args"] == 0 || c.DaemonVersion != "test" {
		t.Fatalf("echo: %v %v, daemon %q", out, err, c.DaemonVersion)
	}
	if err := c.Call("nope", nil, nil); errs.CodeOf(err) != errs.EINVAL {
		t.Fatalf("unknown op: %v", err)
	}
}

// A peer of another uid gets EACCES and nothing else.
func TestPeerOfOtherUIDRefused(t *testing.T) {
	path := serveAs(t, os.Getuid()+1)
	c, err := Dial(path, "v-test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The refusal comes unasked; the server may have closed before a
	// request could be written, so read it rather than call.
	line, err := readFrame(c.r)
	var resp Response
	if err != nil || json.Unmarshal(line, &resp) != nil {
		t.Fatalf("no refusal frame: %q %v", line, err)
	}
	if resp.OK || resp.Error == nil || resp.Error.Code != errs.EACCES || resp.Daemon != "" {
		t.Fatalf("other uid: %s, want EACCES without a version", line)
	}
}

// No daemon: a missing socket and a stale one both read as absent, so
// Connect knows to start one.
func TestDialAbsent(t *testing.T) {
	dir := t.TempDir()
	if _, err := Dial(filepath.Join(dir, "none.sock"), "v"); !Absent(err) {
		t.Fatalf("missing socket: %v, not Absent", err)
	}
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := Dial(stale, "v"); !Absent(err) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("stale socket: %v, not Absent", err)
	}
	// The next daemon's Listen replaces it.
	l2, err := Listen(stale)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	c, err := net.Dial("unix", stale)
	if err != nil {
		t.Fatalf("the replaced socket: %v", err)
	}
	c.Close()
}

// FuzzReadFrame: any byte stream yields frames no longer than MaxFrame and
// never panics.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte("{\"proto\":1}\n{}\n"))
	f.Add(bytes.Repeat([]byte("a"), 5000))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(b), 16)
		for {
			line, err := readFrame(r)
			if len(line) > MaxFrame {
				t.Fatalf("frame of %d bytes", len(line))
			}
			if err != nil {
				return
			}
			var req Request
			_ = json.Unmarshal(line, &req)
		}
	})
}

// A client that hangs up before reading its reply never kills the server,
// not even when the connection landed on descriptor 1 or 2, where a write
// to a broken *os.File raises SIGPIPE (the daemon runs detached, so its
// standard descriptors may well be free). The server runs in a child
// process with stdout and stderr closed, so the two ends of the first
// connection take those descriptors; it reports by exit status.
func TestHangupNeverKillsTheServer(t *testing.T) {
	if os.Getenv("CBTH_IPC_HANGUP_CHILD") == "1" {
		os.Exit(hangupChild())
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHangupNeverKillsTheServer$")
	cmd.Env = append(os.Environ(), "CBTH_IPC_HANGUP_CHILD=1")
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.ExitCode() == 3:
		t.Fatal("the connection did not land on descriptors 1 and 2; the test proves nothing")
	default:
		t.Fatalf("the server process: %v (killed by SIGPIPE when it says 'broken pipe')", err)
	}
}

func hangupChild() int {
	dir, err := os.MkdirTemp("", "ipc")
	if err != nil {
		return 1
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "s.sock")
	ln, err := Listen(path)
	if err != nil {
		return 1
	}
	hungUp := make(chan struct{})
	onStdio := make(chan bool, 1)
	srv := &Server{Version: "test", Log: slog.New(slog.DiscardHandler), UID: os.Getuid(),
		Handler: func(ctx context.Context, r *Request) (any, error) {
			if r.Op != "big" {
				return "pong", nil
			}
			onStdio <- isSocket(2)
			<-hungUp
			// Larger than the socket buffers: the write meets the hang-up.
			return strings.Repeat("x", 900<<10), nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Serve(ctx, ln)
	// From here on nothing may print: stdout and stderr are gone.
	syscall.Close(1)
	syscall.Close(2)
	c, err := net.Dial("unix", path)
	if err != nil {
		return 1
	}
	if !isSocket(1) {
		return 3
	}
	if _, err := c.Write([]byte(fmt.Sprintf(`{"proto":%d,"id":1,"op":"big"}`, Proto) + "\n")); err != nil {
		return 1
	}
	if !<-onStdio {
		return 3
	}
	c.Close()
	close(hungUp)
	// The server lives on and serves the next client.
	cl, err := Dial(path, "v")
	if err != nil {
		return 1
	}
	defer cl.Close()
	var pong string
	if err := cl.Call("ping", nil, &pong); err != nil || pong != "pong" {
		return 1
	}
	return 0
}

func isSocket(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFSOCK
}

// What a request ties to its connection is let go once, when the
// connection ends, while it still counts as attached (so the daemon never
// sees itself idle with a foreground still recorded live); a registration
// on an ended connection runs at once.
func TestConnOnClose(t *testing.T) {
	dir, err := os.MkdirTemp("", "ipc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "s.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan int, 4)
	var conn *Conn
	srv := &Server{Version: "test", Log: slog.New(slog.DiscardHandler), UID: os.Getuid()}
	srv.Handler = func(ctx context.Context, r *Request) (any, error) {
		conn = ConnOf(ctx)
		conn.OnClose(func() { closed <- srv.Attached() })
		return nil, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, ln); close(done) }()
	defer func() { cancel(); <-done }()

	c, err := Dial(path, "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CallAttached("hold", nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
		t.Fatal("OnClose ran while the connection was open")
	default:
	}
	if srv.Attached() != 1 {
		t.Fatalf("attached %d, want 1", srv.Attached())
	}
	c.Close()
	if n := <-closed; n != 1 {
		t.Fatalf("OnClose saw %d attached connections, want 1 (its own, still counted)", n)
	}
	ran := false
	conn.OnClose(func() { ran = true })
	if !ran {
		t.Fatal("OnClose on an ended connection did not run at once")
	}
	if ConnOf(context.Background()) != nil {
		t.Fatal("a connection outside a request")
	}
}
