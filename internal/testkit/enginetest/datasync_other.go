//go:build !linux

package enginetest

import "os"

// datasync flushes f's data as bbolt does outside Linux: File.Sync, which
// on macOS is fcntl F_FULLFSYNC.
func datasync(f *os.File) error { return f.Sync() }
