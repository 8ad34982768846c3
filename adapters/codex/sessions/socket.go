package sessions

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/cbth-dev/cbth/internal/errs"
)

// DaemonSocket is where the Codex daemon a plain `codex` runs listens,
// for a Codex home: `codex app-server daemon version` prints the same
// path as socketPath.
func DaemonSocket(codexHome string) string {
	return filepath.Join(codexHome, "app-server-control", "app-server-control.sock")
}

// CheckDaemonSocket checks the Codex daemon's socket before cbth speaks
// to it: the socket has no authentication of its own, so only the file
// system says who may. Every step from the Codex home to the socket must
// belong to uid and be writable by it alone: the control directory, the
// path (a socket, or a symlink to one, as Codex makes it), the directory
// the symlink leads to (owner-only, as Codex makes it) and the socket
// (no group or other bits). It returns the socket the path leads to.
// A missing path is EHOSTDOWN (the daemon does not run); anything else
// that fails is EACCES, naming the step.
func CheckDaemonSocket(path string, uid int) (string, error) {
	dir := filepath.Dir(path)
	if err := ownedBy(dir, uid, 0o022, true); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", errs.New(errs.EHOSTDOWN, "the Codex daemon does not run: no %s", dir)
		}
		return "", err
	}
	fi, err := os.Lstat(path)
	if os.IsNotExist(err) {
		return "", errs.New(errs.EHOSTDOWN, "the Codex daemon does not run: no socket at %s", path)
	}
	if err != nil {
		return "", errs.Wrap(errs.EACCES, err, "codex daemon socket")
	}
	target := path
	if fi.Mode()&fs.ModeSymlink != 0 {
		if err := ownerIs(path, fi, uid); err != nil {
			return "", err
		}
		link, err := os.Readlink(path)
		if err != nil {
			return "", errs.Wrap(errs.EACCES, err, "codex daemon socket link")
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(dir, link)
		}
		target = filepath.Clean(link)
		if err := ownedBy(filepath.Dir(target), uid, 0o077, true); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", errs.New(errs.EHOSTDOWN, "the Codex daemon does not run: %s leads to %s, which is gone", path, target)
			}
			return "", err
		}
		if fi, err = os.Lstat(target); err != nil {
			if os.IsNotExist(err) {
				return "", errs.New(errs.EHOSTDOWN, "the Codex daemon does not run: %s leads to %s, which is gone", path, target)
			}
			return "", errs.Wrap(errs.EACCES, err, "codex daemon socket")
		}
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return "", errs.New(errs.EACCES, "%s is not a socket (%s)", target, fi.Mode().Type())
	}
	if err := ownerIs(target, fi, uid); err != nil {
		return "", err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", errs.New(errs.EACCES, "codex daemon socket %s is open to others (mode %04o): refused", target, fi.Mode().Perm())
	}
	return target, nil
}

// ownedBy checks that path belongs to uid and has none of the bits in
// forbidden; a directory must be one.
func ownedBy(path string, uid int, forbidden fs.FileMode, dir bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return errs.Wrap(errs.EACCES, err, "codex daemon")
	}
	if dir && !fi.IsDir() {
		return errs.New(errs.EACCES, "%s is not a directory (%s)", path, fi.Mode().Type())
	}
	if err := ownerIs(path, fi, uid); err != nil {
		return err
	}
	if fi.Mode().Perm()&forbidden != 0 {
		return errs.New(errs.EACCES, "%s is writable or open to others (mode %04o): refused", path, fi.Mode().Perm())
	}
	return nil
}

func ownerIs(path string, fi fs.FileInfo, uid int) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return errs.New(errs.EACCES, "%s: owner unknown", path)
	}
	if int(st.Uid) != uid {
		return errs.New(errs.EACCES, "%s belongs to uid %d, not %d: refused", path, st.Uid, uid)
	}
	return nil
}
