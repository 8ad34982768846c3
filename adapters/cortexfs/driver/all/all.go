// Package all assembles the drivers this build carries.
package all

import (
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/anthropic"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/debug"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/gemini"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/openai"
)

// Drivers returns every driver, wired to deps.
func Drivers(deps driver.Deps) driver.Set {
	return driver.Set{
		debug.Name:           debug.Echo{},
		openai.ChatName:      openai.Chat{Deps: deps},
		openai.ResponsesName: openai.Responses{Deps: deps},
		anthropic.Name:       anthropic.Messages{Deps: deps},
		gemini.Name:          gemini.Gemini{Deps: deps},
	}
}
