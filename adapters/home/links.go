package home

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/internal/errs"
	"golang.org/x/sys/unix"
)

// Symbolic links in the home.
//
// A home path that someone else can plant, in a shared temporary
// directory say, could point cbth at one of this user's own directories,
// which cbth would then narrow to 0700 and fill. So a symbolic link where
// cbth keeps or creates a directory is followed only when this user owns
// it (the rule of the kernel's protected_symlinks and of ssh's
// StrictModes), and the run directory, the lock and the socket, which
// other processes find by path, may not be links at all.

// checkLink refuses path if it is a symbolic link owned by another user
// than uid, or, with strict, any symbolic link. A missing path passes.
func checkLink(path string, strict bool, uid int) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return errs.Wrap(errs.EACCES, err, "stat %s", path)
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		return nil
	}
	if strict {
		return errs.New(errs.EACCES, "%s is a symbolic link; cbth does not follow one there", path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid {
		return errs.New(errs.EACCES, "%s is a symbolic link owned by uid %d, not by this user (%d); cbth does not follow it", path, st.Uid, uid)
	}
	return nil
}

// CheckSocket checks the socket path before a daemon listens there:
// nothing there, or a socket (a stale one, which the lock holder may
// replace), passes. A symbolic link is refused (EACCES); anything else is
// an error (EEXIST), not something to delete.
func (h Home) CheckSocket() error {
	p := h.Socket()
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return errs.Wrap(errs.EACCES, err, "stat %s", p)
	case fi.Mode()&fs.ModeSymlink != 0:
		return errs.New(errs.EACCES, "%s is a symbolic link; cbth does not follow one there", p)
	case fi.Mode()&fs.ModeSocket == 0:
		return errs.New(errs.EEXIST, "%s is a %s, not a socket; cbth does not remove it: move it away", p, kind(fi.Mode()))
	}
	return nil
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "file of mode " + m.String()
}

// OpenLock opens the daemon's lock file, creating it 0600; a symbolic
// link there is refused with EACCES.
func (h Home) OpenLock() (*os.File, error) {
	f, err := os.OpenFile(h.Lock(), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, FileMode)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, errs.New(errs.EACCES, "%s is a symbolic link; cbth does not follow one there", h.Lock())
		}
		return nil, errs.Wrap(errs.EACCES, err, "open %s", h.Lock())
	}
	return f, nil
}

// Acquire takes the daemon's lock for a command that must run with no
// daemon (EBUSY while one runs). Closing the file releases it.
func (h Home) Acquire() (*os.File, error) {
	f, err := h.OpenLock()
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errs.New(errs.EBUSY, "a daemon runs for %s; stop it first (cbth daemon stop)", h.Root)
		}
		return nil, errs.Wrap(errs.EINTERNAL, err, "lock %s", h.Lock())
	}
	return f, nil
}

// MoveAside renames the home to <root>.old-<UTC time>, where it is kept
// as it was, and returns the new name. The caller holds the lock.
func (h Home) MoveAside(now time.Time) (string, error) {
	aside := h.Root + ".old-" + now.UTC().Format("20060102T150405Z")
	if _, err := os.Lstat(aside); err == nil {
		return "", errs.New(errs.EEXIST, "%s already exists", aside)
	}
	if err := os.Rename(h.Root, aside); err != nil {
		return "", errs.Wrap(errs.EACCES, err, "move %s aside", h.Root)
	}
	return aside, nil
}
