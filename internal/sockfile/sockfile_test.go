package sockfile

import (
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

func listen(t *testing.T, path string) *Listener {
	t.Helper()
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("%s is not a socket: %v", path, fi.Mode())
	}
	return fi.Mode().Perm()
}

// Neither a umask that grants everything nor one that takes the owner's
// bits changes the mode: 0600.
func TestModeIs0600UnderAnyUmask(t *testing.T) {
	for _, mask := range []int{0, 0o277} {
		old := syscall.Umask(mask)
		path := filepath.Join(t.TempDir(), "s.sock")
		ln, err := Listen(path)
		syscall.Umask(old)
		if err != nil {
			t.Fatalf("umask %o: %v", mask, err)
		}
		if m := mode(t, path); m != Mode {
			t.Errorf("umask %o: mode %v, want %v", mask, m, os.FileMode(Mode))
		}
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("umask %o: the owner cannot connect: %v", mask, err)
		}
		c.Close()
		ln.Close()
	}
}

// Whenever anything is at the path, it is a 0600 socket: a watcher that
// stats the path while sockets are made there over and over never sees a
// wider mode. (The directory it was made in is gone too.)
func TestNeverWiderAtItsPath(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")
	var stop atomic.Bool
	var seen, wide atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if fi, err := os.Lstat(path); err == nil {
				seen.Add(1)
				if fi.Mode().Perm() != Mode {
					wide.Add(1)
				}
			}
		}
	}()
	for range 300 {
		ln, err := Listen(path)
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
	}
	stop.Store(true)
	wg.Wait()
	if wide.Load() > 0 {
		t.Fatalf("%d of %d looks at the path found a mode other than 0600", wide.Load(), seen.Load())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}

// A socket file left by a process that died is replaced, and the new one
// answers; Close removes the file.
func TestStaleSocketReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	dead, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	dead.SetUnlinkOnClose(false)
	dead.Close()
	if _, err := net.Dial("unix", path); err == nil {
		t.Fatal("the stale socket still answers")
	}
	ln := listen(t, path)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("the new socket does not answer: %v", err)
	}
	c.Close()
	if m := mode(t, path); m != Mode {
		t.Fatalf("mode %v", m)
	}
	ln.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("Close left the file: %v", err)
	}
}

// Both ends see this process's uid as the peer's.
func TestPeerUID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	ln := listen(t, path)
	accepted := make(chan *net.UnixConn, 1)
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server := <-accepted
	if server == nil {
		t.FailNow()
	}
	defer server.Close()
	for name, c := range map[string]*net.UnixConn{"server side": server, "client side": client} {
		if uid, err := PeerUID(c); err != nil || uid != os.Getuid() {
			t.Errorf("%s: PeerUID %d, %v; want %d", name, uid, err, os.Getuid())
		}
	}
}
