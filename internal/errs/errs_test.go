package errs_test

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Every code exits with the status MISSION.md rule 10 gives its class.
func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		code errs.Code
		exit int
	}{
		{"", 0},
		{errs.EINVAL, 2}, {errs.EMSGSIZE, 2}, {errs.EFBIG, 2}, {errs.ThreadUnidentified, 2},
		{errs.EACCES, 13}, {errs.ThreadMismatch, 13}, {errs.TaskNotAllowed, 13},
		{errs.EHOSTDOWN, 69}, {errs.EAGAIN, 69}, {errs.ENOTCONF, 69}, {errs.ENOTSUP, 69},
		{errs.EVERSION, 69}, {errs.ENOSPC, 69}, {errs.ESANDBOX, 69},
		{errs.EINTERNAL, 70}, {errs.ECORRUPT, 70},
		{errs.ENOENT, 1}, {errs.ESTATE, 1}, {errs.EBUSY, 1}, {errs.ETIMEDOUT, 1}, {errs.TransientNotReady, 1},
	} {
		if got := c.code.ExitCode(); got != c.exit {
			t.Errorf("%q exits %d, want %d", c.code, got, c.exit)
		}
	}
}

// A failed write of cbth's own files is ENOSPC (exit 69: the user can
// free space) when the disk or the quota is full, through any wrapping;
// any other failure is EINTERNAL. This is the rule cmd/cbth's "a full
// disk is ENOSPC" checks on a small tmpfs as root; the Linux test beside
// it takes a real ENOSPC from /dev/full.
func TestIOClassifiesAFullDisk(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want errs.Code
	}{
		{"no space", syscall.ENOSPC, errs.ENOSPC},
		{"quota", syscall.EDQUOT, errs.ENOSPC},
		{"no space in a path error", &fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}, errs.ENOSPC},
		{"no space wrapped twice", fmt.Errorf("commit: %w", &fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}), errs.ENOSPC},
		{"an I/O error", syscall.EIO, errs.EINTERNAL},
		{"read-only", &fs.PathError{Op: "open", Path: "/x", Err: syscall.EROFS}, errs.EINTERNAL},
	} {
		err := errs.IO(c.err, "write %s", "thing")
		if got := errs.CodeOf(err); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%s: the cause is lost: %v", c.name, err)
		}
	}
}

// Codes travel through wrapping: CodeOf reads the outermost, errors.Is
// matches a code-only sentinel, and an error with no code is EINTERNAL.
func TestCodesThroughWrapping(t *testing.T) {
	inner := errs.New(errs.ENOENT, "no job %s", "j1")
	outer := errs.Wrap(errs.ESTATE, inner, "cancel")
	for _, c := range []struct {
		name string
		err  error
		code errs.Code
		is   []errs.Code
		msg  string
	}{
		{"nil", nil, "", nil, ""},
		{"plain", errors.New("boom"), errs.EINTERNAL, nil, "boom"},
		{"coded", inner, errs.ENOENT, []errs.Code{errs.ENOENT}, "no job j1"},
		{"wrapped", outer, errs.ESTATE, []errs.Code{errs.ESTATE, errs.ENOENT}, "cancel: no job j1"},
		{"under fmt", fmt.Errorf("op: %w", inner), errs.ENOENT, []errs.Code{errs.ENOENT}, "op: no job j1"},
		{"message-less wrap", errs.Wrap(errs.EACCES, errors.New("denied"), ""), errs.EACCES, []errs.Code{errs.EACCES}, "denied"},
	} {
		if got := errs.CodeOf(c.err); got != c.code {
			t.Errorf("%s: CodeOf %q, want %q", c.name, got, c.code)
		}
		for _, code := range c.is {
			if !errors.Is(c.err, errs.Sentinel(code)) {
				t.Errorf("%s: not errors.Is %s", c.name, code)
			}
		}
		if c.err != nil {
			if errors.Is(c.err, errs.Sentinel(errs.EBUSY)) {
				t.Errorf("%s: matches a code it does not carry", c.name)
			}
			if c.err.Error() != c.msg {
				t.Errorf("%s: message %q, want %q", c.name, c.err.Error(), c.msg)
			}
		}
	}
	if errors.Is(inner, errs.New(errs.ENOENT, "with a message")) {
		t.Error("a sentinel with a message matched: only code-only errors are sentinels")
	}
}
