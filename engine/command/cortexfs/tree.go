// Package cortexfs holds the CortexFS product's commands: the ctx tree's
// registrations. It stands on the core (engine/command), never the other way.
package cortexfs

import (
	"path/filepath"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// SaveTree records the wanted content of a CortexFS tree as the changes
// from its current registrations: one event per object or alias that
// appeared, changed or went. Saving what is already there appends nothing.
type SaveTree struct {
	Root    string
	Runner  string
	Objects []aggregate.Entry
	Aliases []aggregate.Entry
}

// Decide implements engine.Decider.
func (c SaveTree) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if !filepath.IsAbs(c.Root) || filepath.Clean(c.Root) != c.Root {
		return engine.Decision{}, errs.New(errs.EINVAL, "tree root %q must be a clean absolute path", c.Root)
	}
	if !filepath.IsAbs(c.Runner) {
		return engine.Decision{}, errs.New(errs.EINVAL, "runner %q must be an absolute path", c.Runner)
	}
	sid := events.StreamID{Kind: events.KindCtxTree, ID: c.Root}
	old, err := engine.CtxTree(v, c.Root)
	if err != nil {
		return engine.Decision{}, err
	}
	cur := old
	if cur == nil {
		cur = &aggregate.CtxTree{}
	}
	var emits []engine.Emit
	if old == nil || cur.Runner != c.Runner {
		emits = append(emits, engine.Emit{Stream: sid, Payload: &events.CtxTreeInitialized{Runner: c.Runner}})
	}
	put := func(p events.Payload) { emits = append(emits, engine.Emit{Stream: sid, Payload: p}) }
	command.DiffEntries(cur.Objects, c.Objects,
		func(e aggregate.Entry) { put(&events.CtxTreeObjectPut{Rel: e.Key, Object: e.Value}) },
		func(k string) { put(&events.CtxTreeObjectRemoved{Rel: k}) })
	command.DiffEntries(cur.Aliases, c.Aliases,
		func(e aggregate.Entry) { put(&events.CtxTreeAliasPut{Path: e.Key, Alias: e.Value}) },
		func(k string) { put(&events.CtxTreeAliasRemoved{Path: k}) })
	for _, e := range append(append([]aggregate.Entry(nil), c.Objects...), c.Aliases...) {
		if e.Key == "" || len(e.Value) == 0 {
			return engine.Decision{}, errs.New(errs.EINVAL, "tree entry without a key or a value")
		}
	}
	if len(emits) == 0 {
		return engine.Decision{Outcome: command.OutcomeUnchanged}, nil
	}
	return engine.Decision{Outcome: command.OutcomeSaved, Emits: emits}, nil
}
