// Package all assembles the drivers the cbth-providers helper carries: the
// SDK-backed network drivers and the debug echo. Only cmd/cbth-providers
// and tests import it; the cbth binary reaches these drivers through
// package provider, across a process boundary.
package all

import (
	"maps"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/anthropic"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/debug"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/gemini"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/openai"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/sdkdeps"
)

// Drivers returns every driver, wired to deps.
func Drivers(deps sdkdeps.Deps) driver.Set {
	s := driver.Set{debug.Name: debug.Echo{}}
	for _, sdk := range []driver.Set{openai.Drivers(deps), anthropic.Drivers(deps), gemini.Drivers(deps)} {
		maps.Copy(s, sdk)
	}
	return s
}
