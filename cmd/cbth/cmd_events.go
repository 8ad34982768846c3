package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/logdiff"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
	"github.com/cbth-dev/cbth/projections"
)

// EventsCmd groups the audit commands. None of them starts a daemon or
// writes to a log: with a daemon running they read through it, otherwise
// they open the log file read-only.
type EventsCmd struct {
	Export EventsExportCmd `cmd:"" help:"Write the log as JSON lines, hashes included."`
	Verify EventsVerifyCmd `cmd:"" help:"Check the hash chain, every transition and the projections against a rebuild."`
	Diff   EventsDiffCmd   `cmd:"" help:"Compare two logs (exported files or homes): first divergent seq and per-stream summary."`
	Replay EventsReplayCmd `cmd:"" help:"Replay the log up to a seq or a time and print the state as of then."`
	Tail   EventsTailCmd   `cmd:"" help:"Print the latest events; -f keeps following."`
}

// source yields a log's events from seq from on, in order.
type source func(from uint64, fn func(events.Envelope) error) error

// homeSource reads a home's log: through its daemon when one runs (the
// daemon holds the file), else straight from the file, read-only.
func homeSource(h home.Home) source {
	return func(from uint64, fn func(events.Envelope) error) error {
		if h.DaemonRunning() {
			c, err := ipc.Dial(h.Socket(), Version)
			if err != nil {
				return errs.Wrap(errs.EHOSTDOWN, err, "connect to the daemon of %s", h.Root)
			}
			defer c.Close()
			for next := max(from, 1); ; {
				page, err := api.EventsRead.Call(c, api.ReadArgs{From: next})
				if err != nil {
					return err
				}
				for _, e := range page.Events {
					if err := fn(e); err != nil {
						if err == engine.ErrStop {
							return nil
						}
						return err
					}
				}
				if page.Next == 0 {
					return nil
				}
				next = page.Next
			}
		}
		if _, err := os.Stat(h.DB()); err != nil {
			return errs.New(errs.ENOENT, "%s has no log", h.Root)
		}
		return engine.ReadLogFile(h.DB(), 5*time.Second, max(from, 1), fn)
	}
}

// fileSource reads an exported log, checking hashes and the chain.
func fileSource(path string) source {
	return func(from uint64, fn func(events.Envelope) error) error {
		f, err := os.Open(path)
		if err != nil {
			return errs.Wrap(errs.ENOENT, err, "open %s", path)
		}
		defer f.Close()
		err = engine.ReadExport(f, func(e events.Envelope) error {
			if e.Seq < from {
				return nil
			}
			return fn(e)
		})
		if err == engine.ErrStop {
			return nil
		}
		return err
	}
}

// sourceOf picks a source for a command-line argument: a directory is a
// home, anything else an exported file.
func sourceOf(arg string) (source, error) {
	fi, err := os.Stat(arg)
	if err != nil {
		return nil, errs.Wrap(errs.ENOENT, err, "%s", arg)
	}
	if fi.IsDir() {
		abs, _ := filepath.Abs(arg)
		return homeSource(home.Home{Root: abs}), nil
	}
	return fileSource(arg), nil
}

func (e *Env) ownSource() (source, home.Home, error) {
	h, err := e.Home()
	if err != nil {
		return nil, h, err
	}
	return homeSource(h), h, nil
}

// EventsExportCmd is `cbth events export`.
type EventsExportCmd struct {
	From   uint64 `help:"First seq to export." default:"1"`
	Stream string `help:"Only this stream (kind/id)."`
	// CorrelationID follows one conversation (spec/channels.md).
	CorrelationID string `help:"Only the events of this correlation id and of the jobs, batches, attempts and artifacts they led to." name:"correlation-id"`
	JSONL         bool   `help:"JSON lines output (the only format; accepted for clarity)." name:"jsonl" default:"true"`
}

// Run exports.
func (c *EventsExportCmd) Run(env *Env) error {
	src, h, err := env.ownSource()
	if err != nil {
		return err
	}
	var match func(events.Envelope) bool
	if c.CorrelationID != "" {
		match = correlated(c.CorrelationID)
	}
	w := bufio.NewWriter(env.Stdout)
	enc := json.NewEncoder(w)
	bar := env.progressOf("exporting", env.eventsFrom(h, c.From))
	defer bar.finish()
	err = src(c.From, func(e events.Envelope) error {
		bar.add(1)
		if c.Stream != "" && e.Stream.String() != c.Stream {
			return nil
		}
		if match != nil && !match(e) {
			return nil
		}
		return enc.Encode(&e)
	})
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	return err
}

