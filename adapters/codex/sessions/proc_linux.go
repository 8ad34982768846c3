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
