package proc

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Start is the start time of process pid as the kernel keeps it
// (kern.proc.pid's p_starttime, to the microsecond): with the pid it
// names one process, whatever pid reuse does. ok is false when no
// process has that pid.
func Start(pid int) (start string, ok bool, err error) {
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

// Info is what Parent reads of a process.
type Info struct {
	PPID, UID int
}

// Parent returns process pid's parent and real uid; ok is false when no
// process has that pid.
func Parent(pid int) (Info, bool, error) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		if err == unix.EIO || err == unix.ESRCH {
			return Info{}, false, nil
		}
		return Info{}, false, err
	}
	if int(kp.Proc.P_pid) != pid {
		return Info{}, false, nil
	}
	return Info{PPID: int(kp.Eproc.Ppid), UID: int(kp.Eproc.Pcred.P_ruid)}, true, nil
}
