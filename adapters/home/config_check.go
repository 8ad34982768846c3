package home

import (
	"time"

	"github.com/cbth-dev/cbth/internal/errs"
)

// checkValues refuses settings that parse but make no sense: a zero
// sweep interval or redelivery window, a negative time span, a batch of
// no jobs. Each error names the file and the key.
func (h Home) checkValues(c Config) error {
	d := c.Delivery
	for _, s := range []struct {
		key      string
		v        time.Duration
		positive bool
	}{
		{"idle_timeout", c.IdleTimeout.Duration, true},
		{"min_artifact_ttl", c.MinArtifactTTL.Duration, false},
		{"post_close_ttl", c.PostCloseTTL.Duration, false},
		{"orphan_grace", c.OrphanGrace.Duration, false},
		{"[delivery] max_wait_window", d.MaxWaitWindow.Duration, false},
		{"[delivery] min_send_interval", d.MinSendInterval.Duration, false},
		{"[delivery] cooldown", d.Cooldown.Duration, true},
		{"[delivery] redelivery_window", d.RedeliveryWindow.Duration, true},
		{"[delivery] eligible_backoff", d.EligibleBackoff.Duration, true},
		{"[delivery] observation_window", d.ObservationWindow.Duration, true},
		{"[delivery] sweep_interval", d.SweepInterval.Duration, true},
		{"[delivery] delivery_timeout", d.DeliveryTimeout.Duration, true},
	} {
		if s.positive && s.v <= 0 {
			return errs.New(errs.EINVAL, "%s: %s must be positive, not %s", h.Config(), s.key, s.v)
		}
		if s.v < 0 {
			return errs.New(errs.EINVAL, "%s: %s must not be negative, not %s", h.Config(), s.key, s.v)
		}
	}
	for _, s := range []struct {
		key string
		v   int64
		min int64
	}{
		{"max_result_bytes", c.MaxResultBytes, 1},
		{"[delivery] max_jobs_per_batch", int64(d.MaxJobsPerBatch), 1},
		{"[delivery] max_total_bytes", d.MaxTotalBytes, 1},
		{"[delivery] max_delivery_attempts", int64(d.MaxDeliveryAttempts), 1},
		{"[delivery] inline_payload_limit", d.InlinePayloadLimit, 0},
	} {
		if s.v < s.min {
			return errs.New(errs.EINVAL, "%s: %s must be at least %d, not %d", h.Config(), s.key, s.min, s.v)
		}
	}
	if d.EligibleBackoffMax.Duration < d.EligibleBackoff.Duration {
		return errs.New(errs.EINVAL, "%s: [delivery] eligible_backoff_max (%s) must be at least eligible_backoff (%s)",
			h.Config(), d.EligibleBackoffMax.Duration, d.EligibleBackoff.Duration)
	}
	// NaN fails both comparisons, so it is refused too.
	if !(d.EligibleBackoffJitter >= 0 && d.EligibleBackoffJitter < 1) {
		return errs.New(errs.EINVAL, "%s: [delivery] eligible_backoff_jitter must be at least 0 and less than 1, not %v", h.Config(), d.EligibleBackoffJitter)
	}
	if len(c.ParkHook) > 0 && c.ParkHook[0] == "" {
		return errs.New(errs.EINVAL, "%s: park_hook names no command", h.Config())
	}
	return nil
}
