// Package tree materializes the CortexFS object tree on disk from a plain
// set of object records. Materialize is a pure function of (root, set): the
// same set always gives the same files, so it can run as a projection.
package tree

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/internal/atomicfile"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
)

// Modes: private to the owner. Object files must also be executable so the
// kernel runs them through their shebang.
const (
	DirMode    fs.FileMode = 0o700
	FileMode   fs.FileMode = 0o600
	ObjectMode fs.FileMode = 0o700
)

// Alias is a symlink. Path and Target are relative to the root; Target
// names an object of the set (e.g. model/openai/gpt-4o).
type Alias struct {
	Path   string `json:"path"`
	Target string `json:"target"`
}

// Set is everything the tree holds.
type Set struct {
	// Runner is the absolute path written into every object's shebang.
	Runner  string          `json:"runner"`
	Objects []object.Object `json:"objects"`
	Aliases []Alias         `json:"aliases"`
}

// Global alias names under model/.
const (
	AliasMain   = "model/main"
	AliasHelper = "model/helper"
)

// userAlias splits home/<uid>/<kind>/<name> (uid all digits, kind model,
// agent or tool, name one non-empty component) into kind and name.
func userAlias(p string) (kind, nm string, ok bool) {
	parts := strings.Split(p, "/")
	if len(parts) != 4 || parts[0] != "home" || parts[1] == "" || parts[3] == "" {
		return "", "", false
	}
	for _, c := range parts[1] {
		if c < '0' || c > '9' {
			return "", "", false
		}
	}
	switch parts[2] {
	case "model", "agent", "tool":
		return parts[2], parts[3], true
	}
	return "", "", false
}

// ValidateAlias checks where an alias may live.
func ValidateAlias(a Alias) error {
	if a.Path == AliasMain || a.Path == AliasHelper {
		return nil
	}
	kind, nm, ok := userAlias(a.Path)
	if !ok {
		return errs.New(errs.EINVAL, "alias path %q is not model/main, model/helper or home/<uid>/<kind>/<name>", a.Path)
	}
	if err := name.Valid(nm); err != nil {
		return err
	}
	if !strings.HasPrefix(a.Target, kind+"/") {
		return errs.New(errs.EINVAL, "alias %s must point at a %s object", a.Path, kind)
	}
	return nil
}

// Validate checks the whole set: valid objects, unique paths, aliases that
// point at objects of the set.
func (s Set) Validate() error {
	if !filepath.IsAbs(s.Runner) {
		return errs.New(errs.EINVAL, "runner path %q is not absolute", s.Runner)
	}
	seen := map[string]bool{}
	for _, o := range s.Objects {
		if err := o.Validate(); err != nil {
			return err
		}
		if seen[o.Rel()] {
			return errs.New(errs.EEXIST, "object %s given twice", o.Rel())
		}
		seen[o.Rel()] = true
	}
	// A model directory cannot also be a model: model/openai cannot be an
	// object when model/openai/gpt-4o is one. Model paths always have two
	// components, so only the aliases could collide.
	apaths := map[string]bool{}
	for _, a := range s.Aliases {
		if err := ValidateAlias(a); err != nil {
			return err
		}
		if !seen[a.Target] {
			return errs.New(errs.ENOENT, "alias %s points at %s, which is not an object", a.Path, a.Target)
		}
		if apaths[a.Path] || seen[a.Path] {
			return errs.New(errs.EEXIST, "alias %s collides", a.Path)
		}
		apaths[a.Path] = true
	}
	return nil
}

// Materialize writes the set under root and removes objects and aliases
// of an earlier set that are gone. Session data and sockets are untouched,
// and so are the .d/status and .d/log an object already has: its calls
// keep them (RecordCall).
func Materialize(root string, s Set) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := mkdir(root); err != nil {
		return err
	}
	want := map[string]bool{}
	for _, o := range s.Objects {
		if err := writeObject(root, s.Runner, o); err != nil {
			return err
		}
		want[o.Rel()] = true
	}
	wantAlias := map[string]bool{}
	for _, a := range s.Aliases {
		if err := writeSymlink(root, a); err != nil {
			return err
		}
		wantAlias[a.Path] = true
	}
	return prune(root, want, wantAlias)
}

