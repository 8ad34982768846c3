package task

import "syscall"

// signalGroup signals every process of the group; a group that is gone
// is not an error. Darwin answers EPERM, not ESRCH, for a group whose
// only members are zombies (an exited leader not yet reaped): the group
// is ours (same user), so EPERM means there is nothing left to signal.
func signalGroup(pgid int, sig syscall.Signal) error {
	if err := syscall.Kill(-pgid, sig); err != nil && err != syscall.ESRCH && err != syscall.EPERM {
		return err
	}
	return nil
}
