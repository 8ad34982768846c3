package fixture

import "github.com/cbth-dev/cbth/engine/aggregate"

func kindOf(st aggregate.State) string {
	switch v := st.(type) {
	case *aggregate.Attempt:
		return v.ID
	case *aggregate.Binding, nil:
		return ""
	}
	return ""
}
