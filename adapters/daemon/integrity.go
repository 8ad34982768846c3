package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/internal/errs"
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

// keepSocket listens again when the socket file was removed under the
// running daemon. Clients find the daemon by that path: without it every
// command would start a daemon that cannot take the lock and wait for a
// socket that never comes.
func (d *Daemon) keepSocket(ctx context.Context) {
	h := d.opt.Home
	if _, err := os.Lstat(h.Socket()); !errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err := h.Ensure(); err != nil {
		d.opt.Log.Error("recreate the run directory", "err", err)
		return
	}
	ln, err := ipc.Listen(h.Socket())
	if err != nil {
		d.opt.Log.Error("listen again", "socket", h.Socket(), "err", err)
		return
	}
	d.opt.Log.Warn("the socket was removed; listening again", "socket", h.Socket())
	go func() {
		if err := d.srv.Serve(ctx, ln); err != nil {
			d.opt.Log.Error("serve", "err", err)
		}
	}()
}
