package home

import (
	"os"
	"syscall"

	"github.com/cbth-dev/cbth/internal/errs"
)

func checkOwner(path string, fi os.FileInfo, uid int) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if int(st.Uid) != uid {
		return errs.New(errs.EACCES, "%s is owned by uid %d, not by this user (%d)", path, st.Uid, uid)
	}
	return nil
}
