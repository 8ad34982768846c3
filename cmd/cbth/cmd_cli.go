package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"golang.org/x/term"
)

// CliCmd groups the Codex CLI commands.
type CliCmd struct {
	Run     CliRunCmd     `cmd:"" help:"Run the Codex TUI on the daemon's shared app-server, as a managed session (--new-thread, --bind-thread-id) or an exploratory one."`
	Session CliSessionCmd `cmd:"" help:"Show CLI managed sessions."`
}

// CliRunCmd is `cbth cli run`.
type CliRunCmd struct {
	BindThreadID             string   `name:"bind-thread-id" placeholder:"ID" help:"Resume this Codex thread as a managed session: job results for it continue the conversation."`
	NewThread                bool     `name:"new-thread" help:"Start a new Codex thread and bind it as a managed session."`
	SessionAllowsApproval    string   `name:"session-allows-approval" enum:"auto,true,false" default:"auto" help:"Whether the session's turns may ask for approval: auto (read from the thread), true or false."`
	SessionAllowsNetwork     string   `name:"session-allows-network" enum:"auto,true,false" default:"auto" help:"Whether the session's turns may reach the network: auto, true or false."`
	SessionAllowsWriteAccess string   `name:"session-allows-write-access" enum:"auto,true,false" default:"auto" help:"Whether the session's turns may write files: auto, true or false."`
	Args                     []string `arg:"" optional:"" help:"Arguments for codex, after --: a prompt, and the options a managed session can mirror (--image, --no-alt-screen, --strict-config; --model on a new thread)."`
}

// exitStatus is an exit status to return as is: codex's, from cli run.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// cliRunResult is cli run's --json output, printed once codex exited.
type cliRunResult struct {
	Outcome       string             `json:"outcome"`
	Mode          string             `json:"mode"`
	CodexExitCode int                `json:"codex_exit_code"`
	Session       *query.SessionView `json:"session"`
	Warnings      []string           `json:"warnings"`
}

// Run attaches to the daemon (starting it and the shared app-server when
// needed), runs the Codex TUI with `--remote` on the shared app-server in
// the foreground, holding the attached connection (the daemon stays up)
// until codex exits, then detaches and exits with codex's status.
func (c *CliRunCmd) Run(env *Env) error {
	mode := sessions.ModeExploratory
	switch {
	case c.NewThread && c.BindThreadID != "":
		return errs.New(errs.EINVAL, "--new-thread and --bind-thread-id exclude each other")
	case c.NewThread:
		mode = sessions.ModeNewThread
	case c.BindThreadID != "":
		mode = sessions.ModeBindThread
	}
	if err := sessions.CheckForegroundArgs(mode, c.Args); err != nil {
		return err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return errs.Wrap(errs.EINVAL, err, "working directory")
	}
	cl, err := env.Client()
	if err != nil {
		return err
	}
	defer cl.Close()
	rep, err := api.CLIAttach.Call(cl, api.CLIAttachArgs{Mode: mode, BoundThreadID: c.BindThreadID, Cwd: cwd,
		Profile: events.SessionProfile{Approval: c.SessionAllowsApproval, Network: c.SessionAllowsNetwork, WriteAccess: c.SessionAllowsWriteAccess}})
	if err != nil {
		return err
	}
	for _, w := range rep.Warnings {
		fmt.Fprintln(env.Stderr, "cbth: warning:", w)
	}
	fmt.Fprintln(env.Stderr, "cbth:", attachNote(rep))

	args, err := sessions.ForegroundArgs(rep.Socket, rep.Cwd, mode, c.BindThreadID, c.Args)
	if err != nil {
		return err
	}
	code, runErr := runForeground(rep, args)

	res := cliRunResult{Outcome: "exited", Mode: mode, CodexExitCode: code, Warnings: []string{}}
	det, derr := api.CLIDetach.Call(cl, api.Empty{})
	if derr != nil {
		fmt.Fprintf(env.Stderr, "cbth: warning: could not detach from the daemon: %v\n", derr)
		res.Session = rep.Session
	} else {
		res.Session, res.Warnings = det.Session, det.Warnings
		for _, w := range det.Warnings[min(len(rep.Warnings), len(det.Warnings)):] {
			fmt.Fprintln(env.Stderr, "cbth: warning:", w)
		}
	}
	if runErr != nil {
		return runErr
	}
	if s := res.Session; s != nil {
		fmt.Fprintf(env.Stderr, "cbth: managed session %s (thread %s, epoch %d) is %s\n", s.ManagedSessionID, s.BoundThreadID, s.SessionEpoch, s.SessionState)
	} else if mode == sessions.ModeNewThread {
		fmt.Fprintln(env.Stderr, "cbth: codex started no thread, so no session was bound")
	}
	if env.JSON {
		if err := env.emit(res, nil); err != nil {
			return err
		}
	}
	if code != 0 {
		return exitStatus(code)
	}
	return nil
}

func attachNote(rep api.CLIAttachReply) string {
	switch {
	case rep.Mode == sessions.ModeExploratory:
		note := "exploratory session: no thread is bound, so job results do not continue this conversation (use --new-thread or --bind-thread-id)"
		if rep.AppServer != nil && !rep.AppServer.ProbePassed {
			note += fmt.Sprintf("; the app-server failed the capability probe (%s: %s)", rep.AppServer.ProbeCode, strings.Join(rep.AppServer.ProbeMissing, ", "))
		}
		return note
	case rep.Session == nil:
		return "new thread: the managed session binds to the thread Codex starts"
	default:
		s := rep.Session
		return fmt.Sprintf("managed session %s %s, bound to thread %s at epoch %d", s.ManagedSessionID, rep.Outcome, s.BoundThreadID, s.SessionEpoch)
	}
}

