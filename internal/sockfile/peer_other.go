//go:build !linux && !darwin

package sockfile

import "errors"

// peerUID has no implementation here, so every peer is refused.
func peerUID(int) (int, error) {
	return -1, errors.New("peer credentials are not supported on this system")
}

// peerPID has no implementation here.
func peerPID(int) (int, error) {
	return -1, errors.New("peer credentials are not supported on this system")
}
