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
