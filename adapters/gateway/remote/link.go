package remote

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	"github.com/cbth-dev/cbth/adapters/gateway"
	"github.com/cbth-dev/cbth/adapters/gateway/envelope"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Reason codes of a forward that failed: with the error code, what a
// client of the gateway switches on (spec/channels.md, "ssh_remote over
// OpenSSH").
const (
	ReasonNoRemote       = "no_remote"            // ENOENT: no [gateway.remotes.NAME] in config.toml
	ReasonConfig         = "config"               // EINVAL: config.toml does not load
	ReasonSSHNotFound    = "ssh_not_found"        // ENOENT: the ssh client could not be run
	ReasonSSHConnect     = "ssh_connect"          // EHOSTDOWN: ssh could not reach the host: refused, down, unknown name
	ReasonHostKey        = "host_key"             // EACCES: the host key is not known, or changed
	ReasonSSHAuth        = "ssh_auth"             // EACCES: ssh could not log in
	ReasonSSHFailed      = "ssh_failed"           // EHOSTDOWN: ssh failed otherwise (see the message)
	ReasonConnectTimeout = "connect_timeout"      // EHOSTDOWN: no hello within connect_timeout
	ReasonNoCBTH         = "remote_cbth_missing"  // ENOENT (or EACCES): the remote shell could not run cbth
	ReasonRemoteServe    = "remote_serve"         // ENOTSUP: the remote cbth ended without serving
	ReasonProtocol       = "remote_protocol"      // ENOTSUP: what came back is not this protocol
	ReasonVersion        = "protocol_version"     // EVERSION: the two ends speak different versions
	ReasonStalled        = "stalled"              // ETIMEDOUT: the link took nothing, or said nothing, for stall_timeout
	ReasonLinkDropped    = "link_dropped"         // EHOSTDOWN: the link dropped, and again on each retry
	ReasonAnswerTimeout  = "answer_timeout"       // ETIMEDOUT: the answer took longer than the gateway waits for a turn
	ReasonStopping       = "gateway_stopping"     // EHOSTDOWN: the local daemon is stopping
	ReasonFrameSize      = envelope.RuleFrameSize // EMSGSIZE: an envelope over the frame limit
)

// frame is one frame the reader passed on.
type frame struct {
	kind string
	body []byte
	err  error // errFrameSize: a frame over the limit, skipped
	size int
}

// Link is one ssh process running the remote's `cbth gateway serve
// --stdio`, past the handshake. It carries one envelope at a time.
type Link struct {
	name string
	cfg  home.GatewayRemote
	cmd  *exec.Cmd
	in   *os.File // ssh's stdin: written with deadlines
	// frames are the env, drop and err frames in order; closed when
	// ssh's output ends.
	frames chan frame
	// seen is when the last frame of any kind came (heartbeats too).
	seen   atomic.Int64
	stderr *tail
	exited chan struct{}
	// done is closed when the link is closed: the reader stops passing
	// frames on.
	done      chan struct{}
	closeOnce sync.Once
	broken    atomic.Bool
	idleSince time.Time
	peer      Hello
}

// Dial runs ssh to the remote's cbth and makes the handshake within the
// remote's connect_timeout. Every failure is a *Fault with a code and a
// reason, and leaves no process behind.
func Dial(ctx context.Context, name string, cfg home.GatewayRemote, version string) (*Link, error) {
	args := append([]string{
		// No terminal, no X11 or agent forwarding: the link needs
		// neither, and a remote should not get the user's agent through
		// it. BatchMode: the daemon has no one to answer a prompt, so
		// ssh fails rather than waits (an unknown host key included).
		"-T", "-x", "-a", "-o", "BatchMode=yes",
	}, cfg.SSHOptions...)
	args = append(args, cfg.Host, cfg.CBTH+" gateway serve --stdio")
	cmd := exec.Command(cfg.SSH, args...)
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fault(errs.EINTERNAL, ReasonSSHFailed, "pipe: %v", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fault(errs.EINTERNAL, ReasonSSHFailed, "pipe: %v", err)
	}
	l := &Link{name: name, cfg: cfg, cmd: cmd, in: inW, frames: make(chan frame, 64), stderr: &tail{}, exited: make(chan struct{}), done: make(chan struct{})}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, l.stderr
	// Its own process group, so a close ends what ssh started too (a
	// ProxyCommand).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// ssh's stderr is copied until every holder closes it: do not wait
	// on a descendant that keeps it once ssh is gone.
	cmd.WaitDelay = 2 * time.Second
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		code := errs.ENOENT
		if errors.Is(err, fs.ErrPermission) {
			code = errs.EACCES
		}
		return nil, fault(code, ReasonSSHNotFound, "ssh:%s: cannot run the ssh client %q (%v): install OpenSSH's client, or name it in [gateway.remotes.%s] ssh",
			name, cfg.SSH, err, name)
	}
	go func() {
		_ = cmd.Wait()
		close(l.exited)
	}()
	l.seen.Store(time.Now().UnixNano())
	go l.read(outR)
	if err := l.handshake(ctx, version); err != nil {
		l.kill()
		return nil, err
	}
	return l, nil
}

