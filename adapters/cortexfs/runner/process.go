package runner

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/provider"
	"github.com/google/uuid"
	"golang.org/x/term"
)

// IsTTY reports whether f is a terminal.
func IsTTY(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// ProcessDrivers are the drivers of a real process: debug in-process, the
// network drivers through the cbth-providers helper, whose stderr goes to
// stderr. The provider SDKs are never linked into this binary.
func ProcessDrivers(stderr io.Writer) driver.Set { return provider.Drivers(stderr) }

// RunID returns "run-" and a fresh UUIDv7: run ids sort by start time.
func RunID() string { return "run-" + uuid.Must(uuid.NewV7()).String() }

// ProcessEnv is the Env of the running process. SIGINT and SIGTERM cancel
// a call to a driver that runs outside this process (the helper then gets
// SIGTERM); the in-process debug driver runs without signal handlers.
func ProcessEnv(ctx context.Context) Env {
	return Env{
		Context: ctx,
		Interrupt: func(ctx context.Context) (context.Context, context.CancelFunc) {
			return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		},
		StdinIsTTY: IsTTY(os.Stdin),
		Drivers:    ProcessDrivers(os.Stderr),
		NewRunID:   RunID,
	}
}