func writeObject(root, runner string, o object.Object) error {
	meta, err := object.RenderMeta(runner, o.Meta)
	if err != nil {
		return err
	}
	file := filepath.Join(root, filepath.FromSlash(o.Rel()))
	if err := mkdirAll(root, filepath.Dir(file)); err != nil {
		return err
	}
	if err := WriteFile(file, meta, ObjectMode); err != nil {
		return err
	}
	ctlDir := file + ".d"
	if err := mkdir(ctlDir); err != nil {
		return err
	}
	for fname, body := range object.Controls(o) {
		p := filepath.Join(ctlDir, fname)
		if fname == object.FileStatus || fname == object.FileLog {
			// The calls' once there (RecordCall): only a missing one is
			// written, with the registered value.
			if _, err := os.Lstat(p); err == nil {
				continue
			}
		}
		if err := WriteFile(p, []byte(body), FileMode); err != nil {
			return err
		}
	}
	return nil
}

func writeSymlink(root string, a Alias) error {
	link := filepath.Join(root, filepath.FromSlash(a.Path))
	target := filepath.Join(root, filepath.FromSlash(a.Target))
	if err := mkdirAll(root, filepath.Dir(link)); err != nil {
		return err
	}
	if cur, err := os.Readlink(link); err == nil && cur == target {
		return nil
	}
	tmp := link + ".tmp-link"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "symlink %s", a.Path)
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return errs.Wrap(errs.EINTERNAL, err, "install symlink %s", a.Path)
	}
	return syncDir(filepath.Dir(link))
}

// WriteFile replaces path atomically: temp file in the same directory,
// fsync, rename, fsync of the directory. An unchanged file is left alone.
func WriteFile(path string, data []byte, mode fs.FileMode) error {
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
		if st, err := os.Lstat(path); err == nil && st.Mode().Perm() == mode && st.Mode().IsRegular() {
			return nil
		}
	}
	if err := atomicfile.Write(path, data, mode); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "write %s", filepath.Base(path))
	}
	return nil
}

func syncDir(dir string) error {
	if err := atomicfile.SyncDir(dir); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "sync dir")
	}
	return nil
}

func mkdir(dir string) error {
	if err := os.Mkdir(dir, DirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return errs.Wrap(errs.EINTERNAL, err, "mkdir %s", filepath.Base(dir))
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "stat %s", filepath.Base(dir))
	}
	if !st.IsDir() {
		return errs.New(errs.EEXIST, "%s exists and is not a directory", dir)
	}
	if st.Mode().Perm() != DirMode {
		if err := os.Chmod(dir, DirMode); err != nil {
			return errs.Wrap(errs.EINTERNAL, err, "chmod %s", filepath.Base(dir))
		}
	}
	return nil
}

// mkdirAll creates dir and its parents below root, each 0700.
func mkdirAll(root, dir string) error {
	rel, err := filepath.Rel(root, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return errs.New(errs.EINTERNAL, "%s is outside the root", dir)
	}
	cur := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		if part == "." {
			continue
		}
		cur = filepath.Join(cur, part)
		if err := mkdir(cur); err != nil {
			return err
		}
	}
	return nil
}

// prune removes object files (recognized by their runner shebang), their
// control directories and alias symlinks that are not in the set.
func prune(root string, want, wantAlias map[string]bool) error {
	objs, aliases, err := scan(root)
	if err != nil {
		return err
	}
	for _, rel := range objs {
		if want[rel] {
			continue
		}
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.Remove(p); err != nil {
			return errs.Wrap(errs.EINTERNAL, err, "remove %s", rel)
		}
		if err := os.RemoveAll(p + ".d"); err != nil {
			return errs.Wrap(errs.EINTERNAL, err, "remove %s.d", rel)
		}
	}
	for _, rel := range aliases {
		if !wantAlias[rel] {
			if err := os.Remove(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
				return errs.Wrap(errs.EINTERNAL, err, "remove alias %s", rel)
			}
		}
	}
	return nil
}

