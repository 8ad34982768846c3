// Package sockfile listens on unix sockets at file paths that only their
// owner may use, through package net, and tells who is at the other end.
package sockfile

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
)

// Mode is the only permission a socket file gets: connecting needs write
// permission, and only the owner may connect.
const Mode = 0o600

// Listener is a socket being listened on at a path. Close removes the file.
type Listener struct {
	*net.UnixListener
	path string
	once sync.Once
}

// Listen creates a unix socket at path with mode 0600 and listens on it.
// Whatever is at path already (a socket left by a process that died) is
// replaced in one step; whether that is safe is for the caller to decide.
//
// The file is never reachable at path with a wider mode, and that takes
// care: package net binds and listens in one call, creating the file with
// the mode the umask leaves, so connections are accepted before a chmod
// can narrow it. Changing the umask would change it for every goroutine of
// the process at once (a directory made meanwhile would lose its x bits).
// So the socket is made in a new directory of its own beside path, mode
// 0700, which no other user may enter and so none may connect through;
// chmodded to 0600 there; and only then renamed onto path. During that
// window only this user (and root) could reach it, and the servers check
// every peer's uid anyway.
func Listen(path string) (*Listener, error) {
	// A short name: a socket path may not be longer than about 100 bytes.
	dir, err := os.MkdirTemp(filepath.Dir(path), ".s")
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	defer os.Remove(dir)
	// MkdirTemp asks for 0700; a umask may have taken the owner's bits.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	tmp := filepath.Join(dir, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	// The file leaves tmp; Close removes it under its final name.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, Mode); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return &Listener{UnixListener: ln, path: path}, nil
}

// Close stops listening and removes the socket file. Only the first call
// removes it: by a later one the path may belong to a new server. The file
// goes first, so the path never names a socket nobody listens on.
func (l *Listener) Close() error {
	l.once.Do(func() { os.Remove(l.path) })
	return l.UnixListener.Close()
}

// PeerPID returns the pid of the process at the other end of c, as the
// kernel recorded it when the connection was made (SO_PEERCRED,
// LOCAL_PEERPID): what the peer is, whatever it says it is.
func PeerPID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	pid := -1
	var perr error
	if err := raw.Control(func(fd uintptr) { pid, perr = peerPID(int(fd)) }); err != nil {
		return -1, err
	}
	return pid, perr
}

// PeerUID returns the uid of the process at the other end of c, as the
// kernel recorded it when the connection was made, so a peer cannot claim
// another user's.
func PeerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	uid := -1
	var uerr error
	if err := raw.Control(func(fd uintptr) { uid, uerr = peerUID(int(fd)) }); err != nil {
		return -1, err
	}
	return uid, uerr
}
