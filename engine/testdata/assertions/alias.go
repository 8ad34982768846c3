package fixture

import agg "github.com/cbth-dev/cbth/engine/aggregate"

func aliased(st agg.State) *agg.Task {
	t, _ := st.(*agg.Task)
	return t
}
