package inbox

import (
	"strings"
	"testing"
)

// decodeHead reads the header wherever it is and the first entry only.
func TestDecodeHead(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		ok        bool
		thread    string
	}{
		{"header first", `{"schema_version":1,"kind":"ready_threads","snapshot_revision":4,"bridge_thread_id":"B","created_at":"2026-11-21T10:00:00Z","entries":[{"source_thread_id":"S1"},{"source_thread_id":"S2"}]}`, true, "S1"},
		{"header last", `{"entries":[{"source_thread_id":"S1"},{"source_thread_id":"S2"}],"schema_version":1,"kind":"ready_threads","snapshot_revision":4,"bridge_thread_id":"B","created_at":"2026-11-21T10:00:00Z"}`, true, "S1"},
		{"no entries", `{"schema_version":1,"kind":"ready_threads","snapshot_revision":4,"bridge_thread_id":"B","created_at":"2026-11-21T10:00:00Z","entries":[]}`, false, ""},
		{"extra keys", `{"x":{"y":[1,2]},"schema_version":1,"kind":"ready_threads","snapshot_revision":4,"bridge_thread_id":"B","created_at":"2026-11-21T10:00:00Z","entries":[{"source_thread_id":"S1"}]}`, true, "S1"},
	} {
		var e ReadyEntry
		h, ok, err := decodeHead(strings.NewReader(c.doc), &e)
		if err != nil || ok != c.ok || e.SourceThreadID != c.thread || h.SchemaVersion != 1 || h.Kind != KindReadyThreads ||
			h.SnapshotRevision != 4 || h.BridgeThreadID != "B" || h.CreatedAt.IsZero() {
			t.Fatalf("%s: %+v %v %+v %v", c.name, h, ok, e, err)
		}
	}
	for _, bad := range []string{`[]`, `{"entries":{}}`, `{"schema_version":"one"}`, `{"entries":[{]}`} {
		if _, _, err := decodeHead(strings.NewReader(bad), nil); err == nil {
			t.Fatalf("%s: decoded", bad)
		}
	}
}
