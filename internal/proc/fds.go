package proc

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseInherited closes every descriptor above stderr that a program
// this process starts would inherit: those without FD_CLOEXEC, which Go
// never opens, so they came from whoever started this process (a shell,
// a test harness, Codex). A long-lived process (the daemon) must hold
// none of them (its starter may wait for a pipe's end) and pass none on
// (its tasks get stdin, stdout, stderr and their own lock only).
func CloseInherited() error {
	ents, err := os.ReadDir("/dev/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
	return nil
}
