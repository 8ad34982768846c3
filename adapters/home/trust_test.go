package home

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/internal/errs"
)

// A file cbth runs or trusts is refused when another user could rewrite
// it: the file or its directory owned by someone else (root allowed where
// rootOK), or writable by group or others (a sticky directory excepted);
// links are followed to the real file; a missing file is ENOENT. The
// cases of another owner are checked here by acting for another uid, so
// they need no second user (cmd/cbth's TestSharedExecutablesAndRollouts
// AreRefused reaches them as root only).
func TestCheckUnshared(t *testing.T) {
	me := os.Getuid()
	dir := t.TempDir()
	file := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte("#!/bin/sh\n"), 0o600)
		os.Chmod(p, mode)
		return p
	}
	shared := filepath.Join(dir, "shared")
	os.Mkdir(shared, 0o700)
	os.Chmod(shared, 0o777)
	inShared := filepath.Join(shared, "codex")
	os.WriteFile(inShared, nil, 0o700)
	sticky := filepath.Join(dir, "sticky")
	os.Mkdir(sticky, 0o700)
	os.Chmod(sticky, os.ModeSticky|0o777)
	inSticky := filepath.Join(sticky, "codex")
	os.WriteFile(inSticky, nil, 0o700)
	private := file("codex", 0o755)
	link := filepath.Join(dir, "link")
	os.Symlink(file("group-target", 0o775), link)
	for _, c := range []struct {
		name   string
		path   string
		rootOK bool
		uid    int
		code   errs.Code
		says   string
	}{
		{"private", private, false, me, "", ""},
		{"group-writable", file("group", 0o775), false, me, errs.EACCES, "writable by its group (mode 0775"},
		{"world-writable", file("world", 0o757), false, me, errs.EACCES, "writable by others (mode 0757"},
		{"both", file("both", 0o777), false, me, errs.EACCES, "its group and others"},
		{"in a directory others can write", inShared, false, me, errs.EACCES, "the directory " + shared},
		{"in a sticky directory", inSticky, false, me, "", ""},
		{"a link to a group-writable file", link, false, me, errs.EACCES, "(" + filepath.Join(dir, "group-target") + ")"},
		{"owned by another user", private, false, me + 1, errs.EACCES, "not by this user (uid"},
		{"missing", filepath.Join(dir, "nope"), false, me, errs.ENOENT, "nope"},
	} {
		err := checkUnsharedAs("codex_binary", c.path, c.rootOK, c.uid)
		if errs.CodeOf(err) != c.code || (err != nil && !strings.Contains(err.Error(), c.says)) {
			t.Errorf("%s: %v, want %q saying %q", c.name, err, c.code, c.says)
		}
	}
	// Root may own it where rootOK says so (a system-wide install).
	if me == 0 {
		if err := checkUnsharedAs("codex_binary", private, true, 1000); err != nil {
			t.Errorf("root's file with rootOK: %v", err)
		}
		if err := checkUnsharedAs("codex_binary", private, false, 1000); errs.CodeOf(err) != errs.EACCES {
			t.Errorf("root's file without rootOK: %v", err)
		}
	}
}
