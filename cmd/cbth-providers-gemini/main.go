// Command cbth-providers-gemini is the provider helper of the Gemini SDK
// alone: cbth starts it for a model call through one of that SDK's
// drivers in place of cbth-providers, which links every SDK and so runs
// every SDK's package initializers at each start. Same protocol, same
// drivers (spec/cortexfs.md, "Provider helper"); installed next to cbth.
package main

import (
	"os"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/gemini"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/helper"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/provider"
)

func main() {
	os.Exit(helper.Main(provider.HelperGemini, gemini.Drivers(helper.ProcessDeps())))
}
