package sessions

import (
	"errors"
	"fmt"
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

// processStart names when pid started (p_starttime of the kernel's
// process table): with the pid, it tells one process from another that
// reuses the pid later.
func processStart(pid int) (string, error) {
	k, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return "", err
	}
	if k.Proc.P_pid != int32(pid) {
		return "", errors.New("no such process")
	}
	return fmt.Sprintf("%d.%06d", k.Proc.P_starttime.Sec, k.Proc.P_starttime.Usec), nil
}

// serverExecutable is the executable pid runs: macOS has no cgo-free
// way to read it, so "" (the caller looks elsewhere).
func serverExecutable(int) string { return "" }
