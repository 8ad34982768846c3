package confine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cbth-dev/cbth/internal/confine"
)

// The test binary is the wrapper when started under its name, and the
// probe below when asked to be.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == confine.ProgramName {
		os.Exit(confine.Main(os.Args[1:]))
	}
	if os.Getenv("CONFINE_PROBE_SPAWN") != "" {
		// A child that leaves the confined program's process group: its
		// ancestry still tells.
		self, _ := os.Executable()
		c := exec.Command(self)
		c.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CONFINE_PROBE_SPAWN=") })
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		if err := c.Run(); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv("CONFINE_PROBE") != "" {
		os.Exit(probe())
	}
	os.Exit(m.Run())
}

// probe tries what a confined program must not do, and what it may, and
// prints each outcome.
func probe() int {
	try := func(what string, err error) {
		switch {
		case err == nil:
			fmt.Println(what, "ok")
		case errors.Is(err, unix.EPERM):
			fmt.Println(what, "EPERM")
		default:
			fmt.Println(what, err)
		}
	}
	sock := func(family int) error {
		fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
	try("unix", sock(unix.AF_UNIX))
	try("inet", sock(unix.AF_INET))
	// The kernel reads the family as an int: garbage in the upper half
	// must not make AF_UNIX look like another family.
	_, _, e := unix.RawSyscall(unix.SYS_SOCKET, 1<<32|unix.AF_UNIX, unix.SOCK_STREAM, 0)
	var err error
	if e != 0 {
		err = e
	}
	try("unix-high-bits", err)
	_, _, e = unix.RawSyscall(unix.SYS_IO_URING_SETUP, 8, 0, 0)
	err = nil
	if e != 0 {
		err = e
	}
	try("io_uring", err)
	if s := os.Getenv("CONFINE_PROBE_CONNECT"); s != "" {
		c, err := unixConnect(s)
		try("connect", err)
		if err == nil && os.Getenv("CONFINE_PROBE_WAIT") != "" {
			// Stay until the listener has looked at who connected.
			b := make([]byte, 1)
			c.Read(b)
			c.Close()
		}
	}
	return 0
}

func unixConnect(path string) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// runProbe runs this test binary as the probe, confined by p, and
// returns what it printed.
func runProbe(t *testing.T, p confine.Policy, env ...string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p.Exec = append(p.Exec, self)
	cmd, err := confine.Command(context.Background(), p, nil, []string{self}, append([]string{"CONFINE_PROBE=1"}, env...))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Args[0] = confine.ProgramName // the wrapper answers to its name
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the probe: %v\n%s", err, out)
	}
	return string(out)
}

// A program confined with no unix socket directory can make no unix
// socket (so it connects to none of the user's: the daemon's socket is
// one), however it asks, and cannot reach for one through io_uring; it
// still makes other sockets. With a directory named (the provider
// helper's session bus) unix sockets are left to Landlock.
func TestNoUnixSocketsUnderConfinement(t *testing.T) {
	st := confine.Check()
	var sockets confine.Right
	for _, r := range st.Rights {
		if r.Name == confine.RightUnixSockets {
			sockets = r
		}
	}
	if !sockets.Confined {
		t.Fatalf("this kernel cannot confine unix sockets (%s): the rule cannot be proven here", sockets.How)
	}
	dir := t.TempDir()
	sockPath := filepath.Join(dir, "s.sock")
	l, err := (&netListener{}).listen(sockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	out := runProbe(t, confine.Policy{RW: []string{dir}, Scoped: true}, "CONFINE_PROBE_CONNECT="+sockPath)
	for _, want := range []string{"unix EPERM", "unix-high-bits EPERM", "io_uring EPERM", "connect EPERM", "inet ok"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("confined: want %q in:\n%s", want, out)
		}
	}
	out = runProbe(t, confine.Policy{RW: []string{dir}, Unix: []string{dir}}, "CONFINE_PROBE_CONNECT="+sockPath)
	if !strings.Contains(out, "unix ok\n") || !strings.Contains(out, "connect ok\n") {
		t.Errorf("with its socket directory named: %s", out)
	}
}

// netListener listens on a unix socket path with the system calls
// themselves, so that the test needs nothing but the kernel.
type netListener struct{ fd int }

func (l *netListener) listen(path string) (*netListener, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Listen(fd, 4); err != nil {
		unix.Close(fd)
		return nil, err
	}
	l.fd = fd
	return l, nil
}

func (l *netListener) Close() error { return syscall.Close(l.fd) }

// A Tracker knows the processes of the confined programs started under
// it, by process group and then by ancestry, and no others: a program
// run unconfined, or confined without the tracker, is not one of them.
func TestTrackerKnowsConfinedProcesses(t *testing.T) {
	dir := t.TempDir()
	sockPath := filepath.Join(dir, "s.sock")
	l, err := (&netListener{}).listen(sockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	self, _ := os.Executable()
	tr := confine.NewTracker()
	// peerOf starts cmd, takes its connection and returns what the
	// tracker says of the process that connected.
	peerOf := func(cmd *exec.Cmd, track bool) string {
		t.Helper()
		cmd.Env = append(cmd.Env, "CONFINE_PROBE=1", "CONFINE_PROBE_WAIT=1", "CONFINE_PROBE_CONNECT="+sockPath)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if track {
			confine.Started(confine.WithTracker(context.Background(), tr), cmd)
		}
		defer cmd.Wait()
		nfd, _, err := unix.Accept(l.fd)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(nfd)
		cred, err := unix.GetsockoptUcred(nfd, unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			t.Fatal(err)
		}
		return tr.Why(int(cred.Pid))
	}
	confined := func(env ...string) *exec.Cmd {
		cmd, err := confine.Command(context.Background(), confine.Policy{RW: []string{dir}, Unix: []string{dir}, Exec: []string{self}}, nil, []string{self}, env)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Args[0] = confine.ProgramName
		return cmd
	}
	if why := peerOf(confined(), true); !strings.Contains(why, "belongs to a program cbth runs confined") {
		t.Errorf("a tracked confined program: %q", why)
	}

	if why := peerOf(confined("CONFINE_PROBE_SPAWN=1"), true); !strings.Contains(why, "descends from a program cbth runs confined") {
		t.Errorf("a child in a group of its own: %q", why)
	}
	if why := peerOf(confined(), false); why != "" {
		t.Errorf("a confined program started without the tracker: %q", why)
	}
	if why := peerOf(exec.Command(self), false); why != "" {
		t.Errorf("an unconfined program: %q", why)
	}
}
