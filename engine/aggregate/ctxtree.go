package aggregate

import (
	"sort"

	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
)

// Entry is one keyed registration of a tree.
type Entry struct {
	Key   string         `json:"key"`
	Value events.RawJSON `json:"value"`
}

// CtxTree is a CortexFS object tree's registrations, sorted by key.
type CtxTree struct {
	Header[fsm.CtxTreeState]
	Runner  string  `json:"runner"`
	Objects []Entry `json:"objects"`
	Aliases []Entry `json:"aliases"`
}

func (t *CtxTree) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.CtxTreeInitialized:
		t.Runner = p.Runner
	case *events.CtxTreeObjectPut:
		t.Objects = putEntry(t.Objects, Entry{p.Rel, p.Object})
	case *events.CtxTreeObjectRemoved:
		t.Objects = dropEntry(t.Objects, p.Rel)
	case *events.CtxTreeAliasPut:
		t.Aliases = putEntry(t.Aliases, Entry{p.Path, p.Alias})
	case *events.CtxTreeAliasRemoved:
		t.Aliases = dropEntry(t.Aliases, p.Path)
	}
}

func putEntry(list []Entry, e Entry) []Entry {
	out := dropEntry(list, e.Key)
	i := sort.Search(len(out), func(i int) bool { return out[i].Key >= e.Key })
	out = append(out, Entry{})
	copy(out[i+1:], out[i:])
	out[i] = e
	return out
}

func dropEntry(list []Entry, key string) []Entry {
	out := make([]Entry, 0, len(list))
	for _, x := range list {
		if x.Key != key {
			out = append(out, x)
		}
	}
	return out
}
