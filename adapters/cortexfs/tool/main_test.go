package tool

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cbth-dev/cbth/internal/confine"
)

// TestMain lets this test binary be the confinement wrapper shell.exec
// starts (confine.Command runs the running binary under that name).
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == confine.ProgramName {
		os.Exit(confine.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}
