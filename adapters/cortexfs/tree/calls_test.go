package tree

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/internal/errs"
)

func readCtl(t *testing.T, root, rel, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel+".d", file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A model's .d/status and .d/log follow its calls: the state the last
// call left and a line per call (route, driver, outcome, code, duration,
// tokens; no content), bounded; a later Materialize keeps them.
func TestRecordCallStatusAndLog(t *testing.T) {
	root := t.TempDir()
	set := Set{Runner: runner, Objects: []object.Object{object.DebugEcho(), gpt4o()}}
	if err := Materialize(root, set); err != nil {
		t.Fatal(err)
	}
	if s, l := readCtl(t, root, "model/openai/gpt-4o", object.FileStatus), readCtl(t, root, "model/openai/gpt-4o", object.FileLog); s != "ready\n" || l != "" {
		t.Fatalf("before any call: status %q, log %q", s, l)
	}
	dir := filepath.Join(root, "model/openai/gpt-4o.d")
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	in, out := int64(12), int64(3)
	for _, tc := range []struct {
		call   Call
		status string
		line   string
	}{
		{Call{At: at, Run: "run-1", Via: "exec", Driver: "openai-chat", Duration: 1500 * time.Millisecond, InputTokens: &in, OutputTokens: &out},
			"ready\n", "2026-11-21T10:00:00Z run=run-1 via=exec driver=openai-chat status=ok ms=1500 input_tokens=12 output_tokens=3"},
		{Call{At: at.Add(time.Second), Via: "socket", Driver: "openai-chat", Code: errs.EHOSTDOWN},
			"failing code=EHOSTDOWN\n", "2026-11-21T10:00:01Z via=socket driver=openai-chat status=error code=EHOSTDOWN ms=0"},
		{Call{At: at.Add(2 * time.Second), Via: "agent", Code: errs.ENOTCONF},
			"unconfigured code=ENOTCONF\n", "2026-11-21T10:00:02Z via=agent status=error code=ENOTCONF ms=0"},
		{Call{At: at.Add(3 * time.Second), Via: "exec", Driver: "openai-chat", Cancelled: true},
			"ready\n", "2026-11-21T10:00:03Z via=exec driver=openai-chat status=cancelled ms=0"},
	} {
		if err := RecordCall(dir, tc.call); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(readCtl(t, root, "model/openai/gpt-4o", object.FileLog)), "\n")
		if got := readCtl(t, root, "model/openai/gpt-4o", object.FileStatus); got != tc.status || lines[len(lines)-1] != tc.line {
			t.Errorf("after %+v: status %q, last line %q; want %q, %q", tc.call, got, lines[len(lines)-1], tc.status, tc.line)
		}
	}
	// The tree rewritten (another object registered): the calls' files stay.
	if err := RecordCall(dir, Call{At: at, Via: "exec", Code: errs.EHOSTDOWN}); err != nil {
		t.Fatal(err)
	}
	logBefore := readCtl(t, root, "model/openai/gpt-4o", object.FileLog)
	if err := Materialize(root, set); err != nil {
		t.Fatal(err)
	}
	if s, l := readCtl(t, root, "model/openai/gpt-4o", object.FileStatus), readCtl(t, root, "model/openai/gpt-4o", object.FileLog); s != "failing code=EHOSTDOWN\n" || l != logBefore {
		t.Fatalf("Materialize overwrote the calls' files: status %q, log %q", s, l)
	}
	if _, err := Load(root); err != nil {
		t.Fatalf("a tree with a call log does not load: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, object.FileStatus)); err != nil || st.Mode().Perm() != FileMode {
		t.Fatalf("status mode: %v %v", st.Mode(), err)
	}
}

// Calls from many processes at once each leave their line, and the log
// stays bounded: past MaxLogBytes it is cut to the latest MaxLogLines.
func TestRecordCallConcurrentAndBounded(t *testing.T) {
	root := t.TempDir()
	if _, err := Init(root, runner); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "model/debug/echo.d")
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := RecordCall(dir, Call{At: time.Unix(int64(i), 0), Run: fmt.Sprintf("run-%d", i), Via: "exec", Driver: "debug"}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	log := readCtl(t, root, "model/debug/echo", object.FileLog)
	for i := range n {
		if strings.Count(log, fmt.Sprintf(" run=run-%d ", i)) != 1 {
			t.Fatalf("call %d is not in the log once:\n%s", i, log)
		}
	}
	for i := n; i < 2000; i++ {
		if err := RecordCall(dir, Call{At: time.Unix(int64(i), 0), Run: fmt.Sprintf("run-%d", i), Via: "exec", Driver: "debug"}); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(filepath.Join(dir, object.FileLog)); err != nil || st.Size() > MaxLogBytes+200 {
			t.Fatalf("after %d calls the log is %d bytes (%v)", i+1, st.Size(), err)
		}
	}
	lines := strings.Split(strings.TrimSpace(readCtl(t, root, "model/debug/echo", object.FileLog)), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, " run=run-1999 ") || len(lines) < MaxLogLines {
		t.Fatalf("%d lines, the last %q", len(lines), last)
	}
	for _, l := range snapshot(t, root) {
		if strings.Contains(l, ".tmp") {
			t.Errorf("leftover temp: %s", l)
		}
	}
}
