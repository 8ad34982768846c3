package home

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/internal/errs"
)

// CheckUnshared refuses a file that another user could rewrite, before
// cbth runs it or trusts what it says: an executable (the Codex CLI, the
// binary a service or an upgrade starts) or a rollout the relay scanner
// reads. The file (symbolic links resolved) and the directory holding it
// (in which it could be replaced) must each be owned by this user, or by
// root when rootOK, and writable by neither group nor others; a
// directory with the sticky bit may be, as no one can replace another's
// file there. what names the file in the error (EACCES; ENOENT when it
// does not exist).
func CheckUnshared(what, path string, rootOK bool) error {
	return checkUnsharedAs(what, path, rootOK, os.Getuid())
}

// checkUnsharedAs is CheckUnshared for the user uid (a seam so the rule
// is tested without a second user).
func checkUnsharedAs(what, path string, rootOK bool, me int) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return errs.Wrap(errs.ENOENT, err, "%s %s", what, path)
	}
	for i, p := range []string{real, filepath.Dir(real)} {
		fi, err := os.Stat(p)
		if err != nil {
			return errs.Wrap(errs.ENOENT, err, "%s %s", what, path)
		}
		where := fmt.Sprintf("%s %s", what, path)
		if i == 1 {
			where = fmt.Sprintf("the directory %s holding %s %s", p, what, path)
		} else if real != path {
			where += " (" + real + ")"
		}
		uid := -1
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid = int(st.Uid)
		}
		mode := fi.Mode()
		shared := mode.Perm() & 0o022
		if i == 1 && mode&fs.ModeSticky != 0 {
			shared = 0
		}
		switch {
		case uid != me && !(rootOK && uid == 0):
			owners := fmt.Sprintf("this user (uid %d)", me)
			if rootOK {
				owners += " or root"
			}
			return errs.New(errs.EACCES, "%s is owned by uid %d (mode %04o), not by %s: that user could rewrite it", where, uid, mode.Perm(), owners)
		case shared != 0:
			return errs.New(errs.EACCES, "%s is writable by %s (mode %04o, owner uid %d): another user could rewrite it; `chmod go-w %s` if that is not meant",
				where, writers(shared), mode.Perm(), uid, p)
		}
	}
	return nil
}

func writers(bits fs.FileMode) string {
	switch bits {
	case 0o020:
		return "its group"
	case 0o002:
		return "others"
	}
	return "its group and others"
}

// CheckProgram refuses a program path that cbth writes into a file
// another program runs it from (a service definition, Codex's MCP server
// entry): a relative path (it would be resolved against whatever
// directory that program starts in), a control character or invalid
// UTF-8 (a newline would start a line of its own), a path that is not an
// executable regular file, and one another user could rewrite
// (CheckUnshared, root's own files allowed). what names it in errors.
func CheckProgram(what, path string) error {
	if !filepath.IsAbs(path) {
		return errs.New(errs.EINVAL, "%s %q is not an absolute path", what, path)
	}
	if !utf8.ValidString(path) || strings.ContainsFunc(path, unicode.IsControl) {
		return errs.New(errs.EINVAL, "%s %q holds a control character or is not UTF-8", what, path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return errs.Wrap(errs.ENOENT, err, "%s %s", what, path)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return errs.New(errs.EINVAL, "%s %s is not an executable file (mode %s)", what, path, fi.Mode())
	}
	return CheckUnshared(what, path, true)
}
