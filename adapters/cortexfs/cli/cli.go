// Package cli holds the command structs for the CortexFS verbs: ctx init,
// model add/list/alias/rm/serve and install. Their struct tags are read by
// kong; the root CLI embeds them and runs them with an *Env;
// every Run returns an error with a stable code.
package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/runner"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Env is what the commands need from the process.
type Env struct {
	// CtxRoot is the object tree root ($CTX_ROOT, default $CBTH_HOME/ctx).
	CtxRoot string
	// CBTHHome is $CBTH_HOME (default ~/.cbth).
	CBTHHome string
	Stdout   io.Writer
	Stderr   io.Writer
	// JSON is the root --json flag; each command also has its own.
	JSON bool
	// Runner is the absolute path written into object shebangs: the
	// cortexfs-object-runner beside the binary, else on PATH, else "".
	Runner string
	// Executable is the running binary, copied by install.
	Executable string
	// UID owns per-user aliases and may connect to served sockets.
	UID int
	Now func() time.Time
	// Store holds the trees' registrations. Nil writes the tree directly;
	// cbth plugs in its daemon, which records every change as an event and
	// keeps the files as a projection of them.
	Store Store
	// LookupEnv reads the environment the command runs in (install
	// reads PATH); nil reads an empty one.
	LookupEnv func(string) (string, bool)
}

func (e *Env) lookupEnv(k string) (string, bool) {
	if e.LookupEnv == nil {
		return "", false
	}
	return e.LookupEnv(k)
}

// Store is where a tree's objects and aliases are registered.
type Store interface {
	// Load returns the registered set and whether the tree exists.
	Load(root string) (tree.Set, bool, error)
	// Save registers set as the tree's content and materializes it.
	Save(root string, set tree.Set) error
}

func (e *Env) store() Store {
	if e.Store != nil {
		return e.Store
	}
	return fileStore{}
}

// fileStore keeps no registrations apart from the files themselves.
type fileStore struct{}

func (fileStore) Load(root string) (tree.Set, bool, error) {
	_, err := os.Stat(filepath.Join(root, "model"))
	set, lerr := tree.Load(root)
	return set, err == nil, lerr
}

func (fileStore) Save(root string, set tree.Set) error { return tree.Materialize(root, set) }

// DefaultEnv derives the environment of a real process. lookup is usually
// os.LookupEnv and home the user's home directory.
func DefaultEnv(lookup func(string) (string, bool), home string) Env {
	e := Env{Stdout: os.Stdout, Stderr: os.Stderr, UID: os.Getuid(), Now: time.Now, LookupEnv: lookup}
	if v, ok := lookup("CBTH_HOME"); ok && v != "" {
		e.CBTHHome = v
	} else {
		e.CBTHHome = filepath.Join(home, ".cbth")
	}
	if v, ok := lookup("CTX_ROOT"); ok && v != "" {
		e.CtxRoot = v
	} else {
		e.CtxRoot = filepath.Join(e.CBTHHome, "ctx")
	}
	e.Executable, _ = os.Executable()
	e.Runner = findRunner(e.Executable)
	return e
}

// findRunner looks for the object runner beside the running binary (an
// installed layout keeps the name there, see install), then on PATH. It
// returns "" when there is none: objects naming it could not run.
func findRunner(exe string) string {
	if exe != "" {
		if p := filepath.Join(filepath.Dir(exe), runner.ProgramName); executable(p) {
			return p
		}
	}
	if p, err := exec.LookPath(runner.ProgramName); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	return ""
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// checkRunner refuses a runner the kernel could not start, so that no
// object is written whose #! line names a missing program: every run of it
// would fail with "required file not found".
func checkRunner(path string) error {
	const fix = "install it with `cbth install --prefix /usr` (cbth and its " + runner.ProgramName +
		" link in /usr/bin), or name one with `ctx init --runner PATH`"
	switch {
	case path == "":
		return errs.New(errs.ENOENT, "no %s beside this binary or on PATH, so objects could not run; %s", runner.ProgramName, fix)
	case !filepath.IsAbs(path):
		return errs.New(errs.EINVAL, "the object runner %s is not an absolute path; %s", path, fix)
	case !executable(path):
		return errs.New(errs.ENOENT, "the object runner %s does not exist or is not executable, so objects naming it could not run; %s", path, fix)
	}
	return nil
}

func (e *Env) emit(jsonFlag bool, v any, human func(io.Writer)) error {
	if jsonFlag || e.JSON {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.Stdout, "%s\n", b)
		return err
	}
	human(e.Stdout)
	return nil
}