// EventsVerifyCmd is `cbth events verify`.
type EventsVerifyCmd struct{}

// Run verifies and exits 70 (ECORRUPT) when anything is wrong.
func (c *EventsVerifyCmd) Run(env *Env) error {
	h, err := env.Home()
	if err != nil {
		return err
	}
	var rep engine.Report
	if h.DaemonRunning() {
		c, err := ipc.Dial(h.Socket(), Version)
		if err != nil {
			return errs.Wrap(errs.EHOSTDOWN, err, "connect to the daemon of %s", h.Root)
		}
		// The daemon checks in one call: a bar can only say it is alive.
		err = env.spin("verifying (the daemon checks)", func() error {
			var err error
			rep, err = api.EventsVerify.Call(c, api.Empty{})
			return err
		})
		c.Close()
		if err != nil {
			return err
		}
	} else {
		head, _ := engine.LogFileHead(h.DB(), 5*time.Second)
		bar := env.progressOf("verifying", int64(head))
		rep, err = engine.VerifyFileProgress(context.Background(), projections.Store{}, h.DB(), 5*time.Second, func(uint64) { bar.add(1) })
		bar.finish()
		if err != nil {
			return err
		}
	}
	if err := env.emit(rep, func(w io.Writer) {
		fmt.Fprintf(w, "%s, head seq %d, head hash %s\n", plural.Count(rep.Events, "event", "events"), rep.Head, rep.HeadHash)
		for _, p := range rep.Problems {
			fmt.Fprintf(w, "  seq %d: %s: %s\n", p.Seq, p.Code, p.Message)
		}
		if rep.OK() {
			fmt.Fprintln(w, "OK: hash chain, transitions and projections verify")
		}
	}); err != nil {
		return err
	}
	if !rep.OK() {
		return reported{errs.New(errs.ECORRUPT, "the log does not verify: %s found", plural.Count(len(rep.Problems), "problem", "problems"))}
	}
	return nil
}

// EventsDiffCmd is `cbth events diff`.
type EventsDiffCmd struct {
	A string `arg:"" help:"An exported log file or a home directory."`
	B string `arg:"" help:"An exported log file or a home directory."`
}

// Run diffs (engine/logdiff compares; this prints). It exits 1 when the
// logs differ.
func (c *EventsDiffCmd) Run(env *Env) error {
	sa, err := sourceOf(c.A)
	if err != nil {
		return err
	}
	sb, err := sourceOf(c.B)
	if err != nil {
		return err
	}
	bar := env.progress("diff " + c.A)
	onB := false
	res, err := logdiff.Compare(logdiff.Log{Read: logdiff.Source(sa), OnRead: func() { bar.add(1) }},
		logdiff.Log{Read: logdiff.Source(sb), OnRead: func() {
			if !onB {
				bar.describe("diff " + c.B)
				onB = true
			}
			bar.add(1)
		}})
	bar.finish()
	if err != nil {
		return err
	}
	if err := env.emit(res, func(w io.Writer) { printDiff(w, res) }); err != nil {
		return err
	}
	if !res.Identical {
		return reported{errs.New(errs.ECONFLICT, "the logs differ from seq %d", res.FirstDivergent)}
	}
	return nil
}

