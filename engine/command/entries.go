package command

import (
	"bytes"

	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/events"
)

// DiffEntries compares registrations with the wanted ones: put gets each
// entry that is new or changed, remove each key that went.
func DiffEntries(have, want []aggregate.Entry, put func(aggregate.Entry), remove func(string)) {
	old := map[string]events.RawJSON{}
	for _, e := range have {
		old[e.Key] = e.Value
	}
	seen := map[string]bool{}
	for _, e := range want {
		seen[e.Key] = true
		if v, ok := old[e.Key]; !ok || !bytes.Equal(v, e.Value) {
			put(e)
		}
	}
	for _, e := range have {
		if !seen[e.Key] {
			remove(e.Key)
		}
	}
}
