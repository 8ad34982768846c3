package unixsock

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// hang bounds a wait that should end promptly; it is not a timing check.
const hang = 10 * time.Second

func listen(t *testing.T) (*Listener, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, path
}

// pair returns the two ends of one connection: dialed and accepted.
func pair(t *testing.T) (client, server *Conn) {
	t.Helper()
	ln, path := listen(t)
	accepted := make(chan *Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	select {
	case server = <-accepted:
	case <-time.After(hang):
		t.Fatal("Accept did not return")
	}
	if server == nil {
		t.FailNow()
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}

func TestRoundTripAndEOF(t *testing.T) {
	client, server := pair(t)
	if _, err := client.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(server, buf); err != nil || string(buf) != "ping\n" {
		t.Fatalf("server read %q, %v", buf, err)
	}
	if _, err := server.Write([]byte("pong\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(client, buf); err != nil || string(buf) != "pong\n" {
		t.Fatalf("client read %q, %v", buf, err)
	}
	client.Close()
	if n, err := server.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("after the peer closed: %d, %v; want 0, EOF", n, err)
	}
}

func TestSocketModeIs0600(t *testing.T) {
	// Even a umask that grants everything must not widen the socket.
	old := unix.Umask(0)
	defer unix.Umask(old)
	_, path := listen(t)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want 0600 socket", st.Mode())
	}
}

// The file bind creates is already 0600, before Listen's chmod: there is
// no moment at which another user could connect.
func TestBindCreatesNarrowFile(t *testing.T) {
	old := unix.Umask(0)
	defer unix.Umask(old)
	path := filepath.Join(t.TempDir(), "b.sock")
	fd, err := socket()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := bind(fd, path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("freshly bound socket mode %v, want 0600", st.Mode())
	}
}

// A restrictive umask must not leave the owner unable to connect.
func TestSocketModeUnderTightUmask(t *testing.T) {
	old := unix.Umask(0o277)
	defer unix.Umask(old)
	_, path := listen(t)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want 0600", st.Mode())
	}
}

func TestPeerUID(t *testing.T) {
	client, server := pair(t)
	for name, c := range map[string]*Conn{"server side": server, "client side": client} {
		uid, err := c.PeerUID()
		if err != nil || uid != os.Getuid() {
			t.Errorf("%s: PeerUID %d, %v; want %d", name, uid, err, os.Getuid())
		}
	}
}

func TestReadDeadline(t *testing.T) {
	client, _ := pair(t)
	client.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := client.Read(make([]byte, 1))
	var te interface{ Timeout() bool }
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &te) || !te.Timeout() {
		t.Fatalf("read past the deadline: %v; want a timeout", err)
	}
	// A cleared deadline lets the connection carry on.
	client.SetReadDeadline(time.Time{})
}

// A peer that does not read stops the writer (nothing queues in the
// process), and a deadline ends the wait.
func TestWriteBlocksUntilDeadline(t *testing.T) {
	client, server := pair(t)
	big := bytes.Repeat([]byte("x"), 64<<20) // far beyond any socket buffer
	done := make(chan struct{})
	var n int
	var err error
	go func() {
		n, err = client.Write(big)
		close(done)
	}()
	select {
	case <-done:
		t.Fatalf("Write of %d bytes returned (%d, %v) with nobody reading", len(big), n, err)
	case <-time.After(100 * time.Millisecond):
	}
	client.SetWriteDeadline(time.Now())
	select {
	case <-done:
	case <-time.After(hang):
		t.Fatal("write deadline did not end the blocked Write")
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) || n <= 0 || n >= len(big) {
		t.Fatalf("Write returned %d, %v; want a partial write and a timeout", n, err)
	}
	// What was written arrives intact once the peer reads.
	client.Close()
	got, rerr := io.ReadAll(server)
	if rerr != nil || len(got) != n || !bytes.Equal(got, big[:n]) {
		t.Fatalf("peer read %d bytes (%v), want the %d written", len(got), rerr, n)
	}
}

func TestCloseWakesAccept(t *testing.T) {
	ln, _ := listen(t)
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if c != nil {
			c.Close()
		}
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond) // let Accept park; it must return either way
	ln.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Accept after Close: %v; want ErrClosed", err)
		}
	case <-time.After(hang):
		t.Fatal("Close did not wake Accept")
	}
	if _, err := ln.Accept(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Accept: %v", err)
	}
}

func TestCloseWakesRead(t *testing.T) {
	client, _ := pair(t)
	errc := make(chan error, 1)
	go func() {
		_, err := client.Read(make([]byte, 1))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	client.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Read after Close: %v; want ErrClosed", err)
		}
	case <-time.After(hang):
		t.Fatal("Close did not wake Read")
	}
}

func TestDialErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Dial(filepath.Join(dir, "missing.sock")); !errors.Is(err, syscall.ENOENT) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dial of a missing path: %v; want ENOENT", err)
	}
	// A socket file left behind by a listener that is gone refuses.
	stale := filepath.Join(dir, "stale.sock")
	ln, err := Listen(stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := Dial(stale); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial of a stale socket: %v; want ECONNREFUSED", err)
	}
}

func TestListenLeavesExistingPath(t *testing.T) {
	ln, path := listen(t)
	if _, err := Listen(path); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second Listen on a live path: %v; want EADDRINUSE", err)
	}
	// The failed Listen must not have removed the live socket.
	c, err := Dial(path)
	if err != nil {
		t.Fatalf("live socket gone after a refused Listen: %v", err)
	}
	c.Close()
	ln.Close()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Close left the socket file: %v", err)
	}
}

func TestManyConcurrentClients(t *testing.T) {
	ln, path := listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	const n = 32
	errc := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			c, err := Dial(path)
			if err != nil {
				errc <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(hang))
			msg := []byte("hello")
			if _, err := c.Write(msg); err != nil {
				errc <- err
				return
			}
			got := make([]byte, len(msg))
			_, err = io.ReadFull(c, got)
			if err == nil && !bytes.Equal(got, msg) {
				err = errors.New("echo mismatch")
			}
			errc <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}

// A descriptor on 0-2 moves above them and the low one is released; the
// test borrows descriptor 0 and gives the original back.
func TestAboveStdio(t *testing.T) {
	saved, err := unix.FcntlInt(0, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		t.Skipf("no standard input to borrow: %v", err)
	}
	defer func() {
		unix.Dup3(saved, 0, 0)
		unix.Close(saved)
	}()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	raw, err := w.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	raw.Control(func(fd uintptr) { err = unix.Dup3(int(fd), 0, 0) })
	if err != nil {
		t.Fatal(err)
	}
	fd := aboveStdio(0)
	if _, err := unix.FcntlInt(0, unix.F_GETFD, 0); err != unix.EBADF {
		t.Errorf("descriptor 0 still open after the move: %v", err)
	}
	if fd <= 2 {
		t.Fatalf("moved to %d", fd)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte("x")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if n, err := r.Read(b); n != 1 || b[0] != 'x' {
		t.Fatalf("the moved descriptor is not the same pipe: %q %v", b[:n], err)
	}
	if got := aboveStdio(fd); got != fd {
		t.Fatalf("descriptor %d above stdio moved to %d", fd, got)
	}
}
