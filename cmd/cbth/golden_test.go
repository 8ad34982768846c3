package main_test

import (
	"bytes"
	"flag"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

var updateGolden = flag.Bool("update", false, "TestGoldenScenarios: re-record the scenario logs of fixtures/logs and their projections")

// A golden scenario runs through the binary on a home of its own, on the
// manual clock (CBTH_TEST_CLOCK), and returns what makes its log
// machine-specific: the paths and values enginetest.Canon renames.
type goldenScenario struct {
	name string
	run  func(t *testing.T) (*homeDir, enginetest.Canon)
}

// The scenarios whose logs fixtures/logs keeps (issue 36, C1.15): each
// is recorded through the binary, made canonical and compared with the
// committed log, so a change in what any of these paths appends is seen
// here; the engine's TestGoldenLogsReplay replays each to its committed
// projections byte for byte. With -update the logs and projections are
// rewritten, and the test says which ones changed.
var goldenScenarios = []goldenScenario{
	{"cli-delivery", goldenCLIDelivery},
	{"desktop-handoff", goldenDesktopHandoff},
	{"task-run", goldenTaskRun},
	{"gateway-route", goldenGatewayRoute},
	{"mcp-calls", goldenMCPCalls},
	{"supersede", goldenSupersede},
	{"operator-close", goldenOperatorClose},
}

func TestGoldenScenarios(t *testing.T) {
	t.Parallel()
	for _, g := range goldenScenarios {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			h, canon := g.run(t)
			h.ok(nil, "daemon", "stop")
			r := h.run("events", "export")
			if r.code != 0 {
				t.Fatalf("events export: exit %d %s", r.code, r.stderr)
			}
			canon = canon.With(goldenCanon(h))
			// A path the daemon resolved (macOS's /var is /private/var)
			// is the same path.
			for _, p := range slices.Collect(maps.Keys(canon.Paths)) {
				if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
					canon.Paths[real] = canon.Paths[p]
				}
			}
			got, err := canon.Apply([]byte(r.stdout))
			if err != nil {
				t.Fatal(err)
			}
			logPath := filepath.Join("..", "..", "fixtures", "logs", g.name+".jsonl")
			projPath := filepath.Join("..", "..", "fixtures", "logs", g.name+".projections.json")
			want, _ := os.ReadFile(logPath)
			if !*updateGolden {
				if !bytes.Equal(got, want) {
					t.Fatalf("the %s scenario no longer records %s (%s); if the change is intended, run go test ./cmd/cbth -run TestGoldenScenarios -update",
						g.name, logPath, enginetest.FirstDifference(got, want))
				}
				return
			}
			tmp := filepath.Join(t.TempDir(), g.name+".jsonl")
			if err := os.WriteFile(tmp, got, 0o600); err != nil {
				t.Fatal(err)
			}
			proj, n := enginetest.Replay(t, tmp)
			oldProj, _ := os.ReadFile(projPath)
			for _, f := range []struct {
				path      string
				now, then []byte
			}{{logPath, got, want}, {projPath, proj, oldProj}} {
				if bytes.Equal(f.now, f.then) {
					t.Logf("%s: unchanged (%d events)", f.path, n)
					continue
				}
				if err := os.WriteFile(f.path, f.now, 0o644); err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: CHANGED (%d events; first difference: %s)", f.path, n, enginetest.FirstDifference(f.now, f.then))
			}
		})
	}
}

// goldenCanon is what every scenario's log needs renamed: the home's
// path; the barrier's correlation marker, drawn from the request id (an
// id renamed apart from it); the Desktop validation fingerprint, a digest
// of this machine's Codex install.
func goldenCanon(h *homeDir) enginetest.Canon {
	return enginetest.Canon{
		Paths: map[string]string{h.root: "/golden/home"},
		Values: map[string]*regexp.Regexp{
			"marker":      regexp.MustCompile(`"delivery_rpc_correlation_marker":"([^"]+)"`),
			"fingerprint": regexp.MustCompile(`"validation_fingerprint":"([^"]+)"`),
		},
	}
}

