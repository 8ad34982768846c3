package appserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/coder/websocket"

	"github.com/cbth-dev/cbth/internal/errs"
)

// maxSunPath is the longest socket path connect(2) takes on both Linux
// (108 bytes with the NUL) and macOS (104).
const maxSunPath = 103

// wsConn is the `--listen unix://PATH` transport: a WebSocket (RFC 6455)
// over the unix socket, one JSON-RPC message per text frame.
type wsConn struct{ c *websocket.Conn }

// Peer is the process listening at the other end of a unix socket, as the
// kernel recorded it when the connection was made.
type Peer struct {
	PID int
	UID int
}

// DialUnix connects to an app-server listening on the unix socket at path
// and completes the WebSocket handshake. It refuses a listener of another
// user (EACCES): the socket is the app-server's whole control plane, and
// it has no authentication of its own. The app-server makes path a symlink
// to a short socket in the system temp directory; a path too long for
// connect(2) is dialled through that link's target.
func DialUnix(ctx context.Context, path string) (Transport, Peer, error) {
	target := path
	if len(path) > maxSunPath {
		resolved, err := filepath.EvalSymlinks(path)
		if err != nil {
			return nil, Peer{}, errs.Wrap(errs.EHOSTDOWN, err, "codex app-server socket %s", path)
		}
		target = resolved
	}
	var peer Peer
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "unix", target)
			if err != nil {
				return nil, err
			}
			if peer, err = connPeer(conn); err != nil {
				conn.Close()
				return nil, err
			}
			if peer.UID != os.Getuid() {
				conn.Close()
				return nil, errs.New(errs.EACCES, "codex app-server socket %s belongs to uid %d", path, peer.UID)
			}
			return conn, nil
		},
		DisableCompression: true,
	}}
	c, resp, err := websocket.Dial(ctx, "ws://localhost/", &websocket.DialOptions{HTTPClient: hc})
	if resp != nil && resp.Body != nil && err != nil {
		resp.Body.Close()
	}
	if err != nil {
		if errs.CodeOf(err) == errs.EACCES {
			return nil, Peer{}, err
		}
		return nil, Peer{}, errs.Wrap(errs.EHOSTDOWN, err, "connect to codex app-server at %s", path)
	}
	c.SetReadLimit(MaxMessage)
	return &wsConn{c: c}, peer, nil
}

func connPeer(conn net.Conn) (Peer, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return Peer{}, fmt.Errorf("not a unix connection: %T", conn)
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var p Peer
	var perr error
	if err := rc.Control(func(fd uintptr) { p, perr = peerCred(int(fd)) }); err != nil {
		return Peer{}, err
	}
	if perr != nil {
		return Peer{}, os.NewSyscallError("getsockopt", perr)
	}
	return p, nil
}

func (w *wsConn) Read(ctx context.Context) ([]byte, error) {
	for {
		typ, msg, err := w.c.Read(ctx)
		if err != nil {
			if errors.Is(err, websocket.ErrMessageTooBig) {
				return nil, errs.Wrap(errs.EMSGSIZE, err, "codex app-server message over %d bytes", MaxMessage)
			}
			return nil, err
		}
		if typ == websocket.MessageText {
			return msg, nil
		}
		// The app-server sends JSON-RPC only as text; a binary frame is not
		// part of the protocol and is skipped rather than misread.
	}
}

// writeTimeout bounds one frame's write. A write on a unix socket waits
// only while the peer has stopped reading; after this long the connection
// is given up (the library closes it).
const writeTimeout = 30 * time.Second

// Write ignores ctx: the library closes the whole connection when the
// context of a write ends, and a caller's deadline is for its own answer,
// not for the connection every other caller shares.
func (w *wsConn) Write(_ context.Context, msg []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	return w.c.Write(ctx, websocket.MessageText, msg)
}

func (w *wsConn) Close() error { return w.c.Close(websocket.StatusNormalClosure, "") }
