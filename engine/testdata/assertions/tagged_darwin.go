//go:build darwin

package fixture

import "github.com/cbth-dev/cbth/engine/aggregate"

func tagged(st aggregate.State) string { return st.(*aggregate.Batch).ID }
