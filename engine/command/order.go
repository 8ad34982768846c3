package command

import (
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/index"
)

// FairOrder lists the threads whose head batch goes to target, in the
// canonical fair-ready order (first ready time, then thread id) rotated to
// start just after the target's durable cursor: the thread served last
// goes last. It reads only.
func FairOrder(r engine.Reader, target Target) ([]string, error) {
	heads, err := fairOrder(r, target, TargetCursorScope(target))
	return threadsOf(heads), err
}

// HeadRef is a head batch in the fair order: its thread and id.
type HeadRef struct {
	ThreadID string
	BatchID  string
}

// FairOrderHeads is FairOrder with each thread's head batch id.
func FairOrderHeads(r engine.Reader, target Target) ([]HeadRef, error) {
	return fairOrder(r, target, TargetCursorScope(target))
}

// FairOrderScoped is FairOrder with the cursor of scope instead of the
// target's own: the Desktop ready order of one bridge thread.
func FairOrderScoped(r engine.Reader, target Target, scope string) ([]string, error) {
	heads, err := fairOrder(r, target, scope)
	return threadsOf(heads), err
}

func threadsOf(heads []HeadRef) []string {
	out := make([]string, len(heads))
	for i, h := range heads {
		out[i] = h.ThreadID
	}
	return out
}

func fairOrder(r engine.Reader, target Target, scope string) ([]HeadRef, error) {
	type head struct {
		key string
		ref HeadRef
	}
	var heads []head
	for _, ref := range r.Scan(index.Head, index.HeadPrefix(target)) {
		if _, th, ok := index.ParseHead(ref.Key, target); ok {
			heads = append(heads, head{key: ref.Key, ref: HeadRef{ThreadID: th, BatchID: ref.ID}})
		}
	}
	var cursorKey string
	c, err := engine.Cursor(r, scope)
	if err != nil {
		return nil, err
	}
	if c != nil {
		cursorKey = index.HeadKey(target, c.ReadyAt, c.ThreadID)
	}
	// Heads arrive sorted by key; rotate past the cursor.
	split := 0
	for split < len(heads) && heads[split].key <= cursorKey {
		split++
	}
	out := make([]HeadRef, 0, len(heads))
	for _, h := range append(heads[split:], heads[:split]...) {
		out = append(out, h.ref)
	}
	return out, nil
}
