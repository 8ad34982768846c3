package sessions

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/internal/errs"
)

// daemonProc is the Codex daemon's process as cbth follows it: its pid
// and start (which tell it from a later process that reuses the pid),
// and cbth's connection, made again while the same process serves.
type daemonProc struct {
	d         *Daemon
	path      string
	pid       int
	start     string
	userAgent string

	mu     sync.Mutex
	client *appserver.Client
	exited chan struct{}
}

// Client implements proc.
func (p *daemonProc) Client() *appserver.Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.client
}

// Exited implements proc: closed once cbth can no longer reach the same
// process (gone, replaced, or cbth stopped following it).
func (p *daemonProc) Exited() <-chan struct{} { return p.exited }

// reconnectFor bounds how long a lost connection is tried again before
// the process counts as gone for cbth: its stream is then lost, and the
// next instance has the next epoch.
const reconnectFor = 3 * time.Second

// Notifications implements proc: every notification on cbth's
// connection, then, after a reconnection to the same process, on the new
// one, until the process is gone or stop closes.
func (p *daemonProc) Notifications(stop <-chan struct{}, log *slog.Logger, subscribed func(first bool), each func(appserver.Message)) {
	defer close(p.exited)
	for first := true; ; first = false {
		c := p.Client()
		sub := c.Subscribe()
		subscribed(first)
		for msg := range sub.C() {
			if msg.Kind == appserver.KindNotification {
				each(msg)
			}
		}
		select {
		case <-c.Done():
		default:
			log.Warn("codex daemon notifications lost", "err", sub.Err())
			continue
		}
		if !p.reconnect(stop, log) {
			return
		}
	}
}

// reconnect makes cbth's connection again, to the same process only.
func (p *daemonProc) reconnect(stop <-chan struct{}, log *slog.Logger) bool {
	deadline := time.Now().Add(reconnectFor)
	for try := 1; time.Now().Before(deadline); try++ {
		select {
		case <-stop:
			return false
		case <-time.After(time.Duration(try) * 50 * time.Millisecond):
		}
		if start, err := processStart(p.pid); err != nil || start != p.start {
			log.Info("the codex daemon is gone", "pid", p.pid)
			return false
		}
		if _, err := CheckDaemonSocket(p.path, os.Getuid()); err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, peer, err := p.d.connectOnce(ctx, p.path)
		if err == nil && peer != p.pid {
			c.Close()
			cancel()
			log.Info("another process serves the codex daemon's socket", "pid", peer, "was", p.pid)
			return false
		}
		if err == nil {
			if _, err = c.Initialize(ctx, p.d.clientInfo(), p.d.capabilities()); err != nil {
				c.Close()
			}
		}
		cancel()
		if err != nil {
			continue
		}
		p.mu.Lock()
		p.client = c
		p.mu.Unlock()
		log.Info("reconnected to the codex daemon", "pid", p.pid)
		return true
	}
	return false
}

// lockName is the lock a cbth home holds while it delivers into a Codex
// home's daemon: two homes would each see the thread idle and each start
// a turn.
const lockName = "cbth-codex-daemon.lock"

// takeLock takes the Codex home's delivery lock for this cbth home, once.
func (d *Daemon) takeLock() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lock != nil {
		return nil
	}
	path := filepath.Join(d.cfg.CodexHome, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return errs.Wrap(errs.EACCES, err, "codex daemon lock")
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := make([]byte, 512)
		n, _ := f.ReadAt(holder, 0)
		f.Close()
		return errs.New(errs.EBUSY, "another cbth home delivers into the Codex daemon of %s (%s); one cbth home per Codex home: set [cli] codex_daemon = false in one of them",
			d.cfg.CodexHome, trimHolder(holder[:n]))
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("cbth home %s, pid %d\n", d.cfg.Home, os.Getpid())), 0)
	}
	d.lock = f
	return nil
}

func trimHolder(b []byte) string {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == 0) {
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		return "holder unknown"
	}
	return string(b)
}
