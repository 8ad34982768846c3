package enginetest

import (
	"time"

	"github.com/cbth-dev/cbth/engine/command"
)

// DeliveryConfig is the delivery configuration the tests of the commands
// share (the core, engine/command, and its products): windows short
// enough that a test reaches each deadline by moving a manual clock,
// limits small enough that batches fill within a few jobs. One value, so
// that a product's tests decide against the same delivery as the core's.
func DeliveryConfig() command.DeliveryConfig {
	return command.DeliveryConfig{
		MaxJobsPerBatch: 3, MaxTotalBytes: 4096, MaxWaitWindow: 5 * time.Second, MinSendInterval: 10 * time.Second,
		Cooldown: 30 * time.Second, RedeliveryWindow: 10 * time.Minute, MaxDeliveryAttempts: 3,
		EligibleBackoff: 20 * time.Second, EligibleBackoffMax: 3 * time.Minute, EligibleBackoffJitter: 0.2,
		InlinePayloadLimit: 1024, ObservationWindow: 2 * time.Minute,
		MinArtifactTTL: time.Hour, PostCloseTTL: time.Hour,
	}
}
