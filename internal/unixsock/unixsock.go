// Package unixsock is the unix-domain stream socket cbth needs, built on
// system calls instead of package net.
//
// Package net carries a cgo DNS resolver: with a C compiler installed, any
// binary importing it is linked dynamically and pays the dynamic loader on
// every start. cbth starts for every job command and every CortexFS object
// run, and only ever talks over sockets at local paths, so it keeps net out.
//
// Descriptors are non-blocking and wrapped in *os.File, so reads, writes,
// accepts and deadlines park goroutines in the runtime poller rather than
// threads, and Close wakes whatever is parked.
package unixsock

import (
	"errors"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrClosed is what calls on a closed Listener or Conn return (wrapped).
// It is os.ErrClosed, the error a closed *os.File already reports, so one
// errors.Is test covers the listener and its connections alike.
var ErrClosed = os.ErrClosed

// mode is the only permission a socket file gets: connecting needs write
// permission, and only the owner may connect.
const mode = 0o600

// backlog asks for the largest accept queue the kernel allows: Linux
// silently lowers listen(2)'s argument to net.core.somaxconn, so this is
// exactly the system's limit without reading /proc.
const backlog = math.MaxInt32

// Listener accepts connections on a socket file.
type Listener struct {
	f      *os.File
	rc     syscall.RawConn
	path   string
	unlink atomic.Bool
	closed atomic.Bool
	once   sync.Once
}

// Listen creates a socket file at path, mode 0600, and listens on it. The
// path must not exist (EADDRINUSE otherwise): whether an old socket there
// is stale is for the caller to decide. Close removes the file unless
// SetUnlinkOnClose(false) says otherwise.
func Listen(path string) (*Listener, error) {
	fd, err := socket()
	if err != nil {
		return nil, opError("listen", path, err)
	}
	if err := bind(fd, path); err != nil {
		unix.Close(fd)
		return nil, opError("listen", path, err)
	}
	// bind leaves the mode narrowed by the umask; a umask that took the
	// owner's write bit would lock the owner out.
	if err := os.Chmod(path, mode); err != nil {
		unix.Close(fd)
		os.Remove(path)
		return nil, opError("listen", path, err)
	}
	if err := unix.Listen(fd, backlog); err != nil {
		unix.Close(fd)
		os.Remove(path)
		return nil, opError("listen", path, os.NewSyscallError("listen", err))
	}
	f := os.NewFile(uintptr(fd), path)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, opError("listen", path, err)
	}
	l := &Listener{f: f, rc: rc, path: path}
	l.unlink.Store(true)
	return l, nil
}

func socket() (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	return fd, nil
}

