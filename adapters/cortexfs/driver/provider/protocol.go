// Package provider is the process boundary between cbth and the network
// model drivers. The provider SDKs (OpenAI, Anthropic, Gemini) are linked
// only into a second binary, cbth-providers; cbth keeps the debug driver
// in-process and runs every other driver by starting that helper once per
// call and speaking the protocol below on its stdin and stdout.
//
// Protocol v1 (spec/cortexfs.md, "Provider helper"):
//
//   - stdin: exactly one JSON object on one line, a WireRequest:
//     {"v":1,"driver":"openai-chat","model":"openai/gpt-4o",
//     "provider":"openai","native_id":"gpt-4o","base_url":"https://...",
//     "defaults":[{"key":"temperature","value":"0.2"}],"capabilities":["chat"],
//     "messages":[{"role":"user","content":"hello"}],
//     "tools":[{"name":"fs.read","description":"...","parameters":{...}}]}
//     messages may hold an assistant turn's tool_calls and role "tool"
//     results (call_id, name); tools is absent for a plain model call.
//     Unknown fields are ignored; a different "v" is EVERSION.
//   - stdout: canonical stream events, one JSON object per line, without
//     run ids: any number of body events (delta, message, reasoning_delta,
//     reasoning_message, tool_call, usage), then optionally one error event
//     {"type":"error","code":"EACCES","message":"..."}, then exactly one
//     {"type":"done","status":"ok"|"error"|"cancelled"} as the last line.
//     start is never sent: the caller owns the run and its framing.
//   - exit status: that of the exec protocol for the outcome (0 ok, 1
//     cancelled, 2 bad request, 13 EACCES, 69 unavailable, 70 internal).
//     The lines are authoritative; a helper that exits without a done line
//     has failed (EINTERNAL on the caller's side).
//   - SIGINT or SIGTERM cancels the call: the helper ends with done
//     cancelled and exit 1.
//   - credentials are resolved inside the helper (environment, then the
//     system keychain); they never travel on stdin, argv or in files.
//   - stderr carries nothing on the normal paths; the caller passes it
//     through for diagnostics.
package provider

import (
	"slices"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
)

// Version is the protocol version a request carries in "v".
const Version = 1

// HelperName is the file name of the helper that carries every driver.
const HelperName = "cbth-providers"

// The helpers of one SDK each. A helper starts for every model call, and
// every package it links runs its initializers at that start, so cbth
// starts the helper of the call's SDK when it is installed (HelperFor),
// and HelperName when it is not.
const (
	HelperOpenAI    = "cbth-providers-openai"
	HelperAnthropic = "cbth-providers-anthropic"
	HelperGemini    = "cbth-providers-gemini"
)

// SDKHelpers maps each SDK helper to the drivers it carries.
var SDKHelpers = map[string][]string{
	HelperOpenAI:    {"openai-chat", "openai-responses"},
	HelperAnthropic: {"anthropic-messages"},
	HelperGemini:    {"gemini"},
}

// HelperFor is the SDK helper that carries driver ("" for none).
func HelperFor(driver string) string {
	for h, ds := range SDKHelpers {
		if slices.Contains(ds, driver) {
			return h
		}
	}
	return ""
}

// EnvHelper names an environment variable holding the helper's path; when
// set it wins over every other place.
const EnvHelper = "CBTH_PROVIDERS"

// MaxRequest bounds the request line (the runner's 8 MiB input plus JSON
// overhead and history).
const MaxRequest = 32 << 20

// MaxFrame bounds one event line from the helper.
const MaxFrame = 16 << 20

// Names are the drivers the helper serves, in a stable order. The helper
// also serves debug, but cbth runs that one in-process.
var Names = []string{"openai-chat", "openai-responses", "anthropic-messages", "gemini"}

// WireRequest is the request line.
type WireRequest struct {
	V        int    `json:"v"`
	Driver   string `json:"driver"`
	Model    string `json:"model"`
	Provider string `json:"provider"`
	NativeID string `json:"native_id"`
	// BaseURL, when set, overrides any base_url in Defaults.
	BaseURL      string           `json:"base_url,omitempty"`
	Defaults     []object.KV      `json:"defaults"`
	Capabilities []string         `json:"capabilities"`
	Messages     []driver.Message `json:"messages"`
	// Tools are the tools offered to the model (an agent's turn):
	// [{"name":"fs.read","description":"...","parameters":{JSON Schema}}].
	Tools []driver.ToolDef `json:"tools,omitempty"`
}

// Wire builds the request line fields for a driver call.
func Wire(driverName string, req driver.Request) WireRequest {
	base, _ := req.Default("base_url")
	defaults := req.Defaults
	if defaults == nil {
		defaults = []object.KV{}
	}
	caps := req.Caps
	if caps == nil {
		caps = []string{}
	}
	return WireRequest{V: Version, Driver: driverName, Model: req.Model, Provider: req.Provider,
		NativeID: req.NativeID, BaseURL: base, Defaults: defaults, Capabilities: caps, Messages: req.Messages, Tools: req.Tools}
}

// Request turns a request line back into a driver request.
func (w WireRequest) Request() driver.Request {
	defaults := make([]object.KV, 0, len(w.Defaults)+1)
	for _, kv := range w.Defaults {
		if w.BaseURL != "" && kv.Key == "base_url" {
			continue
		}
		defaults = append(defaults, kv)
	}
	if w.BaseURL != "" {
		defaults = append(defaults, object.KV{Key: "base_url", Value: w.BaseURL})
	}
	return driver.Request{Model: w.Model, Provider: w.Provider, NativeID: w.NativeID,
		Messages: w.Messages, Defaults: defaults, Caps: w.Capabilities, Tools: w.Tools}
}
