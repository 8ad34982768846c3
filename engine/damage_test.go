package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/projections"
)

// The engine's side of a damaged log (issue 18; the binary's side, exit
// 70 and the daemon that stops serving, is cmd/cbth/harden_test.go): Open
// refuses a log that lost commits or whose pages are damaged, with
// ECORRUPT saying which, a read that reaches a damaged page is ECORRUPT
// rather than a panic, and VerifyFile reports what it finds.

// writeLog appends n submissions to a new log in dir and closes it.
func writeLog(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cbth.db")
	e, err := engine.Open(path, engine.Options{Projections: projections.Store{}, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		sid := events.StreamID{Kind: events.KindJob, ID: fmt.Sprintf("job-%04d", i)}
		if _, err := e.Append(context.Background(), engine.Meta{Actor: events.ActorCLI}, sid, 0, &events.JobSubmitted{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// refused fails t unless opening path is refused with ECORRUPT whose
// message holds every word.
func refused(t *testing.T, path string, words ...string) {
	t.Helper()
	e, err := engine.Open(path, engine.Options{Projections: projections.Store{}})
	if err == nil {
		e.Close()
		t.Fatal("the damaged log was opened")
	}
	if errs.CodeOf(err) != errs.ECORRUPT {
		t.Fatalf("open: %v, want ECORRUPT", err)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("open: %v, want it to say %q", err, w)
		}
	}
}

// verifyProblems is what VerifyFile finds in the log at path: its
// problems, or its error as the one problem.
func verifyProblems(t *testing.T, path string) string {
	t.Helper()
	rep, err := engine.VerifyFile(context.Background(), projections.Store{}, path, 5*time.Second)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range rep.Problems {
		out = append(out, fmt.Sprintf("seq %d: %s: %s", p.Seq, p.Code, p.Message))
	}
	return strings.Join(out, "\n")
}

// A log that lost its newest records is refused: by the acknowledged
// head where it is, by the projections being ahead of the log where it is
// not (rebuilding them from the shorter log would hide the loss).
func TestShortenedLogIsRefusedAtOpen(t *testing.T) {
	for _, c := range []struct {
		name    string
		withAck bool
		word    string
	}{
		{"with the acknowledged head", true, "acknowledged"},
		{"without it", false, "projections"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeLog(t, 4)
			enginetest.DeleteTail(t, path, 2)
			if !c.withAck {
				os.Remove(engine.AckPath(path))
			}
			refused(t, path, c.word, path)
			if probs := verifyProblems(t, path); probs == "" {
				t.Fatal("VerifyFile found nothing wrong with the shortened log")
			}
		})
	}
}

// bbolt opens the transaction before a damaged newest meta page without a
// word; the acknowledged head is what notices the commit that is gone.
func TestRolledBackCommitIsRefusedAtOpen(t *testing.T) {
	path := writeLog(t, 2)
	enginetest.CorruptNewestMeta(t, path)
	refused(t, path, "acknowledged", engine.AckPath(path))
	if probs := verifyProblems(t, path); !strings.Contains(probs, "acknowledged") {
		t.Fatalf("VerifyFile: %q, want the acknowledged head named", probs)
	}
}

// Damage that makes bbolt panic inside its page arithmetic is ECORRUPT
// naming the file: at Open when Open reads the page, at the first read
// that reaches it otherwise, and from the read-only paths (export, head,
// verify) that work on a file no engine holds.
func TestDamagedPagesAreErrorsNotPanics(t *testing.T) {
	base := writeLog(t, 400)
	pristine, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	ack, _ := os.ReadFile(engine.AckPath(base))
	pageSize, branch := enginetest.LogBranchPage(t, base)
	for _, fault := range enginetest.PageFaults {
		t.Run(fault.Name, func(t *testing.T) {
			// Each check on a copy of its own: a panic inside bolt.Open
			// leaves that file's lock held in this process.
			copyOf := func() string {
				path := filepath.Join(t.TempDir(), "cbth.db")
				os.WriteFile(path, fault.Damage(bytes.Clone(pristine), pageSize, branch), 0o600)
				os.WriteFile(engine.AckPath(path), ack, 0o600)
				return path
			}
			if path := copyOf(); fault.AtOpen {
				refused(t, path, path)
			} else {
				e, err := engine.Open(path, engine.Options{Projections: projections.Store{}})
				if err != nil {
					t.Fatalf("open reads the damaged page after all: %v", err)
				}
				err = e.ReadFrom(1, func(events.Envelope) error { return nil })
				e.Close()
				if errs.CodeOf(err) != errs.ECORRUPT || !strings.Contains(err.Error(), path) {
					t.Fatalf("reading the whole log: %v, want ECORRUPT naming %s", err, path)
				}
			}
			if err := engine.ReadLogFile(copyOf(), time.Second, 1, func(events.Envelope) error { return nil }); errs.CodeOf(err) != errs.ECORRUPT {
				t.Fatalf("reading the file without an engine: %v, want ECORRUPT", err)
			}
			if probs := verifyProblems(t, copyOf()); probs == "" {
				t.Fatal("VerifyFile found nothing wrong with the damaged log")
			}
		})
	}
}
