package supervisor

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// parentAndGroup reads pid's parent and process group from the kernel's
// process table (sysctl kern.proc.pid).
func parentAndGroup(pid int) (ppid, pgid int, err error) {
	k, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return 0, 0, err
	}
	// For a pid that does not exist the sysctl answers with an empty record.
	if int(k.Proc.P_pid) != pid {
		return 0, 0, fmt.Errorf("no process %d", pid)
	}
	return int(k.Eproc.Ppid), int(k.Eproc.Pgid), nil
}
