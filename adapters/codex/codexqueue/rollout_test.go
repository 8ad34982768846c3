package codexqueue_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/codex/codexqueue"
	"github.com/cbth-dev/cbth/internal/errs"
)

// queuedRollout is a rollout in the shape the pinned Codex 0.169 writes
// (trimmed): a typed turn whose user message holds MARK-TYPED and whose
// answer echoes MARK-ECHOED, then a turn the queue triggered whose user
// message holds [MARK-QUEUED].
func queuedRollout(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "rollout-queued.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeRollout puts data at the rollout path of thread under a Codex
// home's sessions (or dir) and returns that path.
func writeRollout(t *testing.T, codexHome, dir, thread string, data []byte) string {
	t.Helper()
	d := filepath.Join(codexHome, dir, "2026", "11", "28")
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(d, "rollout-2026-11-28T19-06-41-"+thread+".jsonl")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A drain is the marker in the user message of a turn the queue
// triggered, after the offset the scan starts at; the same text typed by
// the user, echoed by the model, or before the offset is not one.
func TestDrainScan(t *testing.T) {
	data := queuedRollout(t)
	queuedAt := int64(strings.Index(string(data), `{"timestamp":"2026-11-28T19:06:42.659Z"`))
	for _, tc := range []struct {
		name   string
		marker string
		offset int64
		want   bool
	}{
		{"queued turn", "[MARK-QUEUED]", 0, true},
		{"queued turn, scan started just before it", "[MARK-QUEUED]", queuedAt, true},
		{"typed by the user", "MARK-TYPED", 0, false},
		{"only in the model's answer", "MARK-ECHOED", 0, false},
		{"scan started after the queued turn began", "[MARK-QUEUED]", queuedAt + 1 + int64(strings.Index(string(data[queuedAt:]), "\n")), false},
		{"never there", "MARK-ABSENT", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeRollout(t, t.TempDir(), "sessions", "th", data)
			d := &codexqueue.DrainScan{Path: p, Marker: tc.marker, Offset: tc.offset}
			got, err := d.Scan()
			if err != nil || got != tc.want {
				t.Fatalf("Scan = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// A scan repeated as the rollout grows reads only whole records, and
// sees the drain once the record holding it is complete; a rollout that
// shrank is refused.
func TestDrainScan_Incremental(t *testing.T) {
	data := queuedRollout(t)
	cut := strings.Index(string(data), "[MARK-QUEUED]") // inside the record
	p := writeRollout(t, t.TempDir(), "sessions", "th", data[:cut])
	d := &codexqueue.DrainScan{Path: p, Marker: "[MARK-QUEUED]"}
	if got, err := d.Scan(); got || err != nil {
		t.Fatalf("half-written record: %v, %v", got, err)
	}
	whole := d.Offset
	if whole == 0 || whole > int64(cut) || data[whole-1] != '\n' {
		t.Fatalf("the scan stopped at %d, not after the last whole record", whole)
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := d.Scan(); !got || err != nil {
		t.Fatalf("completed record: %v, %v", got, err)
	}
	if err := os.WriteFile(p, data[:10], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Scan(); errs.CodeOf(err) != errs.ESTALE {
		t.Fatalf("shrunk rollout: %v, want ESTALE", err)
	}
}

// A record longer than MaxRecord is read through unparsed: what it held
// is not seen, and the scan goes on after it.
func TestDrainScan_LongRecordSkipped(t *testing.T) {
	data := queuedRollout(t)
	at := strings.Index(string(data), `{"timestamp":"2026-11-28T19:06:42.681Z"`)
	long := `{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"[MARK-QUEUED]` +
		strings.Repeat("x", codexqueue.MaxRecord) + `"}],"internal_chat_message_metadata_passthrough":{"turn_id":"turn-queue"}}}` + "\n"
	withLong := string(data[:at]) + long
	p := writeRollout(t, t.TempDir(), "sessions", "th", []byte(withLong))
	d := &codexqueue.DrainScan{Path: p, Marker: "[MARK-QUEUED]"}
	if got, err := d.Scan(); got || err != nil || d.Offset != int64(len(withLong)) {
		t.Fatalf("over-long record: %v, %v, offset %d of %d", got, err, d.Offset, len(withLong))
	}
	if err := os.WriteFile(p, []byte(withLong+string(data[at:])), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := d.Scan(); !got || err != nil {
		t.Fatalf("after the long record: %v, %v", got, err)
	}
}

// FindRollout finds a thread's rollout in sessions or archived_sessions,
// answers ENOENT for a thread Codex does not know, refuses an id that
// would leave the Codex home and a rollout another user could write.
func TestFindRolloutAndSource(t *testing.T) {
	ch := t.TempDir()
	active := writeRollout(t, ch, "sessions", "01a2-active", queuedRollout(t))
	exec := strings.Replace(string(queuedRollout(t)), `"source":"vscode"`, `"source":"exec"`, 1)
	archived := writeRollout(t, ch, "archived_sessions", "01a2-exec", []byte(exec))
	sub := strings.Replace(string(queuedRollout(t)), `"source":"vscode"`, `"source":{"subagent":{"review":{}}}`, 1)
	writeRollout(t, ch, "sessions", "01a2-sub", []byte(sub))
	writeRollout(t, ch, "sessions", "01a2-bad", []byte(`{"type":"response_item"}`+"\n"))

	for _, tc := range []struct {
		thread, path, source string
		code                 errs.Code
	}{
		{thread: "01a2-active", path: active, source: "vscode"},
		{thread: "01a2-exec", path: archived, source: codexqueue.SourceExec},
		{thread: "01a2-sub", source: "subagent"},
		{thread: "01a2-bad", code: errs.ECORRUPT},
		{thread: "01a2-unknown", code: errs.ENOENT},
		{thread: "../01a2-active", code: errs.EINVAL},
		{thread: "", code: errs.EINVAL},
	} {
		p, err := codexqueue.FindRollout(ch, tc.thread)
		src := ""
		if err == nil {
			if tc.path != "" && p != tc.path {
				t.Errorf("%s: found %s, want %s", tc.thread, p, tc.path)
			}
			src, err = codexqueue.ThreadSource(p)
		}
		if errs.CodeOf(err) != tc.code || src != tc.source {
			t.Errorf("%s: source %q, %v; want %q, %s", tc.thread, src, err, tc.source, tc.code)
		}
	}

	if err := os.Chmod(active, 0o620); err != nil {
		t.Fatal(err)
	}
	if _, err := codexqueue.FindRollout(ch, "01a2-active"); errs.CodeOf(err) != errs.EACCES {
		t.Fatalf("a group-writable rollout: %v, want EACCES", err)
	}
	if _, err := (&codexqueue.DrainScan{Path: active, Marker: "x"}).Scan(); errs.CodeOf(err) != errs.EACCES {
		t.Fatalf("scanning a group-writable rollout: %v, want EACCES", err)
	}
}
