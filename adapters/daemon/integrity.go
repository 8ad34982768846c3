package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/sockfile"
)

// refuseLog adds the way out to an error that keeps the daemon from
// serving a home's log: ECORRUPT means the log cannot be trusted, and no
// command may go on as if it could.
func refuseLog(h home.Home, err error) error {
	if errs.CodeOf(err) != errs.ECORRUPT {
		return err
	}
	return &errs.Error{Code: errs.ECORRUPT, Message: fmt.Sprintf("%v; the daemon will not serve this log. To recover, restore %s from a backup, "+
		"or run `cbth home reinit` to move %s aside (kept for inspection) and start a new home, with `--restore FILE` to load an `events export` into it",
		err, h.DB(), h.Root)}
}

// KeepSocket listens on path again when its socket file was removed under
// the running daemon, and serves the new listener with serve until ctx
// ends. Clients find what serves there by that path alone: without the
// daemon's own every command would start a daemon that cannot take the
// lock and wait for a socket that never comes; without the gateway's,
// channel clients lose the gateway.
func (h *Host) KeepSocket(ctx context.Context, path string, serve func(context.Context, *sockfile.Listener) error) {
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err := h.Home.Ensure(); err != nil {
		h.Log.Error("recreate the run directory", "err", err)
		return
	}
	ln, err := sockfile.Listen(path)
	if err != nil {
		h.Log.Error("listen again", "socket", path, "err", err)
		return
	}
	h.Log.Warn("the socket was removed; listening again", "socket", path)
	go func() {
		if err := serve(ctx, ln); err != nil {
			h.Log.Error("serve", "socket", path, "err", err)
		}
	}()
}
