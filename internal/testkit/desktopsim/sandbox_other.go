//go:build !linux

package desktopsim

import (
	"errors"
	"runtime"
)

// Sandbox runs commands as a Desktop heartbeat would, against Home. The
// emulation needs Linux mount namespaces; on other systems Run refuses.
type Sandbox struct {
	Home string
	Dir  string
}

// Tools reports that the emulation is not available here.
func Tools() error {
	return errors.New("the emulated heartbeat sandbox needs Linux (mount namespaces); this is " + runtime.GOOS)
}

// Run refuses: see Tools.
func (s Sandbox) Run(env []string, allow Allow, bin string, args ...string) (Result, error) {
	return Result{}, Tools()
}
