package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// Start is the start time of process pid as the kernel counts it
// (field 22 of /proc/PID/stat, clock ticks since boot): with the pid it
// names one process for the life of the machine, whatever pid reuse
// does. ok is false when no process has that pid.
func Start(pid int) (start string, ok bool, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	// The command name (field 2) is in parentheses and may hold spaces
	// and parentheses itself: the fields after it start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", false, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state), so field 22 is f[19].
	if len(f) < 20 {
		return "", false, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return "linux-stat:" + string(f[19]), true, nil
}

// Info is what Parent reads of a process.
type Info struct {
	PPID, UID int
}

// Parent returns process pid's parent and real uid; ok is false when no
// process has that pid.
func Parent(pid int) (Info, bool, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return Info{}, false, nil
	}
	if err != nil {
		return Info{}, false, err
	}
	var in Info
	got := 0
	for _, line := range bytes.Split(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		f := bytes.Fields(v)
		if len(f) == 0 {
			continue
		}
		switch string(k) {
		case "PPid":
			in.PPID, err = strconv.Atoi(string(f[0]))
			got++
		case "Uid":
			in.UID, err = strconv.Atoi(string(f[0]))
			got++
		}
		if err != nil {
			return Info{}, false, fmt.Errorf("/proc/%d/status: %w", pid, err)
		}
	}
	if got != 2 {
		return Info{}, false, fmt.Errorf("/proc/%d/status: no PPid or Uid", pid)
	}
	return in, true, nil
}
