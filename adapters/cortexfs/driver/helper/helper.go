// Package helper is the whole of a provider helper's main: the helper
// that carries every driver (cbth-providers) and the one per SDK
// (cbth-providers-openai, -anthropic, -gemini) differ only in the drivers
// they link. A helper starts for every model call, and every package it
// links runs its initializers at that start: one SDK's helper pays for
// one SDK (package provider's HelperFor picks it).
package helper

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/cbth-dev/cbth/adapters/cortexfs/cred"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/provider"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/sdkdeps"
	"github.com/cbth-dev/cbth/internal/errs"
)

const usage = `usage: %[1]s < REQUEST
       %[1]s --list
       %[1]s --check-credential PROVIDER [API_KEY_ENV]
cbth starts this helper for every network model call: one JSON request
line on stdin, canonical JSONL events on stdout (protocol v%[2]d).
--list names the drivers it carries. --check-credential says where
PROVIDER's credential was found (cbth doctor asks it), never the
credential itself.
`

// ProcessDeps are the driver dependencies of a real process: credentials
// from its environment, then the system keychain.
func ProcessDeps() sdkdeps.Deps {
	return sdkdeps.Deps{
		Creds: cred.Source{LookupEnv: os.LookupEnv, Keychain: cred.System{}},
		HTTP:  http.DefaultClient,
	}
}

// Main runs the helper named name with drivers on the process's
// arguments and standard streams, and returns its exit status.
func Main(name string, drivers driver.Set) int {
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
			return errs.ExitOK
		case "--check-credential":
			return checkCredential(name, os.Args[2:])
		case "--help", "-h":
			fmt.Printf(usage, name, provider.Version)
			return errs.ExitOK
		default:
			fmt.Fprintf(os.Stderr, usage, name, provider.Version)
			return errs.ExitUsage
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return provider.Serve(ctx, os.Stdin, os.Stdout, drivers)
}

// checkCredential resolves a provider's credential as a model call would
// and prints where it was found: the variable, or the keychain. The
// credential itself is never printed; a missing one is ENOTCONF (69) with
// the message that names where to put it.
func checkCredential(name string, args []string) int {
	if len(args) < 1 || len(args) > 2 || args[0] == "" {
		fmt.Fprintf(os.Stderr, usage, name, provider.Version)
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
