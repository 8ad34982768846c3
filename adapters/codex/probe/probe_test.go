package probe_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/probe"
	"github.com/cbth-dev/cbth/adapters/codex/supervisor"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/codextest"
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func runProbe(t *testing.T, codex string, sup *supervisor.Supervisor, inst *supervisor.Instance, schemaEnv []string, opts probe.Options) (*probe.Report, error) {
	t.Helper()
	s, err := probe.LoadSchema(ctxFor(t), codex, schemaEnv, t.TempDir())
	if err != nil {
		return nil, err
	}
	c, err := inst.Connect(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	opts.ClientInfo = codextest.ClientInfo
	return probe.Probe(ctxFor(t), c, s, opts)
}

// The pinned Codex passes: every required method (thread/turns/list for
// lookup), notification and turn status; turn/steer is there too.
func TestProbePassesOnPinnedCodex(t *testing.T) {
	r := codextest.StartRig(t)
	rep, err := runProbe(t, r.Codex, r.Sup, r.Inst, r.Sup.Env(), probe.Options{Steer: true})
	if err != nil {
		t.Fatalf("probe: %v (report %+v)", err, rep)
	}
	want := []string{appserver.MethodThreadResume, appserver.MethodTurnStart, appserver.MethodThreadTurnsList, appserver.MethodTurnSteer}
	if !slices.Equal(rep.Methods, want) || rep.Lookup != appserver.MethodThreadTurnsList || !rep.Steer {
		t.Errorf("methods %v lookup %q steer %v; want %v, thread/turns/list, true", rep.Methods, rep.Lookup, rep.Steer, want)
	}
	if len(rep.Notifications) != 4 || rep.Version != codextest.Version || len(rep.Missing) != 0 {
		t.Errorf("report %+v", rep)
	}
	// 0.169 declares no "replaced" turn status (spec/codex-cli.md).
	if slices.Contains(rep.TurnStatuses, "replaced") || !slices.Contains(rep.TurnStatuses, appserver.TurnFailed) {
		t.Errorf("turn statuses %v", rep.TurnStatuses)
	}
}

// A fake codex missing one thing the delivery needs fails the probe with
// ENOTSUP (exit 69) naming it; with turn/turns/list alone missing it
// passes on thread/read.
func TestProbeFailsClosedOnFakeCodex(t *testing.T) {
	fake := codextest.FakeCodex(t)
	for _, tc := range []struct {
		name    string
		env     []string // for the app-server
		schema  []string // for the schema generator, beside env
		opts    probe.Options
		missing string // "" = the probe passes
		lookup  string
	}{
		{name: "complete", lookup: appserver.MethodThreadTurnsList},
		{name: "no turn/start", env: []string{"FAKECODEX_DROP=turn/start"}, missing: "turn/start"},
		{name: "no thread/resume", env: []string{"FAKECODEX_DROP=thread/resume"}, missing: "thread/resume"},
		{name: "listed but not served", env: []string{"FAKECODEX_DROP_SERVER=turn/start"}, missing: "turn/start"},
		{name: "served but not listed", env: []string{"FAKECODEX_DROP_SCHEMA=thread/resume"}, missing: "thread/resume"},
		{name: "read fallback", env: []string{"FAKECODEX_DROP=thread/turns/list"}, lookup: appserver.MethodThreadRead},
		{name: "no turn lookup", env: []string{"FAKECODEX_DROP=thread/turns/list,thread/read"}, missing: "thread/turns/list or thread/read"},
		{name: "no turn/completed", env: []string{"FAKECODEX_DROP=turn/completed"}, missing: "notification turn/completed"},
		{name: "no turn/started", env: []string{"FAKECODEX_DROP=turn/started"}, missing: "notification turn/started"},
		{name: "no thread/status/changed", env: []string{"FAKECODEX_DROP=thread/status/changed"}, missing: "notification thread/status/changed"},
		{name: "no failed status", env: []string{"FAKECODEX_DROP=status:failed"}, missing: "turn status failed"},
		{name: "no interrupted status", env: []string{"FAKECODEX_DROP=status:interrupted"}, missing: "turn status interrupted"},
		{name: "steer needed, absent", env: []string{"FAKECODEX_DROP=turn/steer"}, opts: probe.Options{Steer: true}, missing: "turn/steer"},
		{name: "steer absent, not needed", env: []string{"FAKECODEX_DROP=turn/steer"}, lookup: appserver.MethodThreadTurnsList},
		{name: "schema of another version", schema: []string{"FAKECODEX_VERSION=0.170.0"}, missing: "version 0.170.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			env := append(os.Environ(), tc.env...)
			r := codextest.StartWith(t, supervisor.Config{
				Codex: fake, CodexHome: dir, Dir: filepath.Join(dir, "run"), Env: env,
				ClientInfo: codextest.ClientInfo, Clock: engine.SystemClock{},
			}, "")
			rep, err := runProbe(t, fake, r.Sup, r.Inst, append(r.Sup.Env(), tc.schema...), tc.opts)
			if tc.missing == "" {
				if err != nil {
					t.Fatalf("probe: %v", err)
				}
				if rep.Lookup != tc.lookup {
					t.Errorf("lookup %q, want %q", rep.Lookup, tc.lookup)
				}
				return
			}
			if errs.CodeOf(err) != errs.ENOTSUP || errs.CodeOf(err).ExitCode() != 69 {
				t.Fatalf("probe: %v (%s), want ENOTSUP", err, errs.CodeOf(err))
			}
			if rep == nil || len(rep.Missing) != 1 || !strings.HasPrefix(rep.Missing[0], tc.missing) || !strings.Contains(err.Error(), tc.missing) {
				t.Errorf("report %+v, error %v: want exactly %q missing", rep, err, tc.missing)
			}
		})
	}
}

// An executable that cannot describe its app-server proves nothing:
// ENOTSUP. One that does not exist is not configured: ENOTCONF.
func TestLoadSchemaFailures(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "codex")
	if err := os.WriteFile(old, []byte("#!/bin/sh\n[ \"$1\" = --version ] && echo 'codex-cli 0.100.0' && exit 0\necho 'unknown subcommand' >&2\nexit 2\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := probe.LoadSchema(ctxFor(t), old, nil, dir); errs.CodeOf(err) != errs.ENOTSUP {
		t.Errorf("codex without generate-json-schema: %v, want ENOTSUP", err)
	}
	if _, err := probe.LoadSchema(ctxFor(t), filepath.Join(dir, "absent"), nil, dir); errs.CodeOf(err) != errs.ENOTCONF {
		t.Errorf("absent codex: %v, want ENOTCONF", err)
	}
}

// A schema load cut short ends the whole process group it started, a
// wrapper's child included, and returns at once.
func TestLoadSchemaCancelledEndsTheGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	script := filepath.Join(dir, "codex")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho $$ > "+pidFile+"\nsleep 300\nexit 0\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	guard := ctxFor(t)
	ctx, cancel := context.WithCancel(guard)
	done := make(chan error, 1)
	go func() {
		_, err := probe.LoadSchema(ctx, script, nil, dir)
		done <- err
	}()
	var pid int
	for pid == 0 {
		if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			continue
		}
		select {
		case <-guard.Done():
			t.Fatal("the stand-in never ran")
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a cancelled schema load succeeded")
		}
	case <-guard.Done():
		t.Fatal("a cancelled schema load waits for the wrapper's child")
	}
	codextest.GroupGone(t, pid)
}
