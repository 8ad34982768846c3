package appserver

import "golang.org/x/sys/unix"

// peerCred reads the pid and uid the kernel recorded for the process that
// listens at the other end of a connected unix socket.
func peerCred(fd int) (Peer, error) {
	cred, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return Peer{}, err
	}
	pid, err := unix.GetsockoptInt(fd, unix.SOL_LOCAL, unix.LOCAL_PEERPID)
	if err != nil {
		return Peer{}, err
	}
	return Peer{PID: pid, UID: int(cred.Uid)}, nil
}
