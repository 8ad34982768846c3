package cortexfs_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/cortexfs"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

func entry(k, v string) aggregate.Entry { return aggregate.Entry{Key: k, Value: []byte(v)} }

// SaveTree records only what changed: the first save initializes the
// tree and puts every entry; saving it again appends nothing; a changed
// runner, a changed, new or removed entry is one event each; a root or
// runner that is not a clean absolute path, or an entry without a key or
// value, is refused with nothing appended.
func TestSaveTreeRecordsTheDifference(t *testing.T) {
	e := enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{Clock: engine.NewManualClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)), NoSync: true})
	save := func(c cortexfs.SaveTree) (engine.Result, error) {
		return e.Execute(context.Background(), engine.Meta{Actor: events.ActorCLI}, c)
	}
	base := cortexfs.SaveTree{Root: "/ctx", Runner: "/bin/runner",
		Objects: []aggregate.Entry{entry("model/debug/echo", `{"a":1}`), entry("agent/coder", `{"b":1}`)},
		Aliases: []aggregate.Entry{entry("model/main", `{"t":"model/debug/echo"}`)}}
	types := func(res engine.Result) map[string]int {
		out := map[string]int{}
		for _, ev := range res.Events {
			out[ev.Type]++
		}
		return out
	}
	res, err := save(base)
	if err != nil || res.Outcome != command.OutcomeSaved || types(res)[events.TypeCtxTreeInitialized] != 1 ||
		types(res)[events.TypeCtxTreeObjectPut] != 2 || types(res)[events.TypeCtxTreeAliasPut] != 1 {
		t.Fatalf("the first save: %+v, %v", types(res), err)
	}
	if res, err := save(base); err != nil || res.Outcome != command.OutcomeUnchanged || len(res.Events) != 0 {
		t.Fatalf("the same again: %s %d events, %v", res.Outcome, len(res.Events), err)
	}
	next := base
	next.Runner = "/opt/runner"
	next.Objects = []aggregate.Entry{entry("model/debug/echo", `{"a":2}`), entry("tool/fs.read", `{"c":1}`)}
	next.Aliases = nil
	res, err = save(next)
	want := map[string]int{events.TypeCtxTreeInitialized: 1, events.TypeCtxTreeObjectPut: 2, events.TypeCtxTreeObjectRemoved: 1, events.TypeCtxTreeAliasRemoved: 1}
	if got := types(res); err != nil || len(got) != len(want) || got[events.TypeCtxTreeObjectPut] != 2 || got[events.TypeCtxTreeObjectRemoved] != 1 ||
		got[events.TypeCtxTreeAliasRemoved] != 1 || got[events.TypeCtxTreeInitialized] != 1 {
		t.Fatalf("the changes: %v, %v; want %v", got, err, want)
	}
	head := e.Head()
	for name, bad := range map[string]cortexfs.SaveTree{
		"a relative root":   {Root: "ctx", Runner: "/bin/runner"},
		"an unclean root":   {Root: "/ctx/../etc", Runner: "/bin/runner"},
		"a relative runner": {Root: "/ctx", Runner: "runner"},
		"an entry without a value": {Root: "/ctx", Runner: "/opt/runner",
			Objects: []aggregate.Entry{{Key: "model/x/y"}}},
	} {
		if _, err := save(bad); errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("%s: %v", name, err)
		}
	}
	if e.Head() != head {
		t.Fatal("a refused save appended")
	}
}