func printDiff(w io.Writer, res logdiff.Result) {
	s := res.Aggregates
	if res.Identical {
		fmt.Fprintf(w, "identical: %s, same hashes; %s the same\n", plural.Count(res.EventsA, "event", "events"), plural.Count(s.Same, "aggregate", "aggregates"))
		return
	}
	fmt.Fprintf(w, "logs diverge at seq %d (A has %s, B has %d)\n", res.FirstDivergent, plural.Count(res.EventsA, "event", "events"), res.EventsB)
	if res.AtA != nil {
		fmt.Fprintf(w, "  A: %s %s\n", res.AtA.Type, res.AtA.Stream)
	} else {
		fmt.Fprintln(w, "  A: (ends before)")
	}
	if res.AtB != nil {
		fmt.Fprintf(w, "  B: %s %s\n", res.AtB.Type, res.AtB.Stream)
	} else {
		fmt.Fprintln(w, "  B: (ends before)")
	}
	for _, f := range res.Fields {
		fmt.Fprintf(w, "    %s: A %s, B %s\n", f.Field, short(f.A), short(f.B))
	}
	fmt.Fprintf(w, "aggregates: %d same, %d changed, %d only in A, %d only in B\n", s.Same, s.Changed, s.OnlyA, s.OnlyB)
	for _, d := range res.Streams {
		fmt.Fprintf(w, "  %-10s %-60s A %d  B %d\n", d.Status, d.Stream, d.A, d.B)
	}
	if res.Truncated {
		fmt.Fprintf(w, "  (the first %d listed)\n", logdiff.MaxStreams)
	}
}

// EventsReplayCmd is `cbth events replay`.
type EventsReplayCmd struct {
	Until string `help:"A seq, or an RFC 3339 time: replay the events up to and including it." required:""`
}

// ReplayResult is events replay's output.
type ReplayResult struct {
	UntilSeq   uint64                         `json:"until_seq"`
	UntilTime  *time.Time                     `json:"until_time,omitempty"`
	Events     uint64                         `json:"events"`
	Aggregates map[events.Kind][]any          `json:"aggregates"`
	Counts     map[events.Kind]map[string]int `json:"counts"`
}

// Run replays.
func (c *EventsReplayCmd) Run(env *Env) error {
	var untilSeq uint64
	var untilTime time.Time
	if n, err := strconv.ParseUint(c.Until, 10, 64); err == nil {
		untilSeq = n
	} else if t, err := time.Parse(time.RFC3339Nano, c.Until); err == nil {
		untilTime = t
	} else {
		return errs.New(errs.EINVAL, "--until %q is neither a seq nor an RFC 3339 time", c.Until)
	}
	src, h, err := env.ownSource()
	if err != nil {
		return err
	}
	total := env.eventsFrom(h, 1)
	if untilSeq > 0 && (total < 0 || int64(untilSeq) < total) {
		total = int64(untilSeq)
	}
	bar := env.progressOf("replaying", total)
	r := engine.NewReplayer()
	err = src(1, func(e events.Envelope) error {
		if (untilSeq > 0 && e.Seq > untilSeq) || (!untilTime.IsZero() && e.RecordedAt.After(untilTime)) {
			return engine.ErrStop
		}
		bar.add(1)
		return r.Apply(e)
	})
	bar.finish()
	if err != nil {
		return err
	}
	res := ReplayResult{UntilSeq: r.Last(), Events: r.Events(), Aggregates: map[events.Kind][]any{}, Counts: map[events.Kind]map[string]int{}}
	if !untilTime.IsZero() {
		res.UntilTime = &untilTime
	}
	for k, list := range r.States() {
		res.Counts[k] = map[string]int{}
		for _, s := range list {
			res.Aggregates[k] = append(res.Aggregates[k], query.ViewOf(s))
			res.Counts[k][s.Head().State]++
		}
	}
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "state after seq %d (%s)\n", res.UntilSeq, plural.Count(res.Events, "event", "events"))
		kinds := make([]string, 0, len(res.Counts))
		for k := range res.Counts {
			kinds = append(kinds, string(k))
		}
		sort.Strings(kinds)
		for _, k := range kinds {
			fmt.Fprintf(w, "  %-12s", k)
			states := res.Counts[events.Kind(k)]
			names := make([]string, 0, len(states))
			for s := range states {
				names = append(names, s)
			}
			sort.Strings(names)
			for _, s := range names {
				fmt.Fprintf(w, " %s=%d", s, states[s])
			}
			fmt.Fprintln(w)
		}
	})
}

// EventsTailCmd is `cbth events tail`.
type EventsTailCmd struct {
	N      int  `help:"How many of the latest events to show first." short:"n" default:"10"`
	Follow bool `help:"Keep printing new events as they are appended." short:"f"`
}

// tailPoll is how often tail -f looks at a log no daemon holds.
const tailPoll = 500 * time.Millisecond

