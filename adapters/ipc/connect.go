package ipc

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Absent reports whether a dial error means no daemon is listening (the
// socket is missing or refuses), as opposed to some other failure.
func Absent(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// Connect dials the daemon; when nothing listens and start is non-nil it
// calls start once (which launches a detached daemon and may wait for it)
// and waits, bounded by timeout from before start, until the socket
// answers.
func Connect(ctx context.Context, socket, version string, start func() error, timeout time.Duration) (*Client, error) {
	c, err := Dial(socket, version)
	if err == nil {
		return c, nil
	}
	if !Absent(err) {
		if errors.Is(err, syscall.EACCES) {
			return nil, errs.Wrap(errs.EACCES, err, "connect to %s", socket)
		}
		return nil, errs.Wrap(errs.EHOSTDOWN, err, "connect to %s", socket)
	}
	if start == nil {
		return nil, errs.Wrap(errs.EHOSTDOWN, err, "the daemon is not running (auto-start is off)")
	}
	deadline := time.Now().Add(timeout)
	if err := start(); err != nil {
		// A coded error is the daemon's own reason (a bad configuration
		// is EINVAL, a damaged log ECORRUPT, a foreign home EACCES): it
		// is the answer, not a detail of EHOSTDOWN.
		if ce := (*errs.Error)(nil); errors.As(err, &ce) {
			return nil, err
		}
		return nil, errs.Wrap(errs.EHOSTDOWN, err, "start the daemon")
	}
	wait := 2 * time.Millisecond
	for {
		c, err := Dial(socket, version)
		if err == nil {
			return c, nil
		}
		if !Absent(err) || time.Now().After(deadline) {
			return nil, errs.Wrap(errs.EHOSTDOWN, err, "the daemon did not come up within %s (see its log)", timeout)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if wait < 50*time.Millisecond {
			wait *= 2
		}
	}
}