// runForeground runs codex on the terminal and returns its exit status.
// The terminal's ^C and ^\ reach codex directly (same process group);
// cbth ignores them and passes SIGTERM and SIGHUP on.
func runForeground(rep api.CLIAttachReply, args []string) (int, error) {
	cmd := exec.Command(rep.CodexBinary, args...)
	// The TUI needs a terminal; with --json, stdout may be a pipe for the
	// result. Then the TUI takes the controlling terminal itself.
	in, out := os.Stdin, os.Stdout
	for _, f := range []**os.File{&in, &out} {
		if !term.IsTerminal(int((*f).Fd())) {
			if tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0); err == nil {
				defer tty.Close()
				*f = tty
			}
		}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, os.Stderr
	cmd.Env = append(withoutEnv(os.Environ(), "CODEX_HOME"), "CODEX_HOME="+rep.CodexHome)
	if st, err := os.Stat(rep.Cwd); err == nil && st.IsDir() {
		cmd.Dir = rep.Cwd
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 0, errs.Wrap(errs.ENOTCONF, err, "start %s", rep.CodexBinary)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGTERM || s == syscall.SIGHUP {
					_ = cmd.Process.Signal(s)
				}
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 0, errs.Wrap(errs.EINTERNAL, err, "wait for codex")
}

func withoutEnv(env []string, name string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// CliSessionCmd groups the session commands.
type CliSessionCmd struct {
	List    CliSessionListCmd    `cmd:"" help:"List managed sessions."`
	Inspect CliSessionInspectCmd `cmd:"" help:"Show one managed session and the app-server instance its epoch numbers."`
}

// CliSessionListCmd is `cbth cli session list`.
type CliSessionListCmd struct {
	ThreadID string `name:"thread-id" help:"Only the sessions bound to this thread."`
	State    string `name:"state" enum:",live,detached,parked,stale,retired" default:"" help:"live, detached, parked, stale or retired."`
	Paging
}

// Run lists sessions.
func (c *CliSessionListCmd) Run(env *Env) error {
	list, err := allPages(c.Paging, func(after string, limit int) ([]query.SessionView, string, error) {
		page, err := call(env, api.CLISessionList, api.SessionListArgs{BoundThreadID: c.ThreadID, State: c.State, After: after, Limit: limit})
		return page.Sessions, page.Next, err
	})
	if err != nil {
		return err
	}
	return env.emit(list, func(w io.Writer) {
		if len(list) == 0 {
			fmt.Fprintln(w, "no managed sessions")
			return
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SESSION\tTHREAD\tSTATE\tEPOCH\tAPPROVAL\tNETWORK\tWRITE\tINSTANCE")
		for _, s := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", s.ManagedSessionID, s.BoundThreadID, s.SessionState, s.SessionEpoch,
				s.SessionAllowsApproval, s.SessionAllowsNetwork, s.SessionAllowsWriteAccess, s.AppServerInstance)
		}
		tw.Flush()
	})
}

// CliSessionInspectCmd is `cbth cli session inspect`.
type CliSessionInspectCmd struct {
	ManagedSessionID string `name:"managed-session-id" help:"The session to show."`
	ThreadID         string `name:"thread-id" help:"Show the non-retired session of this thread."`
}

// Run shows one session.
func (c *CliSessionInspectCmd) Run(env *Env) error {
	in, err := call(env, api.CLISessionInspect, api.SessionInspectArgs{ManagedSessionID: c.ManagedSessionID, BoundThreadID: c.ThreadID})
	if err != nil {
		return err
	}
	return env.emit(in, func(w io.Writer) {
		s := in.Session
		fmt.Fprintf(w, "session:      %s (%s, %s)\n", s.ManagedSessionID, s.SessionState, s.Mode)
		fmt.Fprintf(w, "thread:       %s\n", s.BoundThreadID)
		fmt.Fprintf(w, "epoch:        %d on app-server instance %s%s\n", s.SessionEpoch, s.AppServerInstance, reasonSuffix(s.EpochReason))
		fmt.Fprintf(w, "profile:      approval=%s network=%s write_access=%s\n", s.SessionProfile.Approval, s.SessionProfile.Network, s.SessionProfile.WriteAccess)
		fmt.Fprintf(w, "startup cap:  approval=%s network=%s write_access=%s\n", s.StartupSessionAllowsApproval, s.StartupSessionAllowsNetwork, s.StartupSessionAllowsWrite)
		proven := "not read on this epoch"
		if s.PermissionsProven {
			proven = fmt.Sprintf("revision %d", s.PermissionSnapshotRevision)
		}
		fmt.Fprintf(w, "effective:    approval=%s network=%s write_access=%s (%s)\n", s.SessionAllowsApproval, s.SessionAllowsNetwork, s.SessionAllowsWriteAccess, proven)
		if d := s.PermissionDrift; d != nil {
			fmt.Fprintf(w, "drift:        %s (%s)\n", d.Direction, strings.Join(d.Dimensions, ", "))
		}
		for _, r := range []struct{ k, v string }{{"parked on", s.ParkedBatchID}, {"detached:", s.DetachReason}, {"stale:", s.StaleReason}, {"retired:", s.RetiredReason}, {"replaces:", s.Replaces}} {
			if r.v != "" {
				fmt.Fprintf(w, "%-13s %s\n", r.k, r.v)
			}
		}
		if a := in.AppServer; a != nil {
			fmt.Fprintf(w, "app-server:   pid %d, %s, probe passed: %v\n", a.PID, a.State, a.ProbePassed)
		}
	})
}
