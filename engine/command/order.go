package command

import (
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
)

// FairOrder lists the threads whose head batch goes to target, in the
// canonical fair-ready order (first ready time, then thread id) rotated to
// start just after the target's durable cursor: the thread served last
// goes last. It reads only.
func FairOrder(r engine.Reader, target string) ([]string, error) {
	return fairOrder(r, target, target)
}

func fairOrder(r engine.Reader, target, scope string) ([]string, error) {
	type head struct{ key, thread string }
	var heads []head
	for _, ref := range r.Scan(index.Head, index.HeadPrefix(target)) {
		if _, th, ok := index.ParseHead(ref.Key, target); ok {
			heads = append(heads, head{key: ref.Key, thread: th})
		}
	}
	var cursorKey string
	s, err := r.State(events.KindCursor, scope)
	if err != nil {
		return nil, err
	}
	if c, ok := s.(*aggregate.Cursor); ok {
		cursorKey = index.HeadKey(target, c.ReadyAt, c.ThreadID)
	}
	// Heads arrive sorted by key; rotate past the cursor.
	split := 0
	for split < len(heads) && heads[split].key <= cursorKey {
		split++
	}
	out := make([]string, 0, len(heads))
	for _, h := range append(heads[split:], heads[:split]...) {
		out = append(out, h.thread)
	}
	return out, nil
}
