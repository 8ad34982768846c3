package fixture

import "github.com/cbth-dev/cbth/engine/aggregate"

// Tests may look at a state as its type: the rule is for product code.
func inTest(st aggregate.State) *aggregate.Job { return st.(*aggregate.Job) }
