package sessions

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// szomb is a zombie's p_stat (sys/proc.h).
const szomb = 5

// exited reports whether pid no longer runs: gone, or a zombie waiting to
// be reaped by its parent (for an orphan, launchd, whenever it gets to it).
func exited(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	k, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return false
	}
	return k.Proc.P_pid != int32(pid) || k.Proc.P_stat == szomb
}
