package fsm_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

var update = flag.Bool("update", false, "rewrite spec/fsm.md from the tables")

// Every (state, event) pair of every machine: the legal ones move to the
// table's target, every other one is rejected with ESTATE.
func TestMachines_EveryPair(t *testing.T) {
	ms := fsm.New()
	for _, tab := range fsm.Tables() {
		legal := tab.Legal()
		states := append([]string{fsm.None}, tab.States...)
		for _, from := range states {
			for _, ev := range tab.Events() {
				to, err := ms.Step(tab.Kind, from, ev)
				want, ok := legal[[2]string{from, ev}]
				if ok {
					if err != nil || to != want {
						t.Errorf("%s: %s from %s = (%s, %v), want %s", tab.Kind, ev, from, to, err, want)
					}
					continue
				}
				if !errors.Is(err, errs.Sentinel(errs.ESTATE)) {
					t.Errorf("%s: %s from %s = (%s, %v), want ESTATE", tab.Kind, ev, from, to, err)
				}
				if to != from {
					t.Errorf("%s: rejected %s from %s still moved to %s", tab.Kind, ev, from, to)
				}
			}
		}
	}
}

// The attempt machine allows exactly the seed's moves and nothing more.
func TestAttemptMovesAreTheSeedList(t *testing.T) {
	want := map[[2]string]bool{
		{"prepared", "arm_pending"}: true, {"arm_pending", "cooldown"}: true, {"cooldown", "closed"}: true,
		{"prepared", "accept_pending"}: true, {"accept_pending", "cooldown"}: true,
		{"accept_pending", "prepared"}: true, {"prepared", "abandoned"}: true, {"prepared", "superseded"}: true,
		{"accept_pending", "abandoned"}: true, {"accept_pending", "superseded"}: true,
		{"arm_pending", "abandoned"}: true, {"arm_pending", "superseded"}: true,
		{"cooldown", "abandoned"}: true, {"cooldown", "superseded"}: true,
		{fsm.None, "prepared"}: true,
	}
	got := map[[2]string]bool{}
	for _, tab := range fsm.Tables() {
		if tab.Kind != events.KindAttempt {
			continue
		}
		for pair, to := range tab.Legal() {
			if pair[0] != to {
				got[[2]string{pair[0], to}] = true
			}
		}
	}
	for e := range want {
		if !got[e] {
			t.Errorf("missing move %s -> %s", e[0], e[1])
		}
	}
	for e := range got {
		if !want[e] {
			t.Errorf("move %s -> %s is not in the seed's list", e[0], e[1])
		}
	}
}

// Every registered event type of a kind is an event of that kind's machine,
// and every machine event names a registered type.
func TestTablesCoverEveryEventType(t *testing.T) {
	for _, tab := range fsm.Tables() {
		inTable := map[string]bool{}
		for _, ev := range tab.Events() {
			base, _, _ := strings.Cut(ev, "/")
			inTable[base] = true
			if k, ok := events.KindOf(base); !ok || k != tab.Kind {
				t.Errorf("%s: machine event %s is not a registered %s event", tab.Kind, ev, tab.Kind)
			}
		}
		for _, typ := range events.TypesOf(tab.Kind) {
			if !inTable[typ] {
				t.Errorf("%s: event type %s has no row in the machine", tab.Kind, typ)
			}
		}
	}
}

// spec/fsm.md is generated from the tables and must match them.
func TestSpecMatchesTables(t *testing.T) {
	path := filepath.Join("..", "..", "spec", "fsm.md")
	want := fsm.Markdown()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v (run go test ./engine/fsm -update)", path, err)
	}
	if string(got) != want {
		t.Fatalf("%s is stale: run go test ./engine/fsm -update", path)
	}
}
