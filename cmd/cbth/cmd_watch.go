package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/internal/errs"
	tea "github.com/charmbracelet/bubbletea"
	"golang.org/x/term"
)

// WatchCmd is `cbth watch`.
type WatchCmd struct{}

// watchWait is how long one watch.next waits for a commit before it
// answers anyway (the view's times move on).
const watchWait = 30 * time.Second

// Run watches the daemon until interrupted. It never starts a daemon.
func (c *WatchCmd) Run(env *Env) error {
	h, err := env.Home()
	if err != nil {
		return err
	}
	if !h.DaemonRunning() {
		return errs.New(errs.EHOSTDOWN, "no daemon runs for %s; cbth watch never starts one", h.Root)
	}
	cl, err := ipc.Dial(h.Socket(), Version)
	if err != nil {
		return errs.Wrap(errs.EHOSTDOWN, err, "connect to the daemon of %s", h.Root)
	}
	defer cl.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	views := make(chan api.WatchView)
	failed := make(chan error, 1)
	go func() {
		var after uint64
		first := true
		for {
			wait := watchWait
			if first {
				wait = 0
			}
			v, err := api.WatchNext.Call(cl, api.WatchArgs{After: after, WaitMS: wait.Milliseconds()})
			if err != nil {
				failed <- err
				return
			}
			first, after = false, v.Seq
			select {
			case views <- v:
			case <-ctx.Done():
				return
			}
		}
	}()
	if f, ok := env.Stdout.(*os.File); ok && !env.JSON && term.IsTerminal(int(f.Fd())) {
		return watchTUI(ctx, views, failed, f)
	}
	var last *api.WatchView
	for {
		select {
		case <-ctx.Done():
			return nil // interrupted: a clean end
		case err := <-failed:
			return err
		case v := <-views:
			if last != nil && reflect.DeepEqual(changeless(*last), changeless(v)) {
				continue
			}
			last = &v
			if env.JSON {
				b, err := json.Marshal(v)
				if err != nil {
					return err
				}
				fmt.Fprintln(env.Stdout, string(b))
			} else {
				printWatch(env.Stdout, v)
				fmt.Fprintln(env.Stdout)
			}
		}
	}
}

// changeless is a view without its seq: a commit that changed nothing
// shown prints nothing.
func changeless(v api.WatchView) api.WatchView { v.Seq = 0; return v }

// printWatch renders the live view for people.
func printWatch(w io.Writer, v api.WatchView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "cbth watch: log at seq %d; %d open heads, %d parked, %d closed undelivered\n", v.Seq, v.HeadCount, v.ParkedCount, v.Undelivered)
	fmt.Fprintf(tw, "keep-alive\t%s\n", strings.Join(v.BusyReasons, "; "))
	fmt.Fprintln(tw, "\nTHREAD\tHEAD BATCH\tTARGET\tSTATE\tJOBS\tSINCE")
	for _, h := range v.Heads {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", h.SourceThreadID, h.BatchID, h.TargetKind, h.State, h.Jobs, h.Since.Format(time.RFC3339))
	}
	fmt.Fprintln(tw, "\nIN FLIGHT\tTARGET\tATTEMPT\tGEN\tSTATE\tSINCE")
	for _, a := range v.InFlight {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", a.SourceThreadID, a.TargetKind, a.AttemptID, a.Generation, a.State, a.Since.Format(time.RFC3339))
	}
	fmt.Fprintln(tw, "\nPARKED\tBATCH\tREASON")
	for _, p := range v.Parked {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.SourceThreadID, p.BatchID, p.Reason)
	}
	fmt.Fprintln(tw, "\nTASK\tJOB\tSTATE\tWAKES\tCOMMAND")
	for _, t := range v.Tasks {
		wakes := "-"
		if t.Watch {
			wakes = fmt.Sprint(t.Wakes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.TaskID, t.JobID, t.State, wakes, t.Command)
	}
	tw.Flush()
}

// watchModel is the terminal UI (bubbletea): the live view, redrawn on
// each change; q, Esc or Ctrl-C quits.
type watchModel struct {
	views  <-chan api.WatchView
	failed <-chan error
	view   *api.WatchView
	err    error
}

type viewMsg api.WatchView
type failMsg struct{ error }

func (m watchModel) next() tea.Msg {
	select {
	case v := <-m.views:
		return viewMsg(v)
	case err := <-m.failed:
		return failMsg{err}
	}
}

func (m watchModel) Init() tea.Cmd { return m.next }

func (m watchModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		switch msg.String() {
		case "q", "esc", "ctrl+c":
			return m, tea.Quit
		}
	case viewMsg:
		v := api.WatchView(msg)
		m.view = &v
		return m, m.next
	case failMsg:
		m.err = msg.error
		return m, tea.Quit
	}
	return m, nil
}

func (m watchModel) View() string {
	if m.view == nil {
		return "cbth watch: connecting…\n"
	}
	var b strings.Builder
	printWatch(&b, *m.view)
	b.WriteString("\nq quits\n")
	return b.String()
}

func watchTUI(ctx context.Context, views <-chan api.WatchView, failed <-chan error, out *os.File) error {
	p := tea.NewProgram(watchModel{views: views, failed: failed}, tea.WithContext(ctx), tea.WithOutput(out), tea.WithAltScreen())
	m, err := p.Run()
	if ctx.Err() != nil {
		return nil // interrupted: a clean end
	}
	if err != nil {
		return err
	}
	return m.(watchModel).err
}
