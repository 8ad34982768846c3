package home

import (
	"time"

	"github.com/cbth-dev/cbth/internal/errs"
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
	// ArmLease is how long a bridge arm lease lasts (note-arm-pending);
	// the attempt's arm_pending_deadline is its deadline.
	ArmLease Duration `toml:"arm_lease"`
	// PauseNotBefore is how long after an arm the bridge may pause the
	// caller heartbeat (pause_not_before); PauseWindow how long after
	// that it must have (pause_deadline). Each at least 90 s.
	PauseNotBefore Duration `toml:"pause_not_before"`
	PauseWindow    Duration `toml:"pause_window"`
	// RecoveryInlineBytes is max_boundary_recovery_inline_bytes.
	RecoveryInlineBytes int64 `toml:"recovery_inline_bytes"`
	// RecoveryLease is how long an artifact recovery lease lasts.
	RecoveryLease Duration `toml:"recovery_lease"`
	// RelayMarkerTTL is how long an issued relay marker may be consumed.
	RelayMarkerTTL Duration `toml:"relay_marker_ttl"`
	// RelayScanInterval is how often the daemon reads the bound rollout
	// files.
	RelayScanInterval Duration `toml:"relay_scan_interval"`
	// QueueScanInterval is how often the daemon reads the rollout of the
	// thread a live validation of the queue transport waits on.
	QueueScanInterval Duration `toml:"queue_scan_interval"`
}

// MinPause is the seed's floor for both pause windows: one full caller
// heartbeat period (one minute) plus scheduler jitter.
const MinPause = 90 * time.Second

// DesktopDefaults are the built-in [desktop] settings: a bridge heartbeat
// wakes every minute, so a manifest confirmed every 30 s and fresh for
// 2 min survives one late confirmation.
func DesktopDefaults() Desktop {
	return Desktop{
		SnapshotInterval:    Duration{30 * time.Second},
		SnapshotMaxAge:      Duration{2 * time.Minute},
		SnapshotRetention:   Duration{2 * time.Minute},
		ArmLease:            Duration{5 * time.Minute},
		PauseNotBefore:      Duration{MinPause},
		PauseWindow:         Duration{MinPause},
		RecoveryInlineBytes: 64 << 10,
		RecoveryLease:       Duration{15 * time.Minute},
		RelayMarkerTTL:      Duration{6 * time.Hour},
		RelayScanInterval:   Duration{2 * time.Second},
		QueueScanInterval:   Duration{2 * time.Second},
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
	if d.PauseNotBefore.Duration < MinPause || d.PauseWindow.Duration < MinPause {
		return errs.New(errs.EINVAL, "[desktop] pause_not_before and pause_window must be at least %s", MinPause)
	}
	if d.ArmLease.Duration <= 0 || d.RecoveryLease.Duration <= 0 || d.RelayMarkerTTL.Duration <= 0 || d.RelayScanInterval.Duration <= 0 || d.QueueScanInterval.Duration <= 0 || d.RecoveryInlineBytes <= 0 {
		return errs.New(errs.EINVAL, "[desktop] arm_lease, recovery_lease, relay_marker_ttl, relay_scan_interval, queue_scan_interval and recovery_inline_bytes must be positive")
	}
	return nil
}
