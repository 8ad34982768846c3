package main

import (
	"fmt"
	"io"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
)

// PluginEnsureCmd is `cbth plugin ensure` (app_server.ensure).
type PluginEnsureCmd struct {
	PluginID         string `help:"The plugin's stable identity." required:"" name:"plugin-id"`
	PluginInstanceID string `help:"The running plugin instance; the lease belongs to it." required:"" name:"plugin-instance-id"`
	ThreadID         string `help:"The Codex thread the lease binds." required:"" name:"thread-id"`
	CodexBinary      string `help:"The codex executable the app-server runs (a name in PATH or an absolute path)." required:"" name:"codex-binary"`
}

// Run ensures the lease.
func (c *PluginEnsureCmd) Run(env *Env) error {
	res, err := call(env, api.AppServerEnsure, api.EnsureArgs{PluginID: c.PluginID, PluginInstanceID: c.PluginInstanceID,
		SourceThreadID: c.ThreadID, CodexBinary: c.CodexBinary})
	if err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "lease %s (%s) on thread %s: managed session %s, epoch %d, app-server %s\n",
			res.AppServerLeaseID, res.Outcome, res.BoundThreadID, res.ManagedSessionID, res.SessionEpoch, res.AppServerInstance)
	})
}
