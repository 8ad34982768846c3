package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/cbth-dev/cbth/adapters/cortexfs/runner"
)

// multicall lets the one cbth binary answer under its other names. main
// calls it first; handled=false means "not one of those names, carry on".
func multicall(argv0 string, args []string) (exit int, handled bool) {
	switch filepath.Base(argv0) {
	case runner.ProgramName:
		// The kernel runs objects as `cortexfs-object-runner <object> args...`
		// through their #! line.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runner.Main(args, os.Stdin, os.Stdout, os.Stderr, runner.ProcessEnv(ctx)), true
	case "ctx":
		// ctx client: not wired here yet; the kong root handles `ctx` verbs.
		return 0, false
	}
	return 0, false
}
