package task

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// leader is a handle on a verified group leader. macOS has no pidfd: the
// pid's start time is checked again before each signal.
type leader struct {
	pid   int
	start string
}

func openLeader(pid int, start string) (*leader, string) {
	l := &leader{pid: pid, start: start}
	if why := l.check(); why != "" {
		return nil, why
	}
	return l, ""
}

// check says why the leader is no longer the recorded process ("" while
// it is, a zombie included).
func (l *leader) check() string { return checkStart(l.pid, l.start) }

func (l *leader) signal(sig syscall.Signal) { _ = syscall.Kill(l.pid, sig) }

func (l *leader) close() {}

// waitExited waits until the child pid has exited without reaping it
// (kqueue's NOTE_EXIT fires at the exit; the zombie stays): until it is
// reaped its pid, and so its process group id, cannot be given to
// another process.
func waitExited(pid int) error {
	kq, err := unix.Kqueue()
	if err != nil {
		return err
	}
	defer unix.Close(kq)
	ev := unix.Kevent_t{Ident: uint64(pid), Filter: unix.EVFILT_PROC, Flags: unix.EV_ADD | unix.EV_ONESHOT, Fflags: unix.NOTE_EXIT}
	if _, err := unix.Kevent(kq, []unix.Kevent_t{ev}, nil, nil); err != nil {
		// ESRCH: it has exited already (a zombie no longer takes a knote).
		if err == unix.ESRCH {
			return nil
		}
		return err
	}
	out := make([]unix.Kevent_t, 1)
	for {
		ts := unix.NsecToTimespec(int64(time.Hour))
		n, err := unix.Kevent(kq, nil, out, &ts)
		if err == unix.EINTR || (err == nil && n == 0) {
			continue
		}
		return err
	}
}
