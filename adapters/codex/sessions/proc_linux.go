package sessions

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
)

// exited reports whether pid no longer runs: gone, or a zombie waiting to
// be reaped by its parent (for an orphan, init, whenever it gets to it).
func exited(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state ...: comm may hold spaces and parentheses, so the
	// state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// processStart names when pid started, as the kernel counts it (the
// starttime field of /proc/PID/stat, in clock ticks since boot): with the
// pid, it tells one process from another that reuses the pid later.
func processStart(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	// The fields after comm, which may hold spaces: state is the first
	// (field 3 of the whole line), starttime field 22.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", errors.New("unreadable /proc stat")
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 {
		return "", errors.New("short /proc stat")
	}
	return string(f[19]), nil
}

// serverExecutable is the executable pid runs ("" when it cannot be
// read): the Codex daemon's own binary, whose schema the probe needs.
func serverExecutable(pid int) string {
	p, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return ""
	}
	return p
}
