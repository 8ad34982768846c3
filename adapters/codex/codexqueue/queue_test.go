package codexqueue_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/codexqueue"
)

// fakeCodex writes an executable script standing in for codex: it
// records its arguments and CODEX_HOME in args, then runs body.
func fakeCodex(t *testing.T, body string) (bin, args string) {
	t.Helper()
	dir := t.TempDir()
	args = filepath.Join(dir, "args")
	bin = filepath.Join(dir, "codex")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" \"CODEX_HOME=$CODEX_HOME\" > " + args + "\n" + body + "\n"
	if err := os.WriteFile(bin, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return bin, args
}

// Each way `codex queue` can end is one outcome: the id Codex printed
// (after its warnings), a refusal with Codex's error line, no end in time,
// and a codex that cannot run. The command runs with the Codex home
// given, whatever CODEX_HOME the environment had, and never with --resume.
func TestAdd(t *testing.T) {
	for _, tc := range []struct {
		name     string
		body     string
		timeout  time.Duration
		missing  bool
		want     codexqueue.Outcome
		id       string
		inDetail string
	}{
		{name: "queued", body: `echo 'WARNING: proceeding, even though we could not create PATH aliases' >&2
echo 'Queued message 01a2-item for thread 01a2-thread.'`, want: codexqueue.Queued, id: "01a2-item"},
		{name: "queued, no id printed", body: "echo done", want: codexqueue.Queued, id: codexqueue.NotPrinted},
		{name: "refused", body: `echo 'WARNING: proceeding' >&2
echo "Error: failed to queue session message: no rollout found for thread id x (code -32603)" >&2
echo 'Stack backtrace:' >&2
exit 1`, want: codexqueue.Refused, inDetail: "Error: failed to queue session message"},
		{name: "no end in time", body: "exec sleep 5", timeout: 100 * time.Millisecond, want: codexqueue.Unknown, inDetail: "may be queued"},
		{name: "codex missing", missing: true, want: codexqueue.NotRun, inDetail: "codex_binary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin, args := fakeCodex(t, tc.body)
			if tc.missing {
				bin = filepath.Join(t.TempDir(), "no-codex")
			}
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			c := codexqueue.Command{Codex: bin, Env: []string{"PATH=" + os.Getenv("PATH"), "CODEX_HOME=/elsewhere"}, CodexHome: "/the/codex/home"}
			r := c.Add(ctx, "01a2-thread", "the result\nover two lines")
			if r.Outcome != tc.want || r.ItemID != tc.id || !strings.Contains(r.Detail, tc.inDetail) {
				t.Fatalf("Add = %+v; want %s, id %q, detail with %q", r, tc.want, tc.id, tc.inDetail)
			}
			if tc.missing {
				return
			}
			b, err := os.ReadFile(args)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b); got != "queue\n--thread\n01a2-thread\n--message\nthe result\nover two lines\nCODEX_HOME=/the/codex/home\n" {
				t.Fatalf("codex ran with %q", got)
			}
		})
	}
}
