package task

import (
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// processStart is the start time of process pid as the kernel keeps it
// (kern.proc.pid's p_starttime, to the microsecond): with the pid it
// names one process, whatever pid reuse does. ok is false when no
// process has that pid.
func processStart(pid int) (start string, ok bool, err error) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		// A pid no process has answers with no record at all (EIO here).
		if err == unix.EIO || err == unix.ESRCH {
			return "", false, nil
		}
		return "", false, err
	}
	if int(kp.Proc.P_pid) != pid {
		return "", false, nil
	}
	t := kp.Proc.P_starttime
	return fmt.Sprintf("darwin-kinfo:%d.%06d", t.Sec, t.Usec), true, nil
}

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
