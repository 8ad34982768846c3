package task

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// leader is a handle on a verified group leader: a pidfd where the
// kernel has them (Linux 5.3), which keeps naming that one process even
// once its pid is reused; else the pid, checked again before each signal.
type leader struct {
	pid   int
	start string
	pidfd int // -1 without one
}

// openLeader opens the process pid and checks it is the one that started
// at start. The pidfd is opened first and the start read after, so a pid
// reused in between reads as another process, never the other way round.
func openLeader(pid int, start string) (*leader, string) {
	l := &leader{pid: pid, start: start, pidfd: -1}
	if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		l.pidfd = fd
	} else if err == unix.ESRCH {
		return nil, fmt.Sprintf("its group leader (pid %d) has exited", pid)
	}
	if why := l.check(); why != "" {
		l.close()
		return nil, why
	}
	return l, ""
}

// check says why the leader is no longer the recorded process ("" while
// it is, a zombie included: its pid, and so its group id, stay taken).
func (l *leader) check() string {
	if l.pidfd >= 0 {
		if err := unix.PidfdSendSignal(l.pidfd, 0, nil, 0); err == unix.ESRCH {
			return fmt.Sprintf("its group leader (pid %d) has exited", l.pid)
		}
	}
	return checkStart(l.pid, l.start)
}

// signal sends sig to the leader itself: through its pidfd, which cannot
// reach another process, where there is one.
func (l *leader) signal(sig syscall.Signal) {
	if l.pidfd >= 0 {
		_ = unix.PidfdSendSignal(l.pidfd, sig, nil, 0)
		return
	}
	_ = syscall.Kill(l.pid, sig)
}

func (l *leader) close() {
	if l.pidfd >= 0 {
		unix.Close(l.pidfd)
	}
}

// waitExited waits until the child pid has exited without reaping it:
// until it is reaped its pid, and so its process group id, cannot be
// given to another process.
func waitExited(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return err
		}
	}
}
