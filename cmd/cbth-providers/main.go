// Command cbth-providers runs one model call through a network driver (the
// OpenAI, Anthropic and Gemini SDKs) for cbth, which starts it per call so
// that the SDKs never load into cbth itself. It reads one JSON request line
// on stdin and writes canonical JSONL events on stdout; see package
// adapters/cortexfs/driver/provider and spec/cortexfs.md ("Provider
// helper") for the protocol. It is installed next to cbth. It carries
// every driver; cbth prefers, for each call, the helper of the call's SDK
// alone (cmd/cbth-providers-openai, -anthropic, -gemini), which starts
// faster, and comes here when that one is not installed.
package main

import (
	"os"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/all"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/helper"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/provider"
)

func main() {
	os.Exit(helper.Main(provider.HelperName, all.Drivers(helper.ProcessDeps())))
}
