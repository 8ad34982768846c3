package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cbth-dev/cbth/adapters/cortexfs/runner"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
)

// DemoCmd is `cbth demo`: the main job end to end in a private temporary
// home, on the embedded default (bbolt log, built-in debug target).
type DemoCmd struct {
	Keep bool `help:"Keep the temporary home afterwards and print its path."`
}

// demoReport is what `cbth demo --json` prints.
type demoReport struct {
	Home          string          `json:"home"`
	DaemonPID     int             `json:"daemon_pid"`
	Jobs          []query.JobView `json:"jobs"`
	Deduplicated  bool            `json:"dedupe_returned_original"`
	RejectedCode  string          `json:"rejected_code"`
	Events        int             `json:"events"`
	EventTypes    map[string]int  `json:"event_types"`
	Verified      bool            `json:"verified"`
	ArtifactFiles []string        `json:"artifact_files"`
	Steps         []string        `json:"steps"`
	Kept          bool            `json:"kept"`
	Delivered     bool            `json:"delivered"`
	Echo          string          `json:"echo_jsonl"`
}

// Run runs the demo.
func (c *DemoCmd) Run(env *Env) error {
	tmp, err := os.MkdirTemp("", "cbth-demo-")
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "temporary directory")
	}
	h := home.Home{Root: filepath.Join(tmp, "home")}
	denv := &Env{Stdout: io.Discard, Stderr: env.Stderr, Getenv: env.Getenv, HomeFlag: h.Root}
	rep := demoReport{Home: h.Root, EventTypes: map[string]int{}, Kept: c.Keep}
	say := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		rep.Steps = append(rep.Steps, line)
		if !env.JSON {
			fmt.Fprintln(env.Stdout, line)
		}
	}
	defer func() {
		_, _ = call(denv, api.DaemonStop, api.Empty{})
		if !c.Keep {
			os.RemoveAll(tmp)
		}
	}()

	if err := h.Ensure(); err != nil {
		return err
	}
	// A short merge window so the demo's batch goes out within a second.
	if err := os.WriteFile(h.Config(), []byte("[delivery]\nmax_wait_window = \"300ms\"\nsweep_interval = \"50ms\"\n"), 0o600); err != nil {
		return err
	}
	say("1. A private home at %s (mode 0700); the first command starts the daemon there.", h.Root)
	submit := func(thread, kind, summary, dedupe string) (api.SubmitReply, error) {
		return call(denv, api.JobSubmit, api.SubmitArgs{TargetKind: command.TargetDebug, SourceThreadID: thread, TaskKind: kind, TaskSummary: summary, DedupeKey: dedupe})
	}
	ci, err := submit("thread-demo", "ci", "wait for CI on pull request 42", "")
	if err != nil {
		return err
	}
	st, err := call(denv, api.DaemonStatus, api.Empty{})
	if err != nil {
		return err
	}
	rep.DaemonPID = st.PID
	say("2. Submitted job %s (ci) to thread-demo; daemon pid %d started on demand.", ci.JobID, st.PID)
	review, err := submit("thread-demo", "review", "wait for a reviewer", "review-pr-42")
	if err != nil {
		return err
	}
	again, err := submit("thread-demo", "review", "wait for a reviewer (retried)", "review-pr-42")
	if err != nil {
		return err
	}
	rep.Deduplicated = again.JobID == review.JobID && again.Deduplicated
	say("3. Submitted job %s (review) with dedupe key review-pr-42; submitting the key again returned the same job: %t.", review.JobID, rep.Deduplicated)
	flaky, err := submit("thread-other", "build", "nightly build", "")
	if err != nil {
		return err
	}

	result := filepath.Join(tmp, "ci-result.json")
	if err := os.WriteFile(result, []byte(`{"checks":"green","duration_s":431}`+"\n"), 0o600); err != nil {
		return err
	}
	done, err := call(denv, api.JobComplete, api.CompleteArgs{JobID: ci.JobID, ResultSummary: "CI is green", ResultFile: result})
	if err != nil {
		return err
	}
	os.Remove(result)
	say("4. Completed the ci job with a result file, then deleted that file: cbth holds its own copy,")
	say("   artifact %s (%s, sha256 %s…) at %s.", done.Artifact.ArtifactID, plural.Count(done.Artifact.SizeBytes, "byte", "bytes"), done.Artifact.SHA256[:12], done.Artifact.ManagedPath)
	if _, err := call(denv, api.JobComplete, api.CompleteArgs{JobID: review.JobID, ResultSummary: "approved with two comments"}); err != nil {
		return err
	}
	if _, err := call(denv, api.JobFail, api.JobArgs{JobID: flaky.JobID, Reason: "runner lost its network"}); err != nil {
		return err
	}
	say("5. Completed the review job (no file) and reported the build job failed.")
	w, err := call(denv, api.Wait, api.WaitArgs{JobIDs: []string{ci.JobID, review.JobID}, TimeoutMS: 10000})
	if err != nil {
		return err
	}
	rep.Delivered = w.OK
	say("   Both ready jobs of thread-demo merged into one batch and went to the built-in debug target:")
	for _, j := range w.Jobs {
		say("   job %s -> batch %s closed %s", j.JobID, j.BatchID, j.CloseReason)
	}
	say("   (the delivery is a line in %s)", filepath.Join(h.DebugDir(), "threads", "thread-demo.jsonl"))

	if st, err = call(denv, api.DaemonStatus, api.Empty{}); err != nil {
		return err
	}
	before := st.LogHeadSeq
	_, err = call(denv, api.JobComplete, api.CompleteArgs{JobID: ci.JobID, ResultSummary: "again"})
	rep.RejectedCode = string(errs.CodeOf(err))
	st, _ = call(denv, api.DaemonStatus, api.Empty{})
	say("6. Completing the ci job a second time is refused with %s; the log head stayed at seq %d (now %d).", rep.RejectedCode, before, st.LogHeadSeq)

	page, err := call(denv, api.JobList, api.JobListArgs{})
	if err != nil {
		return err
	}
	rep.Jobs = page.Jobs
	say("7. Jobs now:")
	for _, j := range page.Jobs {
		say("   %s  %-7s %-6s %s", j.JobID, j.State, j.TaskKind, j.TaskSummary)
	}

	evs, err := call(denv, api.EventsRead, api.ReadArgs{From: 1})
	if err != nil {
		return err
	}
	rep.Events = len(evs.Events)
	say("8. The log holds %s, each hash-chained to the one before:", plural.Count(len(evs.Events), "event", "events"))
	for _, e := range evs.Events {
		rep.EventTypes[e.Type]++
		say("   seq %-3d %-23s %-13s %s  hash %s…", e.Seq, e.Type, e.Actor, e.Stream, e.Hash.String()[:12])
	}
	vr, err := call(denv, api.EventsVerify, api.Empty{})
	if err != nil {
		return err
	}
	rep.Verified = vr.OK()
	say("9. Verified: hash chain, every transition through the state machines, projections equal a rebuild: %t.", vr.OK())

	_ = filepath.WalkDir(h.Artifacts(), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(h.Root, p)
			rep.ArtifactFiles = append(rep.ArtifactFiles, rel)
		}
		return nil
	})
	say("10. Files under the home's artifacts/: %s.", strings.Join(rep.ArtifactFiles, ", "))
	out, err := c.runEcho(tmp, h, denv)
	if err != nil {
		return err
	}
	rep.Echo = out
	say("11. The built-in debug model, run by the kernel through its #! line: ctx/model/debug/echo \"hello\" printed")
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		say("   %s", l)
	}
	if c.Keep {
		say("The home is kept: CBTH_HOME=%s cbth job list", h.Root)
	} else {
		say("The daemon is stopped and the temporary home removed.")
	}
	if env.JSON {
		return env.emit(rep, nil)
	}
	if !rep.Verified || !rep.Deduplicated || rep.RejectedCode != "ESTATE" || !rep.Delivered {
		return errs.New(errs.EINTERNAL, "the demo did not behave as expected")
	}
	return nil
}

// runEcho makes the CortexFS tree in the demo home and executes the
// built-in model/debug/echo object as a file, the way any script would.
func (c *DemoCmd) runEcho(tmp string, h home.Home, denv *Env) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(tmp, "bin")
	if err := os.MkdirAll(bin, 0o700); err != nil {
		return "", err
	}
	run := filepath.Join(bin, runner.ProgramName)
	if err := os.Symlink(exe, run); err != nil {
		return "", err
	}
	// Registering the built-in objects is an event; the files are its
	// projection, written by the daemon.
	if err := (daemonTrees{denv}).Save(h.CtxRoot(), tree.Seed(tree.Set{}, run)); err != nil {
		return "", err
	}
	out, err := exec.Command(filepath.Join(h.CtxRoot(), "model", "debug", "echo"), "hello").Output()
	if err != nil {
		return "", errs.Wrap(errs.EINTERNAL, err, "run model/debug/echo")
	}
	return string(out), nil
}
