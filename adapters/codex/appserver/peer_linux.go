package appserver

import "golang.org/x/sys/unix"

// peerCred reads the pid and uid the kernel recorded for the process that
// listens at the other end of a connected unix socket.
func peerCred(fd int) (Peer, error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return Peer{}, err
	}
	return Peer{PID: int(cred.Pid), UID: int(cred.Uid)}, nil
}
