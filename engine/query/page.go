package query

import (
	"encoding/json"
	"sort"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// PageBytes bounds the encoded items of one page of a listing, so that a
// page and the reply around it always fit in one socket frame (1 MiB;
// adapters/ipc.MaxFrame, checked by a test there). A page holds at most
// its limit of items and, after its first item, no more than PageBytes
// of them: one item alone is never split, so its own size is its bound.
const PageBytes = 512 << 10

// pager fills one page.
type pager[T any] struct {
	limit int
	size  int
	items []T
}

func newPager[T any](limit int) *pager[T] {
	return &pager[T]{limit: pageLimit(limit), items: []T{}}
}

// add appends v if the page has room for it and reports whether it did.
// Its size is measured as json.Marshal encodes it, which escapes at
// least as much as the frame encoder does, so the measure never falls
// short.
func (p *pager[T]) add(v T) bool {
	if len(p.items) == p.limit {
		return false
	}
	b, err := json.Marshal(v)
	n := len(b) + 1 // the comma
	if err == nil && len(p.items) > 0 && p.size+n > PageBytes {
		return false
	}
	p.size += n
	p.items = append(p.items, v)
	return true
}

// pageOf pages list, already in listing order, as views: the views that
// fit one page and, when some were left out, the cursor of the next page
// (the id of the last item shown).
func pageOf[S, V any](list []S, limit int, view func(S) V, id func(S) string) ([]V, string) {
	p := newPager[V](limit)
	for i, st := range list {
		if !p.add(view(st)) {
			return p.items, id(list[i-1])
		}
	}
	return p.items, ""
}

// listAfter lists the states of kind k that keep accepts in the order of
// seq (the log sequence each one is ordered by), starting after the one
// the cursor after names ("" for the first page). A cursor that names
// nothing is ENOENT; what names the kind in that message.
func listAfter[T aggregate.State](s engine.Snapshot, k events.Kind, what, after string, seq func(T) uint64, keep func(T) bool) ([]T, error) {
	var from uint64
	if after != "" {
		st, err := s.State(k, after)
		if err != nil {
			return nil, err
		}
		t, ok := st.(T)
		if !ok {
			return nil, errs.New(errs.ENOENT, "no %s %s to list after", what, after)
		}
		from = seq(t)
	}
	var list []T
	err := s.ForEach(k, func(st aggregate.State) error {
		if t := st.(T); seq(t) > from && keep(t) {
			list = append(list, t)
		}
		return nil
	})
	sort.Slice(list, func(i, j int) bool { return seq(list[i]) < seq(list[j]) })
	return list, err
}

// budget shares PageBytes among the lists of one reply (a batch
// inspection's attempts, artifacts and jobs).
type budget struct{ used int }

// fits reports whether v fits in what is left and, if it does, takes
// its room. The first item of a list always fits, so each list shows at
// least one.
func (b *budget) fits(v any, first bool) bool {
	buf, err := json.Marshal(v)
	n := len(buf) + 1
	if err == nil && !first && b.used+n > PageBytes {
		return false
	}
	b.used += n
	return true
}
