package command

import (
	"encoding/json"

	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// PolicyFlags are the delivery-policy flags of `cbth job submit`; nil means
// the flag was not given.
type PolicyFlags struct {
	ReadOnly            *bool `json:"read_only,omitempty"`
	RequiresApproval    *bool `json:"requires_approval,omitempty"`
	RequiresNetwork     *bool `json:"requires_network,omitempty"`
	RequiresWriteAccess *bool `json:"requires_write_access,omitempty"`
}

// NormalizePolicy merges the submit flags over metadata.delivery_policy and
// fills every field neither gave with the fail-closed default: not read
// only, requires approval, network and write access. Flags win over the
// metadata file.
func NormalizePolicy(flags PolicyFlags, metadata json.RawMessage) (events.DeliveryPolicy, error) {
	var meta struct {
		DeliveryPolicy *PolicyFlags `json:"delivery_policy"`
	}
	if len(metadata) > 0 {
		if err := json.Unmarshal(metadata, &meta); err != nil {
			return events.DeliveryPolicy{}, errs.Wrap(errs.EINVAL, err, "metadata delivery_policy")
		}
	}
	from := PolicyFlags{}
	if meta.DeliveryPolicy != nil {
		from = *meta.DeliveryPolicy
	}
	pick := func(flag, fromMeta *bool, def bool) bool {
		switch {
		case flag != nil:
			return *flag
		case fromMeta != nil:
			return *fromMeta
		default:
			return def
		}
	}
	d := events.FailClosedPolicy
	return events.DeliveryPolicy{
		ReadOnly:            pick(flags.ReadOnly, from.ReadOnly, d.ReadOnly),
		RequiresApproval:    pick(flags.RequiresApproval, from.RequiresApproval, d.RequiresApproval),
		RequiresNetwork:     pick(flags.RequiresNetwork, from.RequiresNetwork, d.RequiresNetwork),
		RequiresWriteAccess: pick(flags.RequiresWriteAccess, from.RequiresWriteAccess, d.RequiresWriteAccess),
	}, nil
}