// read passes frames from ssh's stdout on, heartbeats excepted, until
// the output ends or the link is closed.
func (l *Link) read(r *os.File) {
	defer r.Close()
	defer close(l.frames)
	defer l.broken.Store(true)
	fr := newFrameReader(r)
	for {
		kind, body, size, err := fr.next()
		l.seen.Store(time.Now().UnixNano())
		var f frame
		switch {
		case errors.Is(err, errFrameSize):
			f = frame{kind: kind, err: err, size: size}
		case err != nil:
			return
		case kind == KindPing:
			continue
		default:
			f = frame{kind: kind, body: append([]byte(nil), body...), size: size}
		}
		select {
		case l.frames <- f:
		case <-l.done:
			return
		}
	}
}

// handshake sends this end's hello and reads the remote's: the protocol
// and its version must be this one's.
func (l *Link) handshake(ctx context.Context, version string) error {
	t := time.NewTimer(l.cfg.ConnectTimeout.Duration)
	defer t.Stop()
	hb := l.cfg.StallTimeout.Duration / 3
	_ = l.in.SetWriteDeadline(time.Now().Add(l.cfg.ConnectTimeout.Duration))
	// A write error (ssh gone already) shows as the output's end below.
	_, _ = l.in.Write(jsonFrame(KindHello, Hello{Protocol: Protocol, Version: Version, MaxFrame: MaxFrame, HeartbeatMS: hb.Milliseconds(), CBTH: version}))
	select {
	case f, ok := <-l.frames:
		if !ok {
			return l.exitFault()
		}
		switch f.kind {
		case KindHello:
			if json.Unmarshal(f.body, &l.peer) != nil || l.peer.Protocol != Protocol {
				return fault(errs.ENOTSUP, ReasonProtocol, "ssh:%s: the remote did not answer with %s: %s", l.name, Protocol, printable(f.body))
			}
			if l.peer.Version != Version {
				return fault(errs.EVERSION, ReasonVersion, "ssh:%s: the remote cbth %s speaks %s version %d, this one version %d: run the same cbth version on both machines",
					l.name, l.peer.CBTH, Protocol, l.peer.Version, Version)
			}
			return nil
		case KindErr:
			return l.remoteFault(f.body, ReasonRemoteServe)
		}
		return fault(errs.ENOTSUP, ReasonProtocol, "ssh:%s: the remote printed %q where the gateway's hello was due (does a login script of the remote write to stdout?)",
			l.name, printable(append([]byte(f.kind+" "), f.body...)))
	case <-t.C:
		return fault(errs.EHOSTDOWN, ReasonConnectTimeout, "ssh:%s: no answer from %s within connect_timeout %s%s", l.name, l.cfg.Host, l.cfg.ConnectTimeout.Duration, l.said())
	case <-ctx.Done():
		return ctxFault(ctx, l.name)
	}
}

// remoteFault is an err frame: the remote end's own reason not to go on.
func (l *Link) remoteFault(body []byte, reason string) error {
	var f Fault
	if json.Unmarshal(body, &f) != nil || f.Code == "" {
		return fault(errs.ENOTSUP, ReasonProtocol, "ssh:%s: the remote ended the link with %s", l.name, printable(body))
	}
	if f.ReasonCode == "" {
		f.ReasonCode = reason
	}
	f.Message = "ssh:" + l.name + ": the remote cbth: " + f.Message
	return &f
}

