// Package tool holds the built-in CortexFS tools (fs.read, fs.list,
// fs.write, fs.search, shell.exec, cbth.job.submit) and the confinement
// every one of them goes through: paths are resolved inside an agent's
// root with os.Root, so neither "..", nor a symlink pointing out, nor a
// host absolute path can reach outside it.
package tool

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Clean resolves p against cwd (both seen from inside the root, where "/"
// is the root itself) and returns the clean rooted form ("/a/b"). A path
// whose ".." components would climb above the root is EACCES: it names
// something outside, whether or not that exists. An absolute p is rooted
// in the agent root, never in the host's.
func Clean(cwd, p string) (string, error) {
	if strings.ContainsRune(p, 0) || strings.ContainsRune(cwd, 0) {
		return "", errs.New(errs.EINVAL, "path contains NUL")
	}
	full := p
	if !strings.HasPrefix(p, "/") {
		if cwd == "" {
			cwd = "/"
		}
		full = cwd + "/" + p
	}
	depth := 0
	for _, c := range strings.Split(full, "/") {
		switch c {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return "", errs.New(errs.EACCES, "%s is outside the root", p)
			}
		default:
			depth++
		}
	}
	return path.Clean("/" + full), nil
}

// rel turns a rooted clean path into os.Root's relative form.
func rel(rooted string) string {
	r := strings.TrimPrefix(rooted, "/")
	if r == "" {
		return "."
	}
	return r
}

// fsErr maps an os.Root error to a stable code: missing ENOENT, a path
// that escapes (a symlink pointing out, an absolute symlink) or is not
// readable EACCES.
func fsErr(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return errs.Wrap(errs.ENOENT, err, "%s does not exist", what)
	case errors.Is(err, fs.ErrPermission), escapes(err):
		return errs.Wrap(errs.EACCES, err, "%s is outside the agent root or not allowed", what)
	case errors.Is(err, syscall.ENOTDIR):
		return errs.Wrap(errs.EINVAL, err, "%s: a component is not a directory", what)
	case errors.Is(err, syscall.EISDIR):
		return errs.Wrap(errs.EINVAL, err, "%s is a directory", what)
	}
	return errs.Wrap(errs.EINTERNAL, err, "%s", what)
}

// escapes recognizes os.Root's refusal of a path leaving the root; the
// os package has no exported value for it.
func escapes(err error) bool {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return strings.Contains(pe.Err.Error(), "escapes")
	}
	return strings.Contains(err.Error(), "path escapes")
}

// openRegular opens name inside the root and refuses it (EINVAL) unless
// it is a regular file. The open never blocks (O_NONBLOCK: a FIFO with
// no writer, or for writing no reader, would hold the call, and the
// session with it, for good) and the check is on the opened descriptor,
// so nothing can be swapped in between. flag never holds O_TRUNC: a
// writer truncates only once the file is known to be regular.
func openRegular(root *os.Root, name, what string, flag int) (*os.File, error) {
	f, err := root.OpenFile(name, flag|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0o600)
	if errors.Is(err, syscall.ENXIO) {
		// A FIFO opened for writing with no reader.
		return nil, errs.New(errs.EINVAL, "%s is not a regular file", what)
	}
	if err != nil {
		return nil, fsErr(err, what)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fsErr(err, what)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, errs.New(errs.EINVAL, "%s is not a regular file (%s)", what, st.Mode().Type())
	}
	return f, nil
}

// openCwd opens a session's working directory inside the root (the
// checks of Cwd, on the opened directory itself).
func openCwd(root *os.Root, cwd string) (*os.File, error) {
	c, err := Clean("/", cwd)
	if err != nil {
		return nil, err
	}
	f, err := root.OpenFile(rel(c), os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if errors.Is(err, syscall.ENOTDIR) {
		return nil, errs.New(errs.EINVAL, "cwd %s is not a directory", cwd)
	}
	if err != nil {
		return nil, fsErr(err, "cwd "+cwd)
	}
	return f, nil
}

// Cwd checks a session's working directory: it must be a directory inside
// the root. Missing is ENOENT, outside (by "..", a symlink, anything
// os.Root refuses) EACCES. It returns the clean rooted form.
func Cwd(root *os.Root, cwd string) (string, error) {
	if cwd == "" {
		cwd = "/"
	}
	c, err := Clean("/", cwd)
	if err != nil {
		return "", err
	}
	st, err := root.Stat(rel(c))
	if err != nil {
		return "", fsErr(err, "cwd "+cwd)
	}
	if !st.IsDir() {
		return "", errs.New(errs.EINVAL, "cwd %s is not a directory", cwd)
	}
	return c, nil
}
