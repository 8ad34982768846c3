package sockfile

import (
	"os"

	"golang.org/x/sys/unix"
)

// peerUID reads SO_PEERCRED.
func peerUID(fd int) (int, error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return -1, os.NewSyscallError("getsockopt SO_PEERCRED", err)
	}
	return int(cred.Uid), nil
}

// peerPID reads SO_PEERCRED.
func peerPID(fd int) (int, error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return -1, os.NewSyscallError("getsockopt SO_PEERCRED", err)
	}
	return int(cred.Pid), nil
}
