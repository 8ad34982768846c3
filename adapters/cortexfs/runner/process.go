package runner

import (
	"context"
	"io"
	"os"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/provider"
	"github.com/google/uuid"
	"golang.org/x/sys/unix"
)

// IsTTY reports whether f is a terminal.
func IsTTY(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// ProcessDrivers are the drivers of a real process: debug in-process, the
// network drivers through the cbth-providers helper, whose stderr goes to
// stderr. The provider SDKs are never linked into this binary.
func ProcessDrivers(stderr io.Writer) driver.Set { return provider.Drivers(stderr) }

// ProcessEnv is the Env of the running process.
func ProcessEnv(ctx context.Context) Env {
	return Env{
		Context:    ctx,
		StdinIsTTY: IsTTY(os.Stdin),
		Drivers:    ProcessDrivers(os.Stderr),
		NewRunID:   func() string { return "run-" + uuid.Must(uuid.NewV7()).String() },
	}
}
