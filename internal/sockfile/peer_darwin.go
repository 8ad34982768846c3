package sockfile

import (
	"os"

	"golang.org/x/sys/unix"
)

// peerUID reads LOCAL_PEERCRED, which is what getpeereid(3) reads on
// macOS.
func peerUID(fd int) (int, error) {
	cred, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return -1, os.NewSyscallError("getsockopt LOCAL_PEERCRED", err)
	}
	return int(cred.Uid), nil
}

// peerPID reads LOCAL_PEERPID.
func peerPID(fd int) (int, error) {
	pid, err := unix.GetsockoptInt(fd, unix.SOL_LOCAL, unix.LOCAL_PEERPID)
	if err != nil {
		return -1, os.NewSyscallError("getsockopt LOCAL_PEERPID", err)
	}
	return pid, nil
}
