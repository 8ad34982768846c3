package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine/query"
)

// spec/cli.md documents every JSON shape the commands print, in fenced
// blocks tagged `json shape=NAME`. In a shape, the string "$NAME" stands
// for the shape NAME, a key ending in "?" for one that may be left out,
// an object whose only key is "*" for a map with any keys, and an array's
// first element for every element. The test runs
// every command with --json and holds each output to its shape, both
// ways: no key the spec does not list, no key the spec lists missing
// (unless an enclosing value is null or empty).

var shapeFence = regexp.MustCompile("(?s)```json shape=([a-z0-9-]+)\n(.*?)```")

func loadShapes(t *testing.T) map[string]any { t.Helper(); return loadShapesFrom(t, "cli.md") }

// loadShapesFrom reads the shapes of one spec file.
func loadShapesFrom(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "spec", name))
	if err != nil {
		t.Fatal(err)
	}
	shapes := map[string]any{}
	for _, m := range shapeFence.FindAllStringSubmatch(string(b), -1) {
		var v any
		if err := json.Unmarshal([]byte(m[2]), &v); err != nil {
			t.Fatalf("spec/%s: shape %s is not JSON: %v", name, m[1], err)
		}
		if _, dup := shapes[m[1]]; dup {
			t.Fatalf("spec/%s: shape %s twice", name, m[1])
		}
		shapes[m[1]] = v
	}
	return shapes
}

// conform lists how actual departs from the spec shape.
func (c *shapeCheck) conform(spec, actual any, path string, out *[]string) {
	if ref, ok := spec.(string); ok && strings.HasPrefix(ref, "$") {
		s, ok := c.shapes[ref[1:]]
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: spec refers to an unknown shape %s", path, ref))
			return
		}
		if actual != nil {
			c.seen[ref[1:]] = true
		}
		c.conform(s, actual, path, out)
		return
	}
	if actual == nil || spec == nil {
		return // null stands for absent; a null in the spec for any value
	}
	switch s := spec.(type) {
	case map[string]any:
		a, ok := actual.(map[string]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: an object in the spec, %T printed", path, actual))
			return
		}
		if each, ok := s["*"]; ok && len(s) == 1 {
			for k, v := range a {
				c.conform(each, v, path+"."+k, out)
			}
			return
		}
		for k, v := range a {
			sv, ok := s[k]
			if !ok {
				sv, ok = s[k+"?"]
			}
			if !ok {
				*out = append(*out, fmt.Sprintf("%s.%s: printed but not in the spec", path, k))
				continue
			}
			c.conform(sv, v, path+"."+k, out)
		}
		for k := range s {
			if _, ok := a[k]; !ok && !strings.HasSuffix(k, "?") {
				*out = append(*out, fmt.Sprintf("%s.%s: in the spec but not printed", path, k))
			}
		}
	case []any:
		a, ok := actual.([]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: an array in the spec, %T printed", path, actual))
			return
		}
		if len(s) > 0 {
			for _, v := range a {
				c.conform(s[0], v, path+"[]", out)
			}
		}
	default:
		if fmt.Sprintf("%T", s) != fmt.Sprintf("%T", actual) {
			*out = append(*out, fmt.Sprintf("%s: a %T in the spec, a %T printed", path, s, actual))
		}
	}
}

type shapeCheck struct {
	t      *testing.T
	shapes map[string]any
	seen   map[string]bool
}

func (c *shapeCheck) doc(shape, what, out string) {
	c.t.Helper()
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		c.t.Errorf("%s: stdout is not one JSON document: %v\n%s", what, err, out)
		return
	}
	c.value(shape, what, v)
}

func (c *shapeCheck) lines(shape, what, out string) {
	c.t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		var v any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			c.t.Errorf("%s: line %d is not JSON: %v", what, n+1, err)
			return
		}
		c.value(shape, what, v)
		n++
	}
	if n == 0 {
		c.t.Errorf("%s printed no lines", what)
	}
}

func (c *shapeCheck) value(shape, what string, v any) {
	c.t.Helper()
	c.seen[shape] = true
	if dir := os.Getenv("CBTH_SPEC_DUMP"); dir != "" {
		// To see what the commands print when the spec needs updating.
		b, _ := json.MarshalIndent(v, "", "  ")
		os.WriteFile(filepath.Join(dir, shape+".json"), b, 0o600)
	}
	s, ok := c.shapes[shape]
	if !ok {
		c.t.Errorf("%s: spec/cli.md has no shape %s", what, shape)
		return
	}
	var problems []string
	c.conform(s, v, shape, &problems)
	sort.Strings(problems)
	for _, p := range problems {
		c.t.Errorf("%s: %s", what, p)
	}
}

