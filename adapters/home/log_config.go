package home

import (
	"time"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Gateway holds the channel gateway's bounds ([gateway]).
type Gateway struct {
	// WriteTimeout bounds one write to a gateway client: one that stops
	// reading has its connection closed then, instead of holding the
	// stream and a goroutine for good.
	WriteTimeout Duration `toml:"write_timeout"`
	// Remotes are the other machines' gateways routes reach over ssh,
	// by name ([gateway.remotes.NAME]).
	Remotes map[string]GatewayRemote `toml:"remotes"`
}

// Log holds the rotation of what the daemon writes outside the log
// proper ([log]): daemon.log, the Codex app-server logs and the task
// spool directory are rotated at start once past MaxBytes, keeping Keep
// older copies.
type Log struct {
	MaxBytes int64 `toml:"max_bytes"`
	Keep     int   `toml:"keep"`
}

// GatewayDefaults are the [gateway] defaults.
func GatewayDefaults() Gateway { return Gateway{WriteTimeout: Duration{30 * time.Second}} }

// LogDefaults are the [log] defaults.
func LogDefaults() Log { return Log{MaxBytes: 16 << 20, Keep: 3} }

// checkLog refuses bounds that make no sense, naming the key.
func (h Home) checkLog(c *Config) error {
	switch {
	case c.Gateway.WriteTimeout.Duration <= 0 || c.Gateway.WriteTimeout.Duration > time.Hour:
		return errs.New(errs.EINVAL, "%s: [gateway] write_timeout must be positive and at most 1h, not %s", h.Config(), c.Gateway.WriteTimeout.Duration)
	case c.Log.MaxBytes < 1:
		return errs.New(errs.EINVAL, "%s: [log] max_bytes must be at least 1, not %d", h.Config(), c.Log.MaxBytes)
	case c.Log.Keep < 0 || c.Log.Keep > 100:
		return errs.New(errs.EINVAL, "%s: [log] keep must be between 0 and 100, not %d", h.Config(), c.Log.Keep)
	}
	return h.checkGateway(c)
}
