package home

import "github.com/cbth-dev/cbth/internal/errs"

// checkDelivery refuses delivery settings the daemon cannot honour.
func checkDelivery(c Config) error {
	// The daemon must stay up for as long as it observes an accepted
	// turn, and it leaves after idle_timeout: a window no longer than
	// the idle timeout would let the keep-alive rule and the observation
	// deadline disagree about who ends the wait.
	if c.Delivery.ObservationWindow.Duration <= c.IdleTimeout.Duration {
		return errs.New(errs.EINVAL, "[delivery] observation_window (%s) must be longer than idle_timeout (%s)",
			c.Delivery.ObservationWindow.Duration, c.IdleTimeout.Duration)
	}
	if c.Delivery.Workers < 1 {
		return errs.New(errs.EINVAL, "[delivery] workers must be at least 1")
	}
	if c.JobTimeout.Duration < 0 {
		return errs.New(errs.EINVAL, "job_timeout must not be negative (0 turns it off)")
	}
	return checkDesktop(c)
}
