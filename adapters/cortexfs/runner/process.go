package runner

import (
	"context"
	"net/http"
	"os"

	"github.com/cbth-dev/cbth/adapters/cortexfs/cred"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/all"
	"github.com/google/uuid"
	"golang.org/x/sys/unix"
)

// IsTTY reports whether f is a terminal.
func IsTTY(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// ProcessDeps are the driver dependencies of a real process: credentials
// from its environment, then the system keychain.
func ProcessDeps() driver.Deps {
	return driver.Deps{
		Creds: cred.Source{LookupEnv: os.LookupEnv, Keychain: cred.System{}},
		HTTP:  http.DefaultClient,
	}
}

// ProcessEnv is the Env of the running process.
func ProcessEnv(ctx context.Context) Env {
	return Env{
		Context:    ctx,
		StdinIsTTY: IsTTY(os.Stdin),
		Drivers:    all.Drivers(ProcessDeps()),
		NewRunID:   func() string { return "run-" + uuid.Must(uuid.NewV7()).String() },
	}
}
