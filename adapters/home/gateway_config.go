package home

import (
	"sort"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
)

// GatewayRemote is one [gateway.remotes.NAME] table: another machine's
// cbth that routes to ssh:NAME reach through the user's own OpenSSH
// client (spec/channels.md, "ssh_remote over OpenSSH"). Nothing here is
// secret: keys, agents and known hosts stay ssh's.
type GatewayRemote struct {
	// Host is what ssh is given: an alias of ~/.ssh/config, a host name
	// or user@host.
	Host string `toml:"host"`
	// SSH is the ssh client to run: a name looked up on the daemon's
	// PATH, or a path.
	SSH string `toml:"ssh"`
	// SSHOptions go to ssh before the host (-p 2222, -i KEY, -o ...).
	SSHOptions []string `toml:"ssh_options"`
	// CBTH is how the remote shell runs cbth there: a path, or a command
	// prefix such as "CBTH_HOME=/srv/cbth /opt/bin/cbth". It is sent as
	// written; "gateway serve --stdio" is appended.
	CBTH string `toml:"cbth"`
	// ConnectTimeout bounds the connection and the handshake: ssh's
	// connect, its authentication and the remote cbth's hello.
	ConnectTimeout Duration `toml:"connect_timeout"`
	// StallTimeout is how long the link may say nothing (no answer, no
	// heartbeat) while an envelope waits, or how long a write to ssh may
	// block, before the link is given up as stalled.
	StallTimeout Duration `toml:"stall_timeout"`
	// IdleTimeout is how long an unused link stays open for the next
	// envelope.
	IdleTimeout Duration `toml:"idle_timeout"`
}

// The defaults of a [gateway.remotes.NAME] table.
const (
	DefaultRemoteSSH            = "ssh"
	DefaultRemoteCBTH           = "cbth"
	DefaultRemoteConnectTimeout = 30 * time.Second
	DefaultRemoteStallTimeout   = 30 * time.Second
	DefaultRemoteIdleTimeout    = time.Minute
)

// checkGateway fills in the defaults of each [gateway.remotes.NAME] and
// refuses what ssh could not be given, naming the table.
func (h Home) checkGateway(c *Config) error {
	names := make([]string, 0, len(c.Gateway.Remotes))
	for n := range c.Gateway.Remotes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r := c.Gateway.Remotes[n]
		where := h.Config() + ": [gateway.remotes." + n + "]"
		// NAME is written in routes (ssh:NAME): the rule of a CortexFS
		// name, which engine/command/gateway checks routes by too.
		if err := name.Valid(n); err != nil {
			return errs.Wrap(errs.EINVAL, err, "%s", where)
		}
		if r.SSH == "" {
			r.SSH = DefaultRemoteSSH
		}
		if r.CBTH == "" {
			r.CBTH = DefaultRemoteCBTH
		}
		for _, d := range []struct {
			v   *Duration
			def time.Duration
		}{{&r.ConnectTimeout, DefaultRemoteConnectTimeout}, {&r.StallTimeout, DefaultRemoteStallTimeout}, {&r.IdleTimeout, DefaultRemoteIdleTimeout}} {
			if d.v.Duration == 0 {
				d.v.Duration = d.def
			}
		}
		switch {
		case strings.TrimSpace(r.Host) == "":
			return errs.New(errs.EINVAL, "%s: host is required", where)
		case strings.HasPrefix(r.Host, "-") || strings.ContainsAny(r.Host, " \t\r\n\x00"):
			// ssh would read a leading '-' as an option: options go in
			// ssh_options, where they are meant.
			return errs.New(errs.EINVAL, "%s: host %q is not a host name (options go in ssh_options)", where, r.Host)
		case strings.ContainsAny(r.CBTH, "\r\n\x00"):
			return errs.New(errs.EINVAL, "%s: cbth must be one line", where)
		}
		for _, o := range r.SSHOptions {
			if strings.ContainsRune(o, 0) {
				return errs.New(errs.EINVAL, "%s: ssh_options holds a NUL byte", where)
			}
		}
		for _, d := range []struct {
			key string
			v   time.Duration
		}{{"connect_timeout", r.ConnectTimeout.Duration}, {"stall_timeout", r.StallTimeout.Duration}, {"idle_timeout", r.IdleTimeout.Duration}} {
			if d.v <= 0 || d.v > time.Hour {
				return errs.New(errs.EINVAL, "%s: %s must be positive and at most 1h, not %s", where, d.key, d.v)
			}
		}
		c.Gateway.Remotes[n] = r
	}
	return nil
}
