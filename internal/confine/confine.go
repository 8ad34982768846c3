// Package confine runs a program confined to what it needs, where the OS
// gives a way to: the agent root read-write, the system's directories
// read-only, nothing else of the file system (Landlock on Linux,
// sandbox-exec on macOS). The program is started through this binary
// under the name ProgramName: that small wrapper moves into the working
// directory it was handed as an open descriptor (so the directory that
// was checked is the one used, whatever is renamed meanwhile), confines
// itself, and executes the program, which inherits the confinement.
//
// Confinement is best effort where the system lacks it (a Linux kernel
// without Landlock): the program runs unconfined, and Status says so for
// the daemon's log and doctor to report.
package confine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ProgramName is the name this binary answers to as the wrapper (the
// multicall name; cmd/cbth and the test binaries that run confined
// programs dispatch on it first).
const ProgramName = "cbth-confine"

// ExitFailed is the wrapper's exit status when it cannot confine or
// start the program (the shell's "cannot execute").
const ExitFailed = 126

// Policy is what a confined program may reach besides the system's
// read-only directories.
type Policy struct {
	// RW are directories it may read, write and run programs under.
	RW []string
	// Exec are files it may read and run (a program outside the system
	// directories, such as the provider helper beside cbth).
	Exec []string
	// Unix are directories under whose unix sockets it may connect (the
	// session bus, for the keychain). With none, it can use no unix
	// socket at all (a seccomp filter on Linux, the profile on macOS).
	// With some, Linux keeps it to them from Landlock ABI 9 on; before
	// that it may reach any unix socket.
	Unix []string
	// Scoped keeps it from signalling, or reaching through abstract unix
	// sockets, any process outside its own confinement (Linux, Landlock
	// ABI 6 on; macOS: signals only to itself and its children).
	Scoped bool
}

// Status is what this system gives.
type Status struct {
	// Available: programs run confined to their files.
	Available bool
	// Mechanism names it ("landlock ABI 7", "sandbox-exec"), or says why
	// there is none.
	Mechanism string
	// Rights says, for each right a confined program may be kept from,
	// whether it is kept from it here and by what, or why not.
	Rights []Right
}

// Right is one thing a confined program may be kept from.
type Right struct {
	// Name is what it is kept from: RightFiles, RightUnixSockets,
	// RightSignals.
	Name string `json:"name"`
	// Confined: this system keeps it from that.
	Confined bool `json:"confined"`
	// How names the means ("landlock ABI 7", "seccomp"), or says why
	// there are none.
	How string `json:"how"`
}

// The rights of Status.Rights.
const (
	// RightFiles: files outside the policy's directories.
	RightFiles = "files"
	// RightUnixSockets: unix sockets of the user's (the cbth daemon's
	// among them), unless the policy names their directories.
	RightUnixSockets = "unix sockets"
	// RightSignals: signals to processes outside its confinement.
	RightSignals = "signals"
)

// NeverConfined is what no system here keeps a confined program from.
const NeverConfined = "the network (any host), CPU, memory and the number of processes"

// Unconfined are the rights this system does not keep programs from.
func (s Status) Unconfined() []Right {
	var out []Right
	for _, r := range s.Rights {
		if !r.Confined {
			out = append(out, r)
		}
	}
	return out
}

// Summary says in one line what is confined here and what is not.
func (s Status) Summary() string {
	var on, off []string
	for _, r := range s.Rights {
		if r.Confined {
			on = append(on, r.Name+" ("+r.How+")")
		} else {
			off = append(off, r.Name+" ("+r.How+")")
		}
	}
	out := "confined: " + strings.Join(on, ", ")
	if len(on) == 0 {
		out = "confined: nothing"
	}
	if len(off) > 0 {
		out += "; NOT confined: " + strings.Join(off, ", ")
	}
	return out + "; never confined: " + NeverConfined
}

// Check returns this system's confinement status.
func Check() Status { return check() }

// Command returns the command that runs argv (argv[0] an absolute path)
// confined by p, in the directory cwd (an open directory, passed to the
// wrapper as descriptor 3; nil keeps the wrapper's own: set Dir), with
// exactly env as its environment. The program leads a process group of
// its own; once it is started, Started records it for the Tracker ctx
// carries.
func Command(ctx context.Context, p Policy, cwd *os.File, argv, env []string) (*exec.Cmd, error) {
	if len(argv) == 0 || !strings.HasPrefix(argv[0], "/") {
		return nil, fmt.Errorf("confine: program %q is not an absolute path", argv)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("confine: find this binary: %w", err)
	}
	args := []string{ProgramName}
	for _, d := range p.RW {
		args = append(args, "--rw", d)
	}
	for _, f := range p.Exec {
		args = append(args, "--exec", f)
	}
	for _, d := range p.Unix {
		args = append(args, "--unix", d)
	}
	if p.Scoped {
		args = append(args, "--scoped")
	}
	cmd := exec.CommandContext(ctx, self)
	if cwd != nil {
		args = append(args, "--cwd-fd")
		cmd.ExtraFiles = []*os.File{cwd}
	}
	cmd.Args = append(append(args, "--"), argv...)
	cmd.Env = env
	// Its own process group: one signal reaches all of it, and a
	// Tracker knows its processes by it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

// Umask is the file mode creation mask a confined program starts with:
// files it creates come out 0600 and directories 0700.
const Umask = 0o077

// cwdFD is the descriptor the working directory arrives on (the first
// of ExtraFiles).
const cwdFD = 3

// Main is the wrapper: it parses what Command wrote, confines itself and
// executes the program. It returns only on failure, with the exit
// status.
func Main(args []string) int {
	var p Policy
	cwd := false
	i := 0
	for ; i < len(args) && args[i] != "--"; i++ {
		switch a := args[i]; {
		case a == "--scoped":
			p.Scoped = true
		case a == "--cwd-fd":
			cwd = true
		case (a == "--rw" || a == "--exec" || a == "--unix") && i+1 < len(args):
			i++
			switch a {
			case "--rw":
				p.RW = append(p.RW, args[i])
			case "--exec":
				p.Exec = append(p.Exec, args[i])
			default:
				p.Unix = append(p.Unix, args[i])
			}
		default:
			return fail("unknown argument %q", a)
		}
	}
	if i+1 >= len(args) {
		return fail("no program to run")
	}
	argv := args[i+1:]
	if cwd {
		if err := unix.Fchdir(cwdFD); err != nil {
			return fail("enter the working directory: %v", err)
		}
		unix.Close(cwdFD)
	}
	// What the program creates is its owner's alone, whatever umask the
	// caller had: an agent's root lives inside the home by default, whose
	// files are 0600 (MISSION.md rule 9; doctor's home.permissions).
	unix.Umask(Umask)
	argv, err := apply(p, argv)
	if err != nil {
		return fail("%v", err)
	}
	err = syscall.Exec(argv[0], argv, os.Environ())
	return fail("run %s: %v", argv[0], err)
}

func fail(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, ProgramName+": "+format+"\n", a...)
	return ExitFailed
}

// BaseEnv is the environment a confined program starts from: these
// variables of env (the caller's), and nothing else. Callers add what
// the program itself needs (a provider's key, for the provider helper).
func BaseEnv(lookup func(string) (string, bool), names ...string) []string {
	var out []string
	for _, n := range append([]string{"PATH", "HOME", "LANG", "TERM"}, names...) {
		if v, ok := lookup(n); ok {
			out = append(out, n+"="+v)
		}
	}
	return out
}
