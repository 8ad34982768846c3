package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// pastFlags are the time machine's flags of batch inspect, batch
// inspect-head and job query (spec/cli.md, "History").
type pastFlags struct {
	AsOf    string `help:"Show it as it was at this RFC 3339 time." name:"as-of" placeholder:"TIME" xor:"past"`
	Seq     uint64 `help:"Show it as it was right after the event at this seq." name:"seq" placeholder:"N" xor:"past"`
	History bool   `help:"Print its whole story instead (up to --as-of or --seq when given): every event in order, with the fields it changed; JSON lines under --json."`
}

// args parses the moment; a time that does not parse is EINVAL before
// anything reaches the daemon.
func (p pastFlags) args() (api.PastArgs, error) {
	a := api.PastArgs{AsOfSeq: p.Seq}
	if p.AsOf != "" {
		t, err := time.Parse(time.RFC3339Nano, p.AsOf)
		if err != nil {
			return a, errs.New(errs.EINVAL, "--as-of %q is not an RFC 3339 time (e.g. 2026-11-21T10:00:00Z)", p.AsOf)
		}
		a.AsOf = &t
	}
	return a, nil
}

// history prints the story the daemon tells for h, a page at a time: one
// JSON line per event under --json, else a timeline.
func (p pastFlags) history(env *Env, h api.HistoryArgs) error {
	var err error
	if h.PastArgs, err = p.args(); err != nil {
		return err
	}
	for {
		page, err := call(env, api.History, h)
		if err != nil {
			return err
		}
		for _, e := range page.Entries {
			if env.JSON {
				b, err := json.Marshal(e)
				if err != nil {
					return err
				}
				fmt.Fprintln(env.Stdout, string(b))
				continue
			}
			printHistoryEntry(env.Stdout, e)
		}
		if page.Next == 0 {
			return nil
		}
		h.After = page.Next
	}
}

// printHistoryEntry prints one event of a story for people: a line for the
// event, then one per changed field.
func printHistoryEntry(w io.Writer, e query.HistoryEntry) {
	fmt.Fprintf(w, "seq %d  %s  %s  %s  %s (now %s)  hash %s\n", e.Seq, e.RecordedAt.Format(time.RFC3339Nano), e.Actor, e.Type,
		e.Stream, e.State, e.Hash.String()[:12])
	for _, c := range e.Changes {
		fmt.Fprintf(w, "    %s: %s -> %s\n", c.Field, short(c.Before), short(c.After))
	}
}

// short keeps a changed value on one readable line.
func short(v json.RawMessage) string {
	s := strings.ReplaceAll(string(v), "\n", `\n`)
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// ThreadCmd groups the commands about one conversation thread.
type ThreadCmd struct {
	History ThreadHistoryCmd `cmd:"" help:"A thread's batches over time, in FIFO order, with how each closed."`
	Trust   ThreadTrustCmd   `cmd:"" help:"Trust a Codex thread's deliveries that go without your terminal: --strict or --own-permissions."`
	Untrust ThreadUntrustCmd `cmd:"" help:"Take a thread's own trust back: the home's [cli] trust applies to it again."`
}

// ThreadTrustCmd is `cbth thread trust`: the user's decision, recorded as
// an event (spec/codex-cli.md, "Trust"). No MCP tool offers it.
type ThreadTrustCmd struct {
	ThreadID       string `help:"The Codex thread." required:"" name:"thread-id"`
	Strict         bool   `help:"Deliver without your terminal only while the thread's effective approval, network and write access are all false (the default, pinned for this thread)." xor:"trust" required:""`
	OwnPermissions bool   `help:"Deliver with the thread's own permissions, whatever they are: a result then runs as a turn you typed would, approvals, network and writes included." name:"own-permissions" xor:"trust" required:""`
}

// Run records the trust.
func (c *ThreadTrustCmd) Run(env *Env) error {
	trust := events.TrustStrict
	if c.OwnPermissions {
		trust = events.TrustOwnPermissions
	}
	rep, err := call(env, api.ThreadTrust, api.ThreadTrustArgs{ThreadID: c.ThreadID, Trust: trust})
	if err != nil {
		return err
	}
	return env.emit(rep, func(w io.Writer) { printTrust(w, rep) })
}

// ThreadUntrustCmd is `cbth thread untrust`.
type ThreadUntrustCmd struct {
	ThreadID string `help:"The Codex thread." required:"" name:"thread-id"`
}

// Run takes the thread's own trust back.
func (c *ThreadUntrustCmd) Run(env *Env) error {
	rep, err := call(env, api.ThreadUntrust, api.ThreadTrustArgs{ThreadID: c.ThreadID})
	if err != nil {
		return err
	}
	return env.emit(rep, func(w io.Writer) { printTrust(w, rep) })
}

func printTrust(w io.Writer, rep api.ThreadTrustReply) {
	whose := "its own"
	if rep.Source == "home" {
		whose = "the home's [cli] trust"
	}
	fmt.Fprintf(w, "thread %s: %s; trust %s (%s)\n", rep.ThreadID, rep.Outcome, rep.Trust, whose)
	if rep.Trust == events.TrustOwnPermissions {
		fmt.Fprintln(w, "Its results are delivered without your terminal with the thread's own permissions: the turn may ask approvals, reach the network and write where the thread can.")
	} else {
		fmt.Fprintln(w, "Its results are delivered without your terminal only while its approval, network and write access are all off; otherwise they wait for you.")
	}
}

// ThreadHistoryCmd is `cbth thread history`.
type ThreadHistoryCmd struct {
	SourceThreadID string `help:"The thread." required:"" name:"source-thread-id"`
}

// Run prints the thread's batches: one JSON line each under --json.
func (c *ThreadHistoryCmd) Run(env *Env) error {
	a := api.ThreadHistoryArgs{SourceThreadID: c.SourceThreadID}
	var tw *tabwriter.Writer
	if !env.JSON {
		tw = tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		defer tw.Flush()
		fmt.Fprintln(tw, "OPENED\tBATCH\tSTATE\tJOBS\tACCEPTED\tCLOSED\tCLOSE REASON")
	}
	n := 0
	for {
		page, err := call(env, api.ThreadHistory, a)
		if err != nil {
			return err
		}
		if tr := page.Trust; tr != nil && tw != nil {
			whose := "its own"
			if tr.Source == "home" {
				whose = "the home's [cli] trust"
			} else if tr.Since != nil {
				whose += ", since " + tr.Since.Format(time.RFC3339)
			}
			fmt.Fprintf(env.Stdout, "Codex deliveries of thread %s: trust %s (%s)\n", c.SourceThreadID, tr.Trust, whose)
		}
		for _, b := range page.Batches {
			n++
			if env.JSON {
				buf, err := json.Marshal(b)
				if err != nil {
					return err
				}
				fmt.Fprintln(env.Stdout, string(buf))
				continue
			}
			closed, reason := "-", b.CloseReason
			if b.ClosedAt != nil {
				closed = b.ClosedAt.Format(time.RFC3339)
			}
			if b.Head {
				reason = "(head)"
			}
			fmt.Fprintf(tw, "seq %d\t%s\t%s\t%d\t%d\t%s\t%s%s\n", b.OpenedSeq, b.BatchID, b.State, len(b.JobIDs), b.DeliveryAttemptCount, closed, reason, reasonSuffix(b.CloseDetail))
		}
		if page.Next == "" {
			break
		}
		a.After = page.Next
	}
	if n == 0 && !env.JSON {
		fmt.Fprintf(tw, "thread %s has had no batch\n", c.SourceThreadID)
	}
	return nil
}