// bind creates the socket file. Linux gives the new file the socket
// inode's mode less the umask, so narrowing the inode first means the path
// is never reachable with wider permissions than 0600, not even for an
// instant, and without touching the process-wide umask.
func bind(fd int, path string) error {
	if err := unix.Fchmod(fd, mode); err != nil {
		return os.NewSyscallError("fchmod", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return os.NewSyscallError("bind", err)
	}
	return nil
}

// SetUnlinkOnClose chooses whether Close removes the socket file. A caller
// that renames the file into place turns it off and removes the final
// name itself.
func (l *Listener) SetUnlinkOnClose(unlink bool) { l.unlink.Store(unlink) }

// Accept waits for the next connection. After Close, it returns an error
// matching ErrClosed; a Close from another goroutine wakes a waiting
// Accept.
func (l *Listener) Accept() (*Conn, error) {
	var nfd int
	var aerr error
	err := l.rc.Read(func(fd uintptr) bool {
		for {
			nfd, aerr = accept(int(fd))
			switch aerr {
			case unix.EINTR, unix.ECONNABORTED:
				// Interrupted, or a client gave up while queued: neither
				// is the listener's failure.
				continue
			case unix.EAGAIN:
				return false // nothing queued: park in the poller
			}
			return true
		}
	})
	if err != nil {
		if l.closed.Load() {
			return nil, opError("accept", l.path, ErrClosed)
		}
		return nil, opError("accept", l.path, err)
	}
	if aerr != nil {
		return nil, opError("accept", l.path, os.NewSyscallError("accept4", aerr))
	}
	return newConn(nfd, l.path), nil
}

// accept takes a queued connection without asking for the peer's address:
// a unix client is usually unnamed, and cbth identifies peers by uid.
func accept(fd int) (int, error) {
	nfd, _, errno := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(fd), 0, 0, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(nfd), nil
}

// Close stops listening, wakes a waiting Accept and, unless told not to,
// removes the socket file. Connections already accepted stay open.
func (l *Listener) Close() error {
	l.closed.Store(true)
	l.once.Do(func() {
		// Removed before the descriptor closes, so at no moment does the
		// path name a socket that nobody listens on.
		if l.unlink.Load() {
			os.Remove(l.path)
		}
	})
	return l.f.Close()
}

// Conn is one connected stream. Read, Write and Close are safe to call
// from different goroutines, as with a net.Conn.
type Conn struct {
	f *os.File
}

func newConn(fd int, name string) *Conn {
	return &Conn{f: os.NewFile(uintptr(aboveStdio(fd)), name)}
}

// aboveStdio moves a descriptor that landed on 0, 1 or 2 (possible only
// if the process closed its standard files) higher up. *os.File treats a
// write error EPIPE on descriptor 1 or 2 as a broken stdout and kills the
// process with SIGPIPE; a client hanging up must never do that to a
// server.
func aboveStdio(fd int) int {
	if fd > 2 {
		return fd
	}
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return fd // still a working socket; only the SIGPIPE guard is lost
	}
	unix.Close(fd)
	return nfd
}

// Dial connects to the socket file at path. A missing file is an error
// matching syscall.ENOENT, a file nobody listens on ECONNREFUSED.
func Dial(path string) (*Conn, error) {
	fd, err := socket()
	if err != nil {
		return nil, opError("dial", path, err)
	}
	sa := &unix.SockaddrUnix{Name: path}
	for {
		// A non-blocking unix connect completes or fails at once (a full
		// accept queue is EAGAIN, as package net reports it too); there is
		// no in-progress state to wait on.
		err = unix.Connect(fd, sa)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, opError("dial", path, os.NewSyscallError("connect", err))
	}
	return newConn(fd, path), nil
}

// Read reads what has arrived, waiting for at least one byte; at the end
// of the peer's stream it returns io.EOF.
func (c *Conn) Read(p []byte) (int, error) { return c.f.Read(p) }

// Write writes all of p, waiting while the peer's buffer is full: a peer
// that stops reading stops the writer, which is the backpressure servers
// rely on. A deadline ends the wait with a timeout error.
func (c *Conn) Write(p []byte) (int, error) { return c.f.Write(p) }

// Close closes the connection and wakes any Read or Write waiting on it.
func (c *Conn) Close() error { return c.f.Close() }

// SetDeadline sets the read and write deadlines; the zero time clears
// them. A call that runs past its deadline fails with an error matching
// os.ErrDeadlineExceeded whose Timeout method reports true.
func (c *Conn) SetDeadline(t time.Time) error { return c.f.SetDeadline(t) }

// SetReadDeadline is SetDeadline for reads only.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.f.SetReadDeadline(t) }

// SetWriteDeadline is SetDeadline for writes only.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.f.SetWriteDeadline(t) }

// PeerUID returns the uid of the process at the other end, as the kernel
// recorded it at connect time (SO_PEERCRED), so a peer cannot claim
// another user.
func (c *Conn) PeerUID() (int, error) {
	rc, err := c.f.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, os.NewSyscallError("getsockopt", cerr)
	}
	return int(cred.Uid), nil
}

// opError names the operation and path, as package net's errors did, and
// keeps the cause reachable for errors.Is.
func opError(op, path string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Path == path {
		pe.Op = op + ": " + pe.Op
		return pe
	}
	return &os.PathError{Op: op, Path: path, Err: err}
}
