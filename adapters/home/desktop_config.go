package home

import (
	"time"

	"github.com/cbth-dev/cbth/engine/errs"
)

// Desktop holds the Codex Desktop snapshot knobs ([desktop]).
type Desktop struct {
	// SnapshotInterval is how often a running daemon confirms the
	// published snapshot (rewrites the manifest's published_at) while a
	// bridge thread is selected, besides publishing on every change.
	SnapshotInterval Duration `toml:"snapshot_interval"`
	// SnapshotMaxAge is how long after a confirmation the manifest counts
	// as fresh for bridge-preflight's sandbox fallback (fresh_until).
	SnapshotMaxAge Duration `toml:"snapshot_max_age"`
	// SnapshotRetention is how long a superseded revision's files are
	// kept for readers that read the manifest before it changed.
	SnapshotRetention Duration `toml:"snapshot_retention"`
}

// DesktopDefaults are the built-in [desktop] settings: a bridge heartbeat
// wakes every minute, so a manifest confirmed every 30 s and fresh for
// 2 min survives one late confirmation.
func DesktopDefaults() Desktop {
	return Desktop{
		SnapshotInterval:  Duration{30 * time.Second},
		SnapshotMaxAge:    Duration{2 * time.Minute},
		SnapshotRetention: Duration{2 * time.Minute},
	}
}

// checkDesktop refuses [desktop] settings that cannot work: a manifest
// that goes stale before the daemon confirms it again would make every
// sandboxed preflight fail.
func checkDesktop(c Config) error {
	d := c.Desktop
	if d.SnapshotInterval.Duration <= 0 || d.SnapshotRetention.Duration <= 0 {
		return errs.New(errs.EINVAL, "[desktop] snapshot_interval and snapshot_retention must be positive")
	}
	if d.SnapshotMaxAge.Duration <= d.SnapshotInterval.Duration {
		return errs.New(errs.EINVAL, "[desktop] snapshot_max_age (%s) must be longer than snapshot_interval (%s)",
			d.SnapshotMaxAge.Duration, d.SnapshotInterval.Duration)
	}
	return nil
}
