package fixture

import (
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/events"
)

func plain(r interface {
	State(events.Kind, string) (aggregate.State, error)
}) *aggregate.Job {
	st, _ := r.State(events.KindJob, "j")
	j, _ := st.(*aggregate.Job)
	return j
}
