package fixture

import "github.com/cbth-dev/cbth/engine/aggregate"

func as[T aggregate.State](st aggregate.State) T {
	t, _ := st.(T)
	return t
}

func notAState[T any](x any) T { return x.(T) }