// scan lists object files (kind/path) and alias symlinks (path) under root.
func scan(root string) (objs, aliases []string, err error) {
	for _, kind := range []string{object.KindModel, object.KindAgent, object.KindTool} {
		base := filepath.Join(root, kind)
		werr := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			rel, _ := filepath.Rel(root, p)
			rel = filepath.ToSlash(rel)
			switch {
			case d.IsDir() && strings.HasSuffix(p, ".d"):
				return filepath.SkipDir
			case d.Type()&fs.ModeSymlink != 0:
				if rel == AliasMain || rel == AliasHelper {
					aliases = append(aliases, rel)
				}
			case d.Type().IsRegular() && isObjectFile(p):
				objs = append(objs, rel)
			}
			return nil
		})
		if werr != nil {
			return nil, nil, errs.Wrap(errs.EINTERNAL, werr, "scan %s", kind)
		}
	}
	homes, _ := filepath.Glob(filepath.Join(root, "home", "*", "*", "*"))
	for _, p := range homes {
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if st, err := os.Lstat(p); err == nil && st.Mode()&fs.ModeSymlink != 0 && isUserAlias(rel) {
			aliases = append(aliases, rel)
		}
	}
	sort.Strings(objs)
	sort.Strings(aliases)
	return objs, aliases, nil
}

func isUserAlias(p string) bool {
	_, _, ok := userAlias(p)
	return ok
}

func isObjectFile(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	var head [2]byte
	n, _ := f.Read(head[:])
	return n == 2 && string(head[:]) == "#!"
}

// Load reads the tree back into a set. Runner comes from the first object's
// shebang. It is the inverse of Materialize for trees it wrote.
func Load(root string) (Set, error) {
	var s Set
	objs, aliases, err := scan(root)
	if err != nil {
		return Set{}, err
	}
	for _, rel := range objs {
		kind, p, _ := strings.Cut(rel, "/")
		file := filepath.Join(root, filepath.FromSlash(rel))
		meta, err := os.ReadFile(file)
		if err != nil {
			return Set{}, errs.Wrap(errs.EINTERNAL, err, "read %s", rel)
		}
		ctl := map[string]string{}
		files := []string{object.FileID, object.FileDriver, object.FileCap, object.FileDefault, object.FileSession, object.FileStatus, object.FileLog}
		if kind == object.KindAgent {
			files = append(files, object.AgentFiles...)
		}
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(file+".d", f))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return Set{}, errs.Wrap(errs.EINTERNAL, err, "read %s.d/%s", rel, f)
			}
			ctl[f] = string(b)
		}
		o, err := object.FromFiles(kind, p, meta, ctl)
		if err != nil {
			return Set{}, err
		}
		if s.Runner == "" {
			s.Runner, _, _ = object.ParseMeta(meta)
		}
		s.Objects = append(s.Objects, o)
	}
	for _, rel := range aliases {
		target, err := os.Readlink(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return Set{}, errs.Wrap(errs.EINTERNAL, err, "readlink %s", rel)
		}
		t, err := filepath.Rel(root, target)
		if err != nil || strings.HasPrefix(t, "..") {
			continue // points outside the tree: not ours
		}
		s.Aliases = append(s.Aliases, Alias{Path: rel, Target: filepath.ToSlash(t)})
	}
	return s, nil
}

// Init creates a tree holding the built-in debug/echo model with main and
// helper pointing at it, keeping whatever else the tree already holds.
func Init(root, runner string) (Set, error) {
	s, err := Load(root)
	if err != nil {
		return Set{}, err
	}
	s = Seed(s, runner)
	return s, Materialize(root, s)
}

// Seed returns s with the given runner, the built-in debug/echo model and
// the main and helper aliases pointing at it where they are missing.
func Seed(s Set, runner string) Set {
	s.Runner = runner
	echo := object.DebugEcho()
	if !s.Has(echo.Rel()) {
		s.Objects = append(s.Objects, echo)
	}
	for _, a := range []string{AliasMain, AliasHelper} {
		if _, ok := s.Alias(a); !ok {
			s.Aliases = append(s.Aliases, Alias{Path: a, Target: echo.Rel()})
		}
	}
	return s
}

// Has reports whether the set holds an object at rel (kind/path).
func (s Set) Has(rel string) bool {
	_, ok := s.Object(rel)
	return ok
}

// Object returns the object at rel.
func (s Set) Object(rel string) (object.Object, bool) {
	for _, o := range s.Objects {
		if o.Rel() == rel {
			return o, true
		}
	}
	return object.Object{}, false
}

// Alias returns the alias at path.
func (s Set) Alias(path string) (Alias, bool) {
	for _, a := range s.Aliases {
		if a.Path == path {
			return a, true
		}
	}
	return Alias{}, false
}
