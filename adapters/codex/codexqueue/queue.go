// Package codexqueue is Codex's own durable per-thread message queue as
// cbth uses it (research: codex-queue F3-F6): `codex queue` run with the
// user's codex and Codex home to add one item, and the thread's rollout
// read to tell where the thread came from and whether an item was
// drained. cbth only adds to the queue and reads rollouts; it never edits
// or deletes a queued item. Both the Codex CLI target's hand-off
// (adapters/codex/clitarget) and Desktop's queue writeback transport
// (adapters/desktop) run it.
package codexqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"

	"github.com/cbth-dev/cbth/adapters/home"
)

// Command runs `codex queue` as the user would.
type Command struct {
	// Codex is codex_binary: a name looked up on PATH, or a path.
	Codex string
	// Env is the child's environment; CodexHome overrides any
	// CODEX_HOME in it.
	Env       []string
	CodexHome string
}

// Outcome is how one `codex queue` went.
type Outcome string

// The outcomes.
const (
	// Queued: exit 0, Codex took the item. It is accepted, not run: Codex
	// runs it as a turn when it drains the thread's queue.
	Queued Outcome = "queued"
	// NotRun: codex could not be started; nothing was queued.
	NotRun Outcome = "not_run"
	// Refused: codex ended with another status; Codex did not take it.
	Refused Outcome = "refused"
	// Unknown: codex did not end in time; the item may be queued.
	Unknown Outcome = "unknown"
)

// NotPrinted stands for the item's id when Codex took it but printed no
// id cbth recognizes.
const NotPrinted = "(not printed)"

// Result is the account of one `codex queue`.
type Result struct {
	Outcome Outcome
	// ItemID is the id Codex printed for a Queued item (NotPrinted when
	// it printed none cbth recognizes).
	ItemID string
	// Detail says why, for the other outcomes.
	Detail string
}

// queued is what `codex queue` prints when it took the message.
var queued = regexp.MustCompile(`Queued message (\S+) for thread`)

// Add puts message in Codex's own durable queue for thread with `codex
// queue --thread T --message M`, without --resume: with no Codex daemon
// the command writes the queue itself, and whichever Codex app-server
// has the thread loaded drains it in order, each item its own turn
// (research: codex-queue F3-F5). Exit 0 means Codex took the item, not
// that it ran. ctx bounds the run: no end by then is Unknown.
func (c Command) Add(ctx context.Context, thread, message string) Result {
	bin, err := home.LookCodex(c.Codex)
	if err != nil {
		return Result{Outcome: NotRun, Detail: err.Error()}
	}
	cmd := exec.CommandContext(ctx, bin, "queue", "--thread", thread, "--message", message)
	// exec keeps the last of duplicate keys: this CODEX_HOME wins.
	cmd.Env = append(slices.Clip(c.Env), "CODEX_HOME="+c.CodexHome)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return Result{Outcome: NotRun, Detail: err.Error()}
	}
	err = cmd.Wait()
	text := strings.TrimSpace(out.String())
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return Result{Outcome: Unknown, Detail: fmt.Sprintf("codex queue did not end in time (%v): the item may be queued", ctx.Err())}
	case errors.As(err, &exit):
		return Result{Outcome: Refused, Detail: fmt.Sprintf("codex queue refused: %v: %s", err, errorLine(text))}
	case err != nil:
		return Result{Outcome: Unknown, Detail: fmt.Sprintf("codex queue: %v: the item may be queued", err)}
	}
	id := NotPrinted
	if m := queued.FindStringSubmatch(text); m != nil {
		id = m[1]
	}
	return Result{Outcome: Queued, ItemID: id}
}

// errorLine is the line of codex's output that says what went wrong: its
// "Error:" line when there is one (codex prints warnings first and a
// backtrace after), else the first.
func errorLine(s string) string {
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "Error:") {
			return line
		}
	}
	line, _, _ := strings.Cut(s, "\n")
	return line
}
