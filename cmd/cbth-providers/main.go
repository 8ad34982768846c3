// Command cbth-providers runs one model call through a network driver (the
// OpenAI, Anthropic and Gemini SDKs) for cbth, which starts it per call so
// that the SDKs never load into cbth itself. It reads one JSON request line
// on stdin and writes canonical JSONL events on stdout; see package
// adapters/cortexfs/driver/provider and spec/cortexfs.md ("Provider
// helper") for the protocol. It is installed next to cbth.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/all"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/provider"
	"github.com/cbth-dev/cbth/engine/errs"
)

const usage = `usage: cbth-providers < REQUEST
       cbth-providers --list
cbth starts this helper for every network model call: one JSON request
line on stdin, canonical JSONL events on stdout (protocol v%d).
`

func main() {
	drivers := all.Drivers(all.ProcessDeps())
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "--list":
			names := make([]string, 0, len(drivers))
			for n := range drivers {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				fmt.Println(n)
			}
			os.Exit(errs.ExitOK)
		case "--help", "-h":
			fmt.Printf(usage, provider.Version)
			os.Exit(errs.ExitOK)
		default:
			fmt.Fprintf(os.Stderr, usage, provider.Version)
			os.Exit(errs.ExitUsage)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := provider.Serve(ctx, os.Stdin, os.Stdout, drivers)
	stop()
	os.Exit(code)
}
