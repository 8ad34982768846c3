// Package execfile puts binaries in place the way installers do, for
// benchmarks that time process starts.
package execfile

import (
	"io/fs"
	"os"
	"syscall"

	"github.com/cbth-dev/cbth/internal/atomicfile"
)

// Rewrite writes an executable's bytes back through write(2) and renames
// the copy over it, as cbth install, cp and package managers put binaries
// in place. The Go linker writes its output through mmap; on the Linux of
// cbth's CI machines, such a file's page-cache pages fault in at exec
// markedly more slowly than the same bytes written by write(2) (cbth
// measured the echo object at 1.76x the spawn floor linker-written and
// 1.61x rewritten). Benchmarks rewrite every binary they compare.
func Rewrite(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return Put(path, data, fi.Mode().Perm())
}

// Put writes an executable atomically with no process forked meanwhile:
// a child forked while the file is open for writing holds that
// descriptor until its own exec, and an exec of the new file fails with
// ETXTBSY for as long. Holding syscall.ForkLock, which every fork of
// this process takes, closes that window. A test that writes a binary
// and runs it while parallel tests start processes needs this.
func Put(path string, data []byte, perm fs.FileMode) error {
	syscall.ForkLock.Lock()
	defer syscall.ForkLock.Unlock()
	return atomicfile.Write(path, data, perm)
}
