package home

import (
	"os"
	"syscall"

	"github.com/cbth-dev/cbth/internal/errs"
)

func checkOwner(path string, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if int(st.Uid) != os.Getuid() {
		return errs.New(errs.EACCES, "%s is owned by uid %d, not by this user (%d)", path, st.Uid, os.Getuid())
	}
	return nil
}
