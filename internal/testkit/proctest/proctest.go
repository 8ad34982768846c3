// Package proctest looks at other processes for tests, through ps(1),
// which Linux and macOS both have (macOS has no /proc).
package proctest

import (
	"os/exec"
	"strconv"
	"strings"
)

// Count returns how many live processes (zombies excluded) have a command
// line, its words joined by spaces, for which match is true.
func Count(match func(cmdline string) bool) (int, error) {
	// -ww: never cut a command line to the terminal's width.
	out, err := exec.Command("ps", "-A", "-ww", "-o", "stat=,args=").Output()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		stat, args, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && !strings.HasPrefix(stat, "Z") && match(strings.TrimSpace(args)) {
			n++
		}
	}
	return n, nil
}

// RSSKiB returns the resident set size of process pid in KiB.
func RSSKiB(pid int) (int, error) {
	out, err := exec.Command("ps", "-o", "rss=", "-p", strconv.Itoa(pid)).Output()
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(out)))
}

// InGroup returns the live processes (zombies excluded) of process group
// pgid, one "pid command line" string each.
func InGroup(pgid int) ([]string, error) {
	out, err := exec.Command("ps", "-A", "-ww", "-o", "pgid=,stat=,pid=,args=").Output()
	if err != nil {
		return nil, err
	}
	var live []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != strconv.Itoa(pgid) || strings.HasPrefix(f[1], "Z") {
			continue
		}
		live = append(live, strings.Join(f[2:], " "))
	}
	return live, nil
}

// Find returns the pids of the live processes (zombies excluded) whose
// command line, its words joined by spaces, matches.
func Find(match func(cmdline string) bool) ([]int, error) {
	out, err := exec.Command("ps", "-A", "-ww", "-o", "pid=,stat=,args=").Output()
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || strings.HasPrefix(f[1], "Z") {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err == nil && match(strings.Join(f[2:], " ")) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
