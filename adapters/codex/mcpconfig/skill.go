package mcpconfig

// Skill is the Codex skill `cbth mcp install` writes. Codex lists every
// skill's name and description in the instructions of each new thread
// and the model opens the file when the description fits (research:
// codex-mcp F7), so the description says when; the body says how.
const Skill = `---
name: cbth
description: Hand long-running work (test suites, builds, waiting on CI, a review or a deploy, anything you would otherwise run and poll) to cbth, which runs it in the background and brings the result back into this conversation as a new turn when it is done.
---

# cbth: background work that reports back into this thread

Use cbth when a command or a wait would take more than a minute or so:
running the whole test suite, a long build, watching a CI run, waiting for a
reviewer or a deploy. Do not sit in a loop polling it. Hand it to cbth, tell
the user what you started, and end your turn. When the work is done, cbth
starts a new turn in this same thread with the outcome and the output, once.

## With the MCP tools (any sandbox)

The tools are in the ` + "`mcp__cbth`" + ` namespace (search for "cbth" if they are not
listed yet). They act for this thread only: you never pass a thread id.

- ` + "`task_list`" + ` {}: the named tasks the user defined, and the extra arguments
  each takes.
- ` + "`task_run`" + ` {"task": "test", "args": ["-v"]} for a named task, or
  {"argv": ["make", "test"], "summary": "the full test suite"}: the daemon
  runs the command outside your sandbox, as the user, in this thread's
  working directory. Only what a rule of the user allows, whole, runs
  (` + "`[mcp] task_allow`" + `, ` + "`[mcp.tasks]`" + ` in cbth's config); Codex may ask the user to
  approve each call. A refusal (` + "`task_not_allowed`" + `) names the smallest rule that
  would allow it: tell the user, do not try variations of the command.
- ` + "`watch_start`" + ` {"argv": ["npm", "run", "dev"], "wake_on": ["ready", "HTTP 5\\d\\d"]}: a
  long-lived command (a dev server, a log, a CI watch) run under the same
  rules; a line of its output that matches a pattern wakes this thread with a
  new turn (a few times an hour at most; more matches are counted into the
  next wake), and so does its end. ` + "`watch_stop`" + ` {"task_id": ...} stops it.
- ` + "`task_output`" + ` {"task_id": ..., "from_line": N}: read a task's or watcher's
  output when you choose (after a wake), never in a polling loop.
- ` + "`job_submit`" + ` {"task_kind": "ci", "summary": "CI on PR 42"}: a job that something
  outside reports done with ` + "`cbth job complete --job-id ID --summary ...`" + `.
- ` + "`job_status`" + ` {"job_id": ...}, ` + "`job_list`" + ` {}: this thread's jobs.
- ` + "`job_cancel`" + ` {"job_id": ...}: cancel one, stopping its command.

Each answer says when the result will arrive. If it says the thread must be
opened with ` + "`cbth cli run --bind-thread-id`" + `, pass that on to the user.

## From the shell (only where the sandbox allows network access)

` + "`cbth task run -- make test`" + ` and ` + "`cbth job submit --task-kind ci --summary ...`" + `
take this thread from CODEX_THREAD_ID. In a sandbox without network access
they fail with ESANDBOX: use the MCP tools instead.
`
