package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"

	"github.com/cbth-dev/cbth/adapters/cortexfs/socket"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/internal/errs"
)

// SocketAgents runs turns over the CortexFS socket protocol
// (spec/cortexfs.md, "Model socket"): one connection per turn, a send
// frame, then the run's frames until done.
type SocketAgents struct{}

// Turn implements Agents.
func (SocketAgents) Turn(ctx context.Context, sock string, t Turn, frame func(stream.Event) error) error {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return errs.Wrap(errs.EHOSTDOWN, err, "connect to %s", sock)
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	req, _ := json.Marshal(map[string]string{"op": socket.OpSend, "id": t.ID, "session": t.Session, "input": t.Input})
	if _, err := nc.Write(append(req, '\n')); err != nil {
		return errs.Wrap(errs.EHOSTDOWN, err, "write to %s", sock)
	}
	sc := bufio.NewScanner(nc)
	sc.Buffer(make([]byte, 64<<10), socket.MaxFrame+1)
	for sc.Scan() {
		var ev stream.Event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		if err := frame(ev); err != nil {
			return err
		}
		switch {
		case ev.Type == stream.TypeDone:
			if ev.Status != stream.StatusOK {
				return errs.New(errs.EHOSTDOWN, "the run ended %s", ev.Status)
			}
			return nil
		case ev.Type == stream.TypeError && ev.Run == "":
			// The request itself was refused (EAGAIN while busy, EINVAL).
			return errs.New(ev.Code, "%s", ev.Message)
		}
	}
	if ctx.Err() != nil {
		return errs.Wrap(errs.ETIMEDOUT, ctx.Err(), "turn on %s", sock)
	}
	err = sc.Err()
	if err == nil {
		err = errors.New("connection closed before done")
	}
	return errs.Wrap(errs.EHOSTDOWN, err, "read from %s", sock)
}
