package cli

import (
	"debug/elf"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/provider"
	"github.com/cbth-dev/cbth/adapters/cortexfs/runner"
	"github.com/cbth-dev/cbth/internal/atomicfile"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
)

func socketRequest(obj runner.Object, id name.ModelID) driver.Request {
	return driver.Request{Model: id.String(), Provider: id.Provider, NativeID: obj.NativeID, Defaults: obj.Defaults, Caps: obj.Caps}
}

// ProgramName is the name cbth answers to as the CortexFS command line
// (install links it beside cbth).
const ProgramName = "ctx"

// InstallCmd is `install`: the binary under PREFIX/bin with its other names,
// and the cbth-providers helper beside it.
type InstallCmd struct {
	Prefix string `default:"/usr/local" help:"Install prefix; the binary goes to PREFIX/bin/cbth." type:"path"`
}

// InstallResult is the JSON answer of install.
type InstallResult struct {
	Binary string   `json:"binary"`
	Links  []string `json:"links"`
	Runner string   `json:"runner"`
	// Providers is the installed cbth-providers helper, "" when none was
	// found next to the running binary (then Warnings says so).
	Providers string `json:"providers"`
	// SDKHelpers are the installed helpers of one SDK each (found next to
	// the running binary; a missing one only costs its calls the slower
	// start of cbth-providers).
	SDKHelpers []string `json:"sdk_helpers"`
	// Dynamic is set when the installed binary needs the dynamic loader
	// (built with cgo); Warnings then says what it costs.
	Dynamic  bool     `json:"dynamic"`
	Warnings []string `json:"warnings"`
}

// Run implements the command. The other names are relative symlinks to
// cbth, so the kernel's argv[0] for a shebang carries the runner name.
func (c *InstallCmd) Run(env *Env) error {
	if env.Executable == "" {
		return errs.New(errs.EINTERNAL, "cannot tell which binary is running")
	}
	bin := filepath.Join(c.Prefix, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return errs.Wrap(errs.EACCES, err, "create %s", bin)
	}
	dst := filepath.Join(bin, "cbth")
	if err := copyExecutable(env.Executable, dst); err != nil {
		return err
	}
	res := InstallResult{Binary: dst, Links: []string{}, Runner: filepath.Join(bin, runner.ProgramName), Warnings: []string{}}
	if interp := interpreter(dst); interp != "" {
		// go build links with cgo wherever a C compiler is installed. The
		// dynamic loader then runs at every start: every job command and
		// every object run (measured: the echo object 3.7 against 2.3 ms).
		res.Dynamic = true
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s is dynamically linked (interpreter %s), so every start pays the dynamic loader, about 1.4 ms here; build it with CGO_ENABLED=0 for a static binary", dst, interp))
	}
	for _, n := range []string{ProgramName, runner.ProgramName} {
		link := filepath.Join(bin, n)
		tmp := link + ".tmp-link"
		_ = os.Remove(tmp)
		if err := os.Symlink("cbth", tmp); err != nil {
			return errs.Wrap(errs.EACCES, err, "link %s", n)
		}
		if err := os.Rename(tmp, link); err != nil {
			_ = os.Remove(tmp)
			return errs.Wrap(errs.EACCES, err, "install %s", n)
		}
		res.Links = append(res.Links, link)
	}
	// The network model drivers live in cbth-providers, which must sit
	// next to cbth. It is copied from next to the running binary.
	exe := env.Executable
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	helper := filepath.Join(filepath.Dir(exe), provider.HelperName)
	if st, err := os.Stat(helper); err == nil && st.Mode().IsRegular() {
		hdst := filepath.Join(bin, provider.HelperName)
		if err := copyExecutable(helper, hdst); err != nil {
			return err
		}
		res.Providers = hdst
	} else {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s not found next to %s: not installed; network models (every driver but debug) will fail with ENOTCONF until it is at %s. "+
			"To install it, build it next to %s (CGO_ENABLED=0 go build -o %s ./cmd/%s in cbth's source, or just build) and run install again",
			provider.HelperName, exe, filepath.Join(bin, provider.HelperName), filepath.Base(exe), helper, provider.HelperName))
	}
	res.SDKHelpers = []string{}
	for _, n := range slices.Sorted(maps.Keys(provider.SDKHelpers)) {
		src := filepath.Join(filepath.Dir(exe), n)
		if st, err := os.Stat(src); err != nil || !st.Mode().IsRegular() {
			continue
		}
		hdst := filepath.Join(bin, n)
		if err := copyExecutable(src, hdst); err != nil {
			return err
		}
		res.SDKHelpers = append(res.SDKHelpers, hdst)
	}
	if path, _ := env.lookupEnv("PATH"); !onPath(bin, path) {
		// The commands after install (cbth, ctx) are run by name.
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s is not on your PATH, so cbth and ctx are not found by name; "+
			"add it in your shell's profile (export PATH=\"%s:$PATH\") and open a new shell, or run %s by its full path", bin, bin, dst))
	}
	for _, m := range res.Warnings {
		fmt.Fprintf(env.Stderr, "warning: %s\n", m)
	}
	return env.emit(env.JSON, res, func(w io.Writer) {
		fmt.Fprintf(w, "installed %s (links: %v)\n", dst, res.Links)
		if res.Providers != "" {
			fmt.Fprintf(w, "installed %s\n", res.Providers)
		}
		for _, h := range res.SDKHelpers {
			fmt.Fprintf(w, "installed %s\n", h)
		}
	})
}

// onPath reports whether dir is one of path's directories: the same
// directory, however either is spelled (a symlinked prefix, a trailing
// slash).
func onPath(dir, path string) bool {
	want, err := os.Stat(dir)
	if err != nil {
		return false
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			continue // the current directory, not dir wherever the shell goes
		}
		if st, err := os.Stat(d); err == nil && os.SameFile(want, st) {
			return true
		}
	}
	return false
}

// interpreter returns the program interpreter an ELF executable names (its
// PT_INTERP segment, e.g. /lib64/ld-linux-x86-64.so.2), or "" for a static
// binary and for a file that is not ELF. A Go binary is dynamically linked
// when it was built with cgo, which `go build` does by default wherever a C
// compiler is installed. (A macOS binary is Mach-O and always loads dyld;
// there is nothing to warn about.)
func interpreter(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
			if err != nil {
				return ""
			}
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "open %s", src)
	}
	defer in.Close()
	if err := atomicfile.WriteFrom(dst, in, 0o755); err != nil {
		return errs.Wrap(errs.EACCES, err, "install %s", dst)
	}
	return nil
}
