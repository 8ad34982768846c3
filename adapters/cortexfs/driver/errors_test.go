package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/cbth-dev/cbth/internal/errs"
)

// timeoutOnly has Timeout but not Temporary, so it is not a net.Error.
type timeoutOnly struct{}

func (timeoutOnly) Error() string { return "slow" }
func (timeoutOnly) Timeout() bool { return true }

func TestIsTransportClassification(t *testing.T) {
	dialErr := func() error {
		_, err := net.Dial("unix", "/nonexistent/cbth-test.sock")
		return err
	}()
	cases := map[string]struct {
		err  error
		want bool
	}{
		"nil":          {nil, false},
		"plain":        {errors.New("boom"), false},
		"eof":          {io.EOF, false},
		"coded":        {errs.New(errs.EINVAL, "bad"), false},
		"canceled":     {context.Canceled, false},
		"timeout-only": {timeoutOnly{}, false},
		// Every syscall.Errno has Timeout and Temporary, so net counted
		// any errno as a transport failure; so does IsTransport.
		"enoent":              {syscall.ENOENT, true},
		"refused":             {syscall.ECONNREFUSED, true},
		"reset wrapped":       {fmt.Errorf("read: %w", os.NewSyscallError("read", syscall.ECONNRESET)), true},
		"host unreachable":    {syscall.EHOSTUNREACH, true},
		"net unreachable":     {syscall.ENETUNREACH, true},
		"op error":            {&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("x")}, true},
		"op error wrapped":    {fmt.Errorf("send: %w", &net.OpError{Op: "read", Net: "tcp", Err: io.ErrUnexpectedEOF}), true},
		"dns":                 {&net.DNSError{Err: "no such host", Name: "api.example"}, true},
		"real dial":           {dialErr, true},
		"url":                 {&url.Error{Op: "Post", URL: "https://api.example", Err: errors.New("x")}, true},
		"deadline":            {context.DeadlineExceeded, true},
		"os deadline":         {os.ErrDeadlineExceeded, true},
		"closed network conn": {net.ErrClosed, true},
	}
	for name, tc := range cases {
		if got := IsTransport(tc.err); got != tc.want {
			t.Errorf("%s (%v): IsTransport %v, want %v", name, tc.err, got, tc.want)
		}
	}
}

// Canceled runs, whatever the transport error, count as cancelled; and an
// unreachable provider is EHOSTDOWN (exit 69 in cbth-providers).
func TestCanceledAndTransportCode(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if !Canceled(ctx, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}) {
		t.Error("a reset after cancel is not Canceled")
	}
	if Canceled(context.Background(), syscall.ECONNREFUSED) {
		t.Error("a refused dial without cancel is Canceled")
	}
	err := Transport("openai", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, "sk-secret")
	if errs.CodeOf(err) != errs.EHOSTDOWN || errs.EHOSTDOWN.ExitCode() != 69 {
		t.Errorf("transport error %v: code %s exit %d", err, errs.CodeOf(err), errs.CodeOf(err).ExitCode())
	}
}
