// Package all assembles the drivers the cbth-providers helper carries: the
// SDK-backed network drivers and the debug echo. Only cmd/cbth-providers
// and tests import it; the cbth binary reaches these drivers through
// package provider, across a process boundary.
package all

import (
	"net/http"
	"os"

	"github.com/cbth-dev/cbth/adapters/cortexfs/cred"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/anthropic"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/debug"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/gemini"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/openai"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/sdkdeps"
)

// Drivers returns every driver, wired to deps.
func Drivers(deps sdkdeps.Deps) driver.Set {
	return driver.Set{
		debug.Name:           debug.Echo{},
		openai.ChatName:      openai.Chat{Deps: deps},
		openai.ResponsesName: openai.Responses{Deps: deps},
		anthropic.Name:       anthropic.Messages{Deps: deps},
		gemini.Name:          gemini.Gemini{Deps: deps},
	}
}

// ProcessDeps are the driver dependencies of a real process: credentials
// from its environment, then the system keychain.
func ProcessDeps() sdkdeps.Deps {
	return sdkdeps.Deps{
		Creds: cred.Source{LookupEnv: os.LookupEnv, Keychain: cred.System{}},
		HTTP:  http.DefaultClient,
	}
}