// exitFault says why ssh's output ended before the hello: ssh's exit
// status (255: its own failure, told apart by what it printed; 127 and
// 126: the remote shell could not run cbth) and its last words.
func (l *Link) exitFault() error {
	select {
	case <-l.exited:
	case <-time.After(5 * time.Second):
		l.kill()
	}
	status := -1
	if st := l.cmd.ProcessState; st != nil {
		status = st.ExitCode()
	}
	said := l.stderr.String()
	switch status {
	case 127:
		return fault(errs.ENOENT, ReasonNoCBTH, "ssh:%s: the remote shell found no %q: install cbth on %s, or give its path in [gateway.remotes.%s] cbth%s",
			l.name, l.cfg.CBTH, l.cfg.Host, l.name, l.said())
	case 126:
		return fault(errs.EACCES, ReasonNoCBTH, "ssh:%s: the remote shell cannot run %q%s", l.name, l.cfg.CBTH, l.said())
	case 255:
		return classifySSH(l.name, l.cfg.Host, said)
	case -1:
		return fault(errs.EHOSTDOWN, ReasonSSHFailed, "ssh:%s: ssh ended by a signal%s", l.name, l.said())
	}
	return fault(errs.ENOTSUP, ReasonRemoteServe, "ssh:%s: the remote %q ended (exit %d) without serving the gateway: is it a cbth that has `gateway serve --stdio`?%s",
		l.name, l.cfg.CBTH, status, l.said())
}

// classifySSH names ssh's own failure (exit 255) from what it printed:
// ssh has no other way to say it.
func classifySSH(name, host, said string) error {
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(said, s) {
				return true
			}
		}
		return false
	}
	msg := ""
	if said != "" {
		msg = ": " + said
	}
	switch {
	case has("Host key verification failed", "REMOTE HOST IDENTIFICATION HAS CHANGED", "No matching host key", "host key for"):
		return fault(errs.EACCES, ReasonHostKey, "ssh:%s: the host key of %s is not known or has changed: check it and add it to known_hosts yourself (ssh %s once, in a terminal)%s", name, host, host, msg)
	case has("Permission denied", "Too many authentication failures", "no mutual signature"):
		return fault(errs.EACCES, ReasonSSHAuth, "ssh:%s: ssh could not log in to %s%s", name, host, msg)
	case has("Connection refused", "Connection timed out", "Operation timed out", "No route to host", "Network is unreachable",
		"Could not resolve hostname", "Name or service not known", "Connection closed by", "Connection reset", "kex_exchange_identification"):
		return fault(errs.EHOSTDOWN, ReasonSSHConnect, "ssh:%s: ssh could not reach %s%s", name, host, msg)
	}
	return fault(errs.EHOSTDOWN, ReasonSSHFailed, "ssh:%s: ssh failed (exit 255)%s", name, msg)
}

func ctxFault(ctx context.Context, name string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fault(errs.ETIMEDOUT, ReasonAnswerTimeout, "ssh:%s: no answer within the gateway's turn timeout", name)
	}
	return fault(errs.EHOSTDOWN, ReasonStopping, "ssh:%s: the gateway is stopping", name)
}

// said is ssh's last words, for a message.
func (l *Link) said() string {
	if s := l.stderr.String(); s != "" {
		return " (ssh said: " + s + ")"
	}
	return ""
}

