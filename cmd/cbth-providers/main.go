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
	"strings"
	"syscall"

	"github.com/cbth-dev/cbth/adapters/cortexfs/cred"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/all"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/provider"
	"github.com/cbth-dev/cbth/engine/errs"
)

const usage = `usage: cbth-providers < REQUEST
       cbth-providers --list
       cbth-providers --check-credential PROVIDER [API_KEY_ENV]
cbth starts this helper for every network model call: one JSON request
line on stdin, canonical JSONL events on stdout (protocol v%d).
--check-credential says where PROVIDER's credential was found (cbth
doctor asks it), never the credential itself.
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
		case "--check-credential":
			os.Exit(checkCredential(os.Args[2:]))
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

// checkCredential resolves a provider's credential as a model call would
// and prints where it was found: the variable, or the keychain. The
// credential itself is never printed; a missing one is ENOTCONF (69) with
// the message that names where to put it.
func checkCredential(args []string) int {
	if len(args) < 1 || len(args) > 2 || args[0] == "" {
		fmt.Fprintf(os.Stderr, usage, provider.Version)
		return errs.ExitUsage
	}
	override := ""
	if len(args) == 2 {
		override = args[1]
	}
	src := cred.Source{LookupEnv: os.LookupEnv, Keychain: cred.System{}}
	if _, err := src.APIKey(context.Background(), args[0], override); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return errs.CodeOf(err).ExitCode()
	}
	for _, n := range cred.EnvNames(args[0], override) {
		if v, ok := os.LookupEnv(n); ok && strings.TrimSpace(v) != "" {
			fmt.Println("$" + n)
			return errs.ExitOK
		}
	}
	fmt.Printf("the keychain (service %s, account %s)\n", cred.Service(args[0]), cred.Account)
	return errs.ExitOK
}