// goldenHome is a home on the manual clock whose batches go at once.
func goldenHome(t *testing.T) *homeDir {
	h := newHome(t, "CBTH_TEST_CLOCK="+testClock)
	h.config("[delivery]\nmax_wait_window = \"0s\"\nmin_send_interval = \"0s\"\ncooldown = \"30s\"\n")
	return h
}

// A result delivered into a `cbth cli run` session of the real pinned
// Codex: the shared app-server started, the session bound, the barrier,
// the accepted turn observed to its end, the batch closed delivered.
func goldenCLIDelivery(t *testing.T) (*homeDir, enginetest.Canon) {
	model := fakeprovider.Start(fakeprovider.Codex, "")
	t.Cleanup(model.Close)
	project := filepath.Join(t.TempDir(), "project")
	if err := os.Mkdir(project, 0o700); err != nil {
		t.Fatal(err)
	}
	r := &codexRig{codex: codextest.Binary(t), project: project, model: model}
	r.codexHome = codextest.TUIHome(t, model.BaseURL(), project)
	r.homeDir = newHome(t, "CBTH_TEST_CLOCK="+testClock)
	r.codexConfig(r.codex, r.codexHome, deliveryConfig)
	r.codexTop(`approval_policy = "never"` + "\n" + `sandbox_mode = "read-only"` + "\n")
	thread, tm := r.foreground("[mark:earlier]")
	r.complete(thread, "[mark:golden] the CI run passed")
	r.waitBatch(thread, "the batch to close delivered", closedDelivered)
	if code := tm.quit(); code != 0 {
		t.Fatalf("cbth cli run exited %d", code)
	}
	return r.homeDir, enginetest.Canon{
		Paths: map[string]string{r.codexHome: "/golden/codex-home", project: "/golden/project", r.codex: "/golden/bin/codex"},
		// The app-server's instance nonce is cbth's own random draw.
		Values: map[string]*regexp.Regexp{"nonce": regexp.MustCompile(`"nonce":"([0-9a-f]+)"`)},
		Fields: map[string]*regexp.Regexp{
			"pid":        regexp.MustCompile(`"pid":(\d+)`),
			"user-agent": regexp.MustCompile(`"user_agent":"([^"]*)"`),
		},
	}
}

// A Desktop hand-off: the installation validated, the thread bound, the
// bridge's preflight, the head armed through note-arm-pending and
// note-arm, and the caller crossing the continuation boundary, which
// closes the batch handoff_recorded.
func goldenDesktopHandoff(t *testing.T) (*homeDir, enginetest.Canon) {
	h := desktopHome(t)
	h.readyDesktop("S")
	r := h.claim().Ready
	if r == nil {
		t.Fatal("nothing ready for the bridge")
	}
	h.armReady(r, "wake-1")
	var c crossed
	h.ok(&c, crossArgs(r)...)
	if c.CloseReason != "handoff_recorded" {
		t.Fatalf("the crossing: %+v", c)
	}
	return h, enginetest.Canon{}
}

// A task run: `cbth task run` starts the command, its exit completes the
// job with its output as an artifact, and the debug target delivers it.
func goldenTaskRun(t *testing.T) (*homeDir, enginetest.Canon) {
	h := goldenHome(t)
	work := t.TempDir()
	run := h.taskRunArgs("--target", "debug", "--thread-id", "D", "--cwd", work, "--", "sh", "-c", "echo building; echo delivered")
	h.taskEnd(run.TaskID)
	waitFor(t, "the task's batch to be delivered", 30*time.Second, func() bool {
		v := h.task(run.TaskID)
		return v.Job.Batch != nil && v.Job.Batch.CloseReason == "delivered"
	})
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	return h, enginetest.Canon{
		Paths: map[string]string{work: "/golden/work", sh: "/bin/sh"},
		Fields: map[string]*regexp.Regexp{
			"pid":        regexp.MustCompile(`"pid":(\d+)`),
			"daemon-pid": regexp.MustCompile(`"daemon_pid":(\d+)`),
			"pid-start":  regexp.MustCompile(`"pid_start":"([^"]*)"`),
		},
	}
}

