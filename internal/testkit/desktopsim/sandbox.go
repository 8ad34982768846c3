// Package desktopsim is a test harness, not product code: it plays the
// Codex Desktop side (the bridge heartbeat, later the caller) against the
// real cbth binary, running the heartbeat's helpers inside an emulated
// heartbeat sandbox.
//
// The sandbox copies what a real Desktop heartbeat turn was found to
// allow (research notes, upstream-facts.md section A): it may run a binary
// and read the home's files, but every write, chmod, lock, socket and log
// open fails. Here that is a private mount namespace in which the home is
// bind-mounted read-only and its run/ directory (socket and lock) is
// hidden under an empty read-only tmpfs; and, so that an attempt the
// command swallows still fails the test, the command runs under strace and
// every write-open, lock, socket, chmod, directory change, fork or exec it
// tries is reported as a violation.
package desktopsim

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// Result is one command's run in the sandbox.
type Result struct {
	Stdout, Stderr string
	Code           int
	// Violations lists each traced system call the heartbeat sandbox
	// would refuse, as strace printed it, unless Allow admitted it.
	Violations []string
	// Calls counts the traced calls (to show the trace saw the command).
	Calls int
}

// Allow admits a traced call that would otherwise be a violation: name is
// the system call, line strace's whole line.
type Allow func(name, line string) bool

// Traced is the system calls the trace records: every way to change a
// file, take a lock, reach a socket or start a process.
var Traced = []string{
	"open", "openat", "openat2", "creat", "socket", "connect", "bind", "listen", "flock", "fcntl",
	"chmod", "fchmod", "fchmodat", "chown", "fchown", "fchownat", "lchown", "mkdir", "mkdirat", "rmdir",
	"unlink", "unlinkat", "rename", "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat",
	"truncate", "ftruncate", "mknod", "mknodat", "utimensat", "execve", "execveat", "clone", "clone3", "fork", "vfork",
}

// opens are the traced calls that open a file.
var opens = []string{"open", "openat", "openat2", "creat"}

var (
	straceLine = regexp.MustCompile(`^(?:\[pid\s+)?\d+\]?\s+([a-z0-9_]+)\((.*)$`)
	// A call another thread interrupts is printed in two lines, its result
	// on the second; joined is what the check reads.
	unfinished = regexp.MustCompile(`^((?:\[pid\s+)?(\d+)\]?\s+.*) <unfinished \.\.\.>$`)
	resumed    = regexp.MustCompile(`^(?:\[pid\s+)?(\d+)\]?\s+<\.\.\. [a-z0-9_]+ resumed>(.*)$`)
	writeFlags = regexp.MustCompile(`O_WRONLY|O_RDWR|O_CREAT|O_TRUNC|O_APPEND`)
	lockCmds   = regexp.MustCompile(`F_SETLK|F_SETLKW|F_OFD_SETLK|F_OFD_SETLKW`)
)

// check lists the violations in a trace file for a command run against
// home: any write-open, any open of the log or of run/ (socket, lock),
// any lock, socket, permission, ownership or directory change, any fork,
// and any exec but the command's own.
func check(trace, home string, allow Allow) (violations []string, calls int, err error) {
	f, err := os.Open(trace)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	execs := 0
	judge := func(line string) {
		m := straceLine.FindStringSubmatch(line)
		if m == nil {
			return // exits, signals
		}
		calls++
		name, args := m[1], m[2]
		bad := false
		switch {
		case slices.Contains(opens, name):
			bad = name == "creat" || writeFlags.MatchString(args) ||
				strings.Contains(args, home+"/cbth.db") || strings.Contains(args, home+"/run")
		case name == "fcntl":
			bad = lockCmds.MatchString(args)
		case name == "execve" || name == "execveat":
			execs++
			bad = execs > 1
		case name == "clone" || name == "clone3":
			bad = !strings.Contains(args, "CLONE_THREAD")
		default:
			bad = true // every other traced call changes something or reaches out
		}
		if bad && (allow == nil || !allow(name, line)) {
			violations = append(violations, line)
		}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	pending := map[string]string{} // pid -> the first half of an interrupted call
	for sc.Scan() {
		line := sc.Text()
		if u := unfinished.FindStringSubmatch(line); u != nil {
			pending[u[2]] = u[1]
			continue
		}
		if r := resumed.FindStringSubmatch(line); r != nil {
			first, ok := pending[r[1]]
			if !ok {
				continue
			}
			delete(pending, r[1])
			line = first + r[2]
		}
		judge(line)
	}
	for _, line := range pending { // never resumed: the process ended inside the call
		judge(line)
	}
	return violations, calls, sc.Err()
}

// String renders a result for a failure message.
func (r Result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s\nviolations:\n  %s", r.Code, r.Stdout, r.Stderr, strings.Join(r.Violations, "\n  "))
}