// Every command's --json output has the shape spec/cli.md documents.
// watchOnce returns the first line cbth watch --json prints.
func watchOnce(t *testing.T, h *homeDir) string {
	t.Helper()
	c := h.cmd("watch", "--json")
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	c.Process.Signal(os.Interrupt)
	c.Wait()
	if err != nil {
		t.Fatalf("watch --json printed no line: %v", err)
	}
	return line
}

func TestJSONShapesMatchTheSpec(t *testing.T) {
	t.Parallel()
	c := &shapeCheck{t: t, shapes: loadShapes(t), seen: map[string]bool{}}
	h := deliveryHome(t, "max_wait_window = \"0s\"")
	out := func(args ...string) string {
		t.Helper()
		r := h.run(append(args, "--json")...)
		if r.code != 0 {
			t.Fatalf("cbth %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		return r.stdout
	}
	doc := func(shape string, args ...string) string {
		t.Helper()
		o := out(args...)
		c.doc(shape, strings.Join(args, " "), o)
		return o
	}
	var sub struct {
		JobID string `json:"job_id"`
	}
	json.Unmarshal([]byte(doc("job-submit", "job", "submit", "--target", "debug", "--thread-id", "T", "--task-kind", "ci", "--summary", "wait for CI")), &sub)
	result := filepath.Join(t.TempDir(), "result.json")
	os.WriteFile(result, []byte(`{"ci":"green"}`), 0o600)
	doc("job-transition", "job", "complete", "--job-id", sub.JobID, "--summary", "CI is green", "--result-file", result)
	doc("job-query", "job", "query", sub.JobID)
	doc("job-list", "job", "list")
	doc("wait", "wait", "--job-id", sub.JobID)
	var batches []struct {
		ID string `json:"batch_id"`
	}
	json.Unmarshal([]byte(doc("batch-list", "batch", "list", "--thread-id", "T")), &batches)
	doc("batch-inspect", "batch", "inspect", "--batch-id", batches[0].ID)
	doc("artifact-leases", "desktop", "issue-artifact-leases", "--batch-id", batches[0].ID)
	// That batch's artifact is small: no lease; one as the reply encodes it.
	lease, _ := json.Marshal(query.RecoveryLeaseView{})
	c.doc("artifact-lease", "a recovery lease as encoded", string(lease))
	now := fmt.Sprint(h.status().LogHeadSeq)
	doc("batch-inspect", "batch", "inspect", "--batch-id", batches[0].ID, "--seq", now)
	doc("job-query", "job", "query", sub.JobID, "--seq", now)
	c.lines("history-entry", "batch inspect --history", out("batch", "inspect", "--batch-id", batches[0].ID, "--history"))
	c.lines("thread-batch", "thread history", out("thread", "history", "--source-thread-id", "T"))
	var art struct {
		Artifact struct {
			ID string `json:"artifact_id"`
		} `json:"artifact"`
	}
	json.Unmarshal([]byte(out("job", "query", sub.JobID)), &art)
	doc("artifact-pin", "artifact", "pin", "--artifact-id", art.Artifact.ID, "--for", "1h")

	h.behave("S", "accept")
	h.ready("S")
	h.ready("S")
	var sb []struct {
		ID string `json:"batch_id"`
	}
	json.Unmarshal([]byte(out("batch", "list", "--thread-id", "S")), &sb)
	doc("batch-supersede", "batch", "supersede", "--batch-id", sb[0].ID, "--reason", "replaced")
	doc("debug-target", "debug", "target", "--thread-id", "U", "async")
	h.ready("U")
	doc("batch-inspect", "batch", "inspect-head", "--source-thread-id", "U")
	doc("debug-turn", "debug", "turn", "--thread-id", "U", "--event", "started")
	doc("debug-clock", "debug", "clock", "--advance", "1s")
	c.lines("watch", "watch --json", watchOnce(t, h))
	doc("daemon-status", "daemon", "status")

	r := h.run("--json", "task", "run", "--target", "debug", "--thread-id", "TK", "--", "sh", "-c", "echo task output")
	c.doc("task", "task run", r.stdout)
	var tk struct {
		TaskID string `json:"task_id"`
	}
	json.Unmarshal([]byte(r.stdout), &tk)
	waitFor(t, "the task to end", 30*time.Second, func() bool {
		return strings.Contains(out("task", "inspect", tk.TaskID), `"state": "exited"`)
	})
	doc("task", "task", "inspect", tk.TaskID)
	doc("task-output", "task", "output", tk.TaskID, "--from-line", "1")
	r = h.run("--json", "task", "run", "--target", "debug", "--thread-id", "TK", "--wake-on", "output", "--", "sh", "-c", "echo watched output")
	var wt struct {
		TaskID string `json:"task_id"`
	}
	json.Unmarshal([]byte(r.stdout), &wt)
	waitFor(t, "the watcher to end", 30*time.Second, func() bool {
		return strings.Contains(out("task", "inspect", wt.TaskID), `"state": "exited"`)
	})
	doc("task", "task", "inspect", wt.TaskID)
	doc("task-list", "task", "list")

	doc("gateway-route", "gateway", "route", "add", "--workspace", "w", "--agent", "a", "--to", "thread:GW", "--target", "debug")
	doc("gateway-route-list", "gateway", "route", "list")
	gw := h.run("gateway", "send", "--stream-id", "st", "--seq", "1", "--session-id", "s", "--workspace", "w", "--agent", "a",
		"--text", "hi", "--dedup-key", "k", "--message-id", "m", "--retry-count", "1", "--reason-code", "r", "--status-code", "x", "--error-code", "E")
	c.lines("gateway-envelope", "gateway send", gw.stdout)
	ssh := h.run("gateway", "send", "--channel", "ssh_remote", "--stream-id", "ssh", "--seq", "1", "--session-id", "s", "--event-type", "status",
		"--remote-mode", "ide_primary")
	c.lines("gateway-envelope", "gateway send", ssh.stdout)
	doc("gateway-route", "gateway", "route", "rm", "--workspace", "w", "--agent", "a")
	doc("task-logs", "task", "logs", tk.TaskID)
	c.lines("task-log-chunk", "task logs -f", out("task", "logs", "-f", tk.TaskID))
	r = h.run("--json", "task", "run", "--target", "debug", "--thread-id", "TK", "--", "sleep", "60")
	json.Unmarshal([]byte(r.stdout), &tk)
	doc("task-cancel", "task", "cancel", tk.TaskID)
	doc("doctor", "doctor")
	doc("batch-close-head", "batch", "close-head", "--source-thread-id", "U", "--reason", "operator_confirmed_delivery")
	other := h.submitTo("debug", "V")
	doc("job-transition", "job", "fail", "--job-id", other, "--reason", "runner lost")
	doc("job-transition", "job", "cancel", "--job-id", h.submitTo("debug", "V"))
	doc("events-verify", "events", "verify")
	doc("events-replay", "events", "replay", "--until", "12")
	c.lines("event", "events tail", out("events", "tail", "-n", "3"))
	doc("daemon-run", "daemon", "run", "--quiet")
	doc("version", "version")

	r = h.run("job", "query", "no-such-job", "--json")
	c.doc("error", "job query of an unknown job", r.stdout)
	doc("daemon-restart", "daemon", "restart")

	doc("daemon-stop", "daemon", "stop")
	doc("daemon-stop", "daemon", "stop")
	c.lines("event", "events export", out("events", "export"))
	doc("events-diff", "events", "diff", h.root, h.root)

	ctxRoot := filepath.Join(t.TempDir(), "ctx")
	runner := filepath.Join(t.TempDir(), "cortexfs-object-runner")
	if err := os.Symlink(cbthBin, runner); err != nil {
		t.Fatal(err)
	}
	doc("ctx-init", "ctx", "init", "--root", ctxRoot, "--runner", runner)
	h.env = append(h.env, "CTX_ROOT="+ctxRoot)
	doc("model", "model", "add", "openai/gpt-4o", "--driver", "openai-chat", "--id", "gpt-4o")
	doc("model-list", "model", "list")
	doc("model-alias", "model", "alias", "coder", "openai/gpt-4o")
	doc("model-rm", "model", "rm", "openai/gpt-4o")
	doc("install", "install", "--prefix", t.TempDir())
	out("daemon", "stop")
	doc("home-reinit", "home", "reinit")
	plain := newHome(t) // the demo's own daemon must not inherit the manual clock
	r = plain.run("demo", "--json")
	if r.code != 0 {
		t.Fatalf("demo: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	c.doc("demo", "demo", r.stdout)

	// cbth cli run and the session commands, on the fake codex (a real
	// Codex TUI needs a terminal: TestCLIRun_RealCodex runs it).
	cli := fakeCodexHome(t)
	for _, step := range []struct {
		shape string
		args  []string
	}{
		{"cli-run", []string{"cli", "run", "--bind-thread-id", "01a20a52-0ef8-7891-a797-cb8f3bedceb8", "--session-allows-network", "false"}},
		{"session-list", []string{"cli", "session", "list"}},
		{"session-inspect", []string{"cli", "session", "inspect", "--thread-id", "01a20a52-0ef8-7891-a797-cb8f3bedceb8"}},
	} {
		r := cli.run(append(step.args, "--json")...)
		if r.code != 0 {
			t.Fatalf("cbth %v: exit %d\n%s%s", step.args, r.code, r.stdout, r.stderr)
		}
		c.doc(step.shape, strings.Join(step.args, " "), r.stdout)
	}

	for name := range c.shapes {
		if !c.seen[name] {
			t.Errorf("spec/cli.md documents shape %s, which no command printed here", name)
		}
	}
}
