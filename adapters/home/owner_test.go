package home

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/internal/errs"
)

// The rule cmd/cbth's TestHostileHomeLinksAreRefused and "home of another
// uid is EACCES" check with a second user (as root), held here without
// one: the directory and the links are this user's, and cbth is asked to
// act for another uid. A link or a directory not owned by the user cbth
// acts for is refused with EACCES before anything behind it changes; the
// user's own link is followed and what it points at narrowed to 0700; in
// strict places (run/) no link is followed at all.
func TestEnsureDirRefusesWhatAnotherUserOwns(t *testing.T) {
	me, other := os.Getuid(), os.Getuid()+1
	for _, c := range []struct {
		name   string
		link   bool // dir is a symbolic link to a directory of mode 0755
		strict bool
		uid    int
		want   string // error text; "" for no error
	}{
		{name: "own directory", uid: me},
		{name: "own link followed", link: true, uid: me},
		{name: "directory of another uid", uid: other, want: "is owned by uid"},
		{name: "link of another uid", link: true, uid: other, want: "is a symbolic link owned by uid"},
		{name: "own link in a strict place", link: true, strict: true, uid: me, want: "does not follow one there"},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			real := filepath.Join(base, "real")
			if err := os.Mkdir(real, 0o755); err != nil {
				t.Fatal(err)
			}
			os.Chmod(real, 0o755)
			dir := real
			if c.link {
				dir = filepath.Join(base, "link")
				if err := os.Symlink(real, dir); err != nil {
					t.Fatal(err)
				}
			}
			err := ensureDirAs(dir, c.strict, c.uid)
			fi, serr := os.Stat(real)
			if serr != nil {
				t.Fatal(serr)
			}
			if c.want == "" {
				if err != nil {
					t.Fatalf("ensureDirAs: %v", err)
				}
				if fi.Mode().Perm() != DirMode {
					t.Fatalf("mode %v, want it narrowed to %v", fi.Mode().Perm(), DirMode)
				}
				return
			}
			if errs.CodeOf(err) != errs.EACCES || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("ensureDirAs: %v, want EACCES naming %s and saying %q", err, dir, c.want)
			}
			if fi.Mode().Perm() != 0o755 {
				t.Fatalf("refused, yet the mode behind it changed to %v", fi.Mode().Perm())
			}
		})
	}
}

// A missing directory is created for its owner, parents included, 0700;
// nothing is created behind a refused link.
func TestEnsureDirCreatesAndRefusesBeforeCreating(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b")
	if err := ensureDirAs(dir, false, os.Getuid()); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != DirMode {
		t.Fatalf("created %v, %v", fi, err)
	}
	empty := filepath.Join(base, "empty")
	os.Mkdir(empty, 0o755)
	link := filepath.Join(base, "planted")
	os.Symlink(empty, link)
	if err := ensureDirAs(link, false, os.Getuid()+1); errs.CodeOf(err) != errs.EACCES {
		t.Fatalf("a link of another uid: %v", err)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Fatalf("written behind a refused link: %v", ents)
	}
}
