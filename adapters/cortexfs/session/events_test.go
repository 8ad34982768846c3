package session

import (
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Events hands on only what comes after the cursor and LastSeq is the
// last event's sequence, in the file store and the memory one; a stored
// file event whose id is no sequence number is a corrupt store (ECORRUPT).
func TestEventsAfterAndLastSeq(t *testing.T) {
	for name, st := range map[string]Store{"files": &Files{Dir: t.TempDir()}, "memory": &Memory{}} {
		if err := st.Ensure("s", Open{}); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"e1", "e2", "e3"} {
			if err := st.AppendEvent("s", []byte(`{"type":"delta","id":"`+id+`","text":"x"}`+"\n")); err != nil {
				t.Fatal(err)
			}
		}
		var got []uint64
		err := st.Events("s", 1, func(seq uint64, _ stream.Event) error { got = append(got, seq); return nil })
		if err != nil || len(got) != 2 || got[0] != 2 || got[1] != 3 {
			t.Errorf("%s: events after 1: %v, %v; want [2 3]", name, got, err)
		}
		if last, err := st.LastSeq("s"); err != nil || last != 3 {
			t.Errorf("%s: last seq %d, %v; want 3", name, last, err)
		}
		if name == "memory" {
			continue // its events are the server's own; only a file can be damaged
		}
		if err := st.AppendEvent("s", []byte(`{"type":"delta","id":"x9"}`+"\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := st.LastSeq("s"); errs.CodeOf(err) != errs.ECORRUPT {
			t.Errorf("%s: an event id that is no sequence: %v, want ECORRUPT", name, err)
		}
	}
}
