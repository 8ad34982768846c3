package main

import (
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress shows how long work is going on stderr, through progressbar:
// events done, their rate and the time left when the total is known. It
// shows only on a terminal and never under --json, so scripts and logs
// get nothing; a nil *progress (not shown) ignores every call.
type progress struct {
	bar *progressbar.ProgressBar
}

// stderrTTY reports whether stderr is a terminal.
func (e *Env) stderrTTY() bool {
	f, ok := e.Stderr.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress starts a bar of total events (-1 when unknown: a count and a
// rate without an end), or returns nil when nothing may be shown.
func (e *Env) progressOf(desc string, total int64) *progress {
	if e.JSON || !e.stderrTTY() {
		return nil
	}
	return &progress{bar: progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(e.Stderr),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("events"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSpinnerType(14),
	)}
}

// progress is progressOf with the total unknown.
func (e *Env) progress(desc string) *progress { return e.progressOf(desc, -1) }

func (p *progress) add(n int) {
	if p != nil {
		_ = p.bar.Add(n)
	}
}

func (p *progress) describe(s string) {
	if p != nil {
		p.bar.Describe(s)
	}
}

// finish clears the bar from the terminal.
func (p *progress) finish() {
	if p != nil {
		_ = p.bar.Finish()
		_ = p.bar.Clear()
	}
}

// spin keeps an endless bar turning while fn runs (a wait, a check the
// daemon makes in one call), so a terminal shows the work is alive and
// for how long.
func (e *Env) spin(desc string, fn func() error) error {
	p := e.progress(desc)
	if p == nil {
		return fn()
	}
	_ = p.bar.RenderBlank()
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = p.bar.Add(0)
			}
		}
	}()
	err := fn()
	close(done)
	p.finish()
	return err
}