// Run tails. Like every audit command it never starts a daemon: it reads
// through the running one, else the file read-only (opened briefly for
// each look, so a daemon starting meanwhile is never locked out), and
// with -f it follows whichever of the two holds the log at the time.
func (c *EventsTailCmd) Run(env *Env) error {
	h, err := env.Home()
	if err != nil {
		return err
	}
	if !h.DaemonRunning() {
		if _, err := os.Stat(h.DB()); err != nil {
			return errs.New(errs.ENOENT, "%s has no log", h.Root)
		}
	}
	print := func(e events.Envelope) {
		if env.JSON {
			b, _ := json.Marshal(e)
			fmt.Fprintln(env.Stdout, string(b))
			return
		}
		fmt.Fprintf(env.Stdout, "%6d %s %-8s %-28s %s\n", e.Seq, e.RecordedAt.Local().Format("15:04:05.000"), e.Actor, e.Type, e.Stream)
	}
	head, err := logHead(h)
	if err != nil {
		return err
	}
	from := uint64(1)
	if head > uint64(c.N) {
		from = head - uint64(c.N) + 1
	}
	for {
		if err := homeSource(h)(from, func(e events.Envelope) error {
			print(e)
			from = e.Seq + 1
			return nil
		}); err != nil {
			return err
		}
		if !c.Follow {
			return nil
		}
		if h.DaemonRunning() {
			if err := waitForCommit(h, from); err != nil {
				time.Sleep(tailPoll) // the daemon went away: read the file next
			}
			continue
		}
		time.Sleep(tailPoll)
	}
}

// eventsFrom is how many events a home's log holds from seq from on, for
// a progress bar's total: -1 when it cannot be told cheaply, or when no
// bar shows (the look costs a daemon round trip).
func (e *Env) eventsFrom(h home.Home, from uint64) int64 {
	if e.JSON || !e.stderrTTY() {
		return -1
	}
	head, err := logHead(h)
	if err != nil || head < from {
		return -1
	}
	return int64(head - max(from, 1) + 1)
}

// logHead returns the home's last seq, from its daemon or its file.
func logHead(h home.Home) (uint64, error) {
	if h.DaemonRunning() {
		c, err := ipc.Dial(h.Socket(), Version)
		if err == nil {
			defer c.Close()
			page, err := api.EventsRead.Call(c, api.ReadArgs{From: 1, Limit: 1})
			return page.Head, err
		}
	}
	return engine.LogFileHead(h.DB(), 5*time.Second)
}

// waitForCommit waits (up to five seconds) for the daemon to append seq.
func waitForCommit(h home.Home, seq uint64) error {
	c, err := ipc.Dial(h.Socket(), Version)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = api.EventsRead.Call(c, api.ReadArgs{From: seq, Limit: 1, WaitMS: 5000})
	return err
}

// correlated matches the events of one correlation id and of what they
// led to, read in log order: the streams its events touched, the batches
// that took its jobs, those batches' attempts, its jobs' artifacts. The
// delivery core records its own work under its own correlation ids
// (deliver:<thread>, sweep:...), so the chain is followed through the
// payloads.
func correlated(id string) func(events.Envelope) bool {
	streams := map[events.StreamID]bool{}
	jobs := map[string]bool{}
	return func(e events.Envelope) bool {
		switch {
		case e.CorrelationID == id:
		case streams[e.Stream]:
			return true
		default:
			var p struct {
				JobIDs      []string `json:"job_ids"`
				BatchID     string   `json:"batch_id"`
				SourceJobID string   `json:"source_job_id"`
			}
			switch e.Type {
			case "batch.opened", "batch.jobs_added", "attempt.prepared", "artifact.ingested":
				_ = json.Unmarshal(e.Payload, &p)
			default:
				return false
			}
			hit := jobs[p.SourceJobID] || p.BatchID != "" && streams[events.StreamID{Kind: events.KindBatch, ID: p.BatchID}]
			for _, j := range p.JobIDs {
				hit = hit || jobs[j]
			}
			if !hit {
				return false
			}
		}
		streams[e.Stream] = true
		if e.Stream.Kind == events.KindJob {
			jobs[e.Stream.ID] = true
		}
		return true
	}
}