// forward sends one envelope line and reads the remote's answer: every
// envelope its destination sends back goes to reply, and the remote
// gateway's acknowledgement or refusal is returned. An answer over the
// frame limit reaches reply as an EMSGSIZE error envelope in its place.
// A reply that fails does not stop the reading: the link stays in step.
// On any error the link is dead.
func (l *Link) forward(ctx context.Context, line []byte, reply func(envelope.Envelope) error) (envelope.Envelope, error) {
	stall := l.cfg.StallTimeout.Duration
	_ = l.in.SetWriteDeadline(time.Now().Add(stall))
	if _, err := l.in.Write(appendFrame(make([]byte, 0, len(line)+len(KindEnv)+2), KindEnv, line)); err != nil {
		l.kill()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return envelope.Envelope{}, fault(errs.ETIMEDOUT, ReasonStalled, "ssh:%s: ssh took nothing for stall_timeout %s: the link is stalled", l.name, stall)
		}
		return envelope.Envelope{}, l.dropped()
	}
	t := time.NewTimer(stall)
	defer t.Stop()
	var rerr error
	send := func(e envelope.Envelope) {
		if rerr == nil {
			rerr = reply(e)
		}
	}
	for {
		select {
		case f, ok := <-l.frames:
			if !ok {
				return envelope.Envelope{}, l.dropped()
			}
			t.Reset(stall)
			switch {
			case f.err != nil:
				send(l.tooLarge(f.size))
			case f.kind == KindEnv:
				e, err := envelope.Decode(f.body)
				if err != nil {
					l.kill()
					return envelope.Envelope{}, fault(errs.ENOTSUP, ReasonProtocol, "ssh:%s: the remote sent an envelope this gateway cannot read: %v", l.name, err)
				}
				if e.Target == gateway.TargetGateway {
					return e, rerr
				}
				send(e)
			case f.kind == KindDrop:
				send(l.tooLarge(0))
			case f.kind == KindErr:
				l.kill()
				return envelope.Envelope{}, l.remoteFault(f.body, ReasonRemoteServe)
			}
		case <-t.C:
			if left := stall - time.Since(time.Unix(0, l.seen.Load())); left > 0 {
				t.Reset(left) // a heartbeat came: the remote is alive and working
				continue
			}
			l.kill()
			return envelope.Envelope{}, fault(errs.ETIMEDOUT, ReasonStalled, "ssh:%s: the remote said nothing, not even its heartbeat, for stall_timeout %s: the link is stalled", l.name, stall)
		case <-ctx.Done():
			l.kill()
			return envelope.Envelope{}, ctxFault(ctx, l.name)
		}
	}
}

// tooLarge stands for an envelope of the answer that was over the frame
// limit: the client learns one was there, and why it did not come.
func (l *Link) tooLarge(size int) envelope.Envelope {
	msg := "an envelope of the remote's answer was over the link's frame limit and was not passed on"
	if size > 0 {
		msg = "an envelope of " + strconv.Itoa(size) + " bytes of the remote's answer was over the link's frame limit and was not passed on"
	}
	b, _ := json.Marshal(map[string]any{"code": errs.EMSGSIZE, "rule": envelope.RuleFrameSize, "message": msg})
	return envelope.Envelope{Target: "ssh:" + l.name, EventType: envelope.EventError, ErrorCode: string(errs.EMSGSIZE), ReasonCode: ReasonFrameSize, Payload: b}
}

// dropped is the error of a link whose ssh went away mid-use: the
// forward may be tried again on another link.
func (l *Link) dropped() error {
	l.kill()
	select {
	case <-l.exited:
	case <-time.After(2 * time.Second):
	}
	return fault(errs.EHOSTDOWN, ReasonLinkDropped, "ssh:%s: the link dropped%s", l.name, l.said())
}

// alive reports whether the link can carry another envelope.
func (l *Link) alive() bool {
	select {
	case <-l.done:
		return false
	case <-l.exited:
		return false
	default:
		return !l.broken.Load()
	}
}

// Close ends the link: its stdin closed, which lets the remote end
// finish, then ssh's process group killed if it has not gone within a
// moment. It returns once ssh was waited for.
func (l *Link) Close() {
	l.closeOnce.Do(func() {
		close(l.done)
		l.in.Close()
	})
	select {
	case <-l.exited:
	case <-time.After(2 * time.Second):
		l.kill()
	}
}

// kill ends ssh and what it started at once, and waits for it.
func (l *Link) kill() {
	l.closeOnce.Do(func() {
		close(l.done)
		l.in.Close()
	})
	select {
	case <-l.exited:
		return
	default:
	}
	if p := l.cmd.Process; p != nil {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
		_ = p.Kill()
	}
	<-l.exited
}

// Pid is ssh's process id.
func (l *Link) Pid() int { return l.cmd.Process.Pid }

// tail keeps the last bytes ssh wrote to stderr.
type tail struct {
	mu sync.Mutex
	b  []byte
}

const tailMax = 2048

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > tailMax {
		t.b = append(t.b[:0], t.b[len(t.b)-tailMax:]...)
	}
	return len(p), nil
}

// String is the tail on one line, printable, trimmed.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return printable(t.b)
}

// printable renders bytes from the other side for a message: control
// characters become spaces, at most 512 bytes, the last kept.
func printable(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return ' '
		}
		return r
	}, string(b))
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 512 {
		s = "..." + s[len(s)-509:]
	}
	return s
}