// A gateway route: a dialog envelope for workspace w + agent coder is
// routed into thread T-gw as a job, recorded without its text, and the
// job's result delivered to the thread.
func goldenGatewayRoute(t *testing.T) (*homeDir, enginetest.Canon) {
	h := goldenHome(t)
	h.ok(nil, "gateway", "route", "add", "--workspace", "w", "--agent", "coder", "--to", "thread:T-gw", "--target", "debug")
	env := `{"channel_type":"dialog","session_id":"s","stream_id":"st-1","seq":1,"timestamp":"2026-11-21T10:00:00Z",` +
		`"correlation_id":"conv-1","target":"cli","event_type":"message","workspace_id":"w","agent_id":"coder","payload":{"text":"the build is green"}}`
	c := h.cmd("gateway", "send")
	c.Stdin = strings.NewReader(env + "\n")
	out, err := c.Output()
	if err != nil {
		t.Fatalf("gateway send: %v\n%s", err, out)
	}
	a := last(parseGW(t, string(out)))
	if a.StatusCode != "routed" || a.Payload.JobID == "" {
		t.Fatalf("gateway answered %s", out)
	}
	h.ok(nil, "wait", "--job-id", a.Payload.JobID, "--timeout", "60s")
	return h, enginetest.Canon{}
}

// The agent's MCP tools: a job submitted for the calling thread, a
// task_run the policy refuses (recorded, nothing run), a job_submit
// naming another thread refused the same way.
func goldenMCPCalls(t *testing.T) (*homeDir, enginetest.Canon) {
	h := goldenHome(t)
	h.config("[delivery]\nmax_wait_window = \"0s\"\nmin_send_interval = \"0s\"\n\n[mcp]\ntask_allow = [[\"make\", \"test\"]]\n")
	work := t.TempDir()
	s := h.mcpSession(work)
	const thread = "01a2aaaa-0000-7000-8000-000000000001"
	meta := codexMeta(thread)
	if a := callTool(t, s, meta, "job_submit", map[string]any{"task_kind": "ci", "summary": "CI on #42", "idempotency_key": "ci-42"}); a.IsError {
		t.Fatalf("job_submit: %s", a.Text)
	}
	if a := callTool(t, s, meta, "task_run", map[string]any{"argv": []string{"make", "tests"}}); a.code() != "task_not_allowed" {
		t.Fatalf("task_run off the allow-list: %s", a.Text)
	}
	if a := callTool(t, s, meta, "job_submit", map[string]any{"task_kind": "ci", "summary": "x", "thread_id": "someone-else"}); a.code() != "thread_mismatch" {
		t.Fatalf("job_submit for another thread: %s", a.Text)
	}
	return h, enginetest.Canon{Paths: map[string]string{work: "/golden/work"}}
}

// A superseded batch: two results queued on a thread, the head superseded
// by the one behind it, which is delivered with both jobs.
func goldenSupersede(t *testing.T) (*homeDir, enginetest.Canon) {
	h := goldenHome(t)
	h.behave("T", "accept") // the head stays open, cooling down
	h.ready("T")
	h.ready("T")
	bs := h.batches("T")
	h.ok(nil, "batch", "supersede", "--batch-id", bs[0].ID, "--reason", "a newer CI run replaced it")
	h.behave("T", "deliver")
	h.advance("31s")
	if bs = h.batches("T"); bs[1].CloseReason != "delivered" || len(bs[1].JobIDs) != 2 {
		t.Fatalf("after the supersede: %+v", bs)
	}
	return h, enginetest.Canon{}
}

// An operator close: a delivery whose acceptance is unknown parks the
// batch, and the operator closes the parked head.
func goldenOperatorClose(t *testing.T) (*homeDir, enginetest.Canon) {
	h := goldenHome(t)
	h.behave("T", "unknown")
	h.ready("T")
	if bs := h.batches("T"); len(bs) != 1 || bs[0].Replay != "manual_resolution_only" {
		t.Fatalf("not parked: %+v", bs)
	}
	h.ok(nil, "batch", "close-head", "--source-thread-id", "T", "--reason", "operator_closed_unconfirmed")
	if bs := h.batches("T"); bs[0].CloseReason != "operator_closed_unconfirmed" {
		t.Fatalf("after the close: %+v", bs)
	}
	return h, enginetest.Canon{}
}
