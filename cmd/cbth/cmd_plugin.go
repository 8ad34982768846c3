package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
)

// PluginCmd groups the host-plugin surface (spec/plugin-target.md): the
// codex_app_server delivery target that a host plugin drives.
type PluginCmd struct {
	Handshake PluginHandshakeCmd `cmd:"" help:"Show the service capabilities a host plugin may rely on."`
	Ensure    PluginEnsureCmd    `cmd:"" help:"Explicit lease mode: start or reuse the daemon-owned Codex app-server for a thread and hold a lease on it."`
	Enqueue   PluginEnqueueCmd   `cmd:"" help:"Submit a job whose result goes into a plugin's Codex thread through the codex_app_server target."`
	Inspect   PluginInspectCmd   `cmd:"" help:"Show a plugin delivery with its resolved target, and reconcile the target."`
}

// PluginHandshakeCmd is `cbth plugin handshake`.
type PluginHandshakeCmd struct {
	PluginID         string `help:"The plugin's stable identity." required:"" name:"plugin-id"`
	PluginInstanceID string `help:"The running plugin instance (changes when the plugin restarts)." name:"plugin-instance-id"`
}

// Run asks the daemon for its service capabilities.
func (c *PluginHandshakeCmd) Run(env *Env) error {
	res, err := call(env, api.PluginHandshake, api.HandshakeArgs{PluginID: c.PluginID, PluginInstanceID: c.PluginInstanceID})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "cbth %s (protocol %d, pid %d) for plugin %s\nservice capabilities: %s\n",
			res.Version, res.Protocol, res.PID, res.PluginID, strings.Join(res.ServiceCapabilities, ", "))
	})
}
