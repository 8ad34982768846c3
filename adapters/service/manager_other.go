//go:build !linux && !darwin

package service

import (
	"runtime"

	"github.com/cbth-dev/cbth/internal/errs"
)

// ForOS refuses: cbth runs on Linux and macOS only.
func ForOS(getenv func(string) string, run func(string, ...string) ([]byte, error)) (Manager, error) {
	return Manager{}, errs.New(errs.ENOTSUP, "no per-user service manager support on %s", runtime.GOOS)
}
