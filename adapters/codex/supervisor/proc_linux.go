package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// parentAndGroup reads pid's parent and process group from /proc/PID/stat.
func parentAndGroup(pid int) (ppid, pgid int, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and
	// parentheses, so the fields are counted from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	if ppid, err = strconv.Atoi(string(f[1])); err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: ppid: %w", pid, err)
	}
	if pgid, err = strconv.Atoi(string(f[2])); err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: pgrp: %w", pid, err)
	}
	return ppid, pgid, nil
}
