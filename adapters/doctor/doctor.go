// Package doctor checks what a cbth user needs and says how to fix each
// failure: the home's modes and ownership, the configuration, the
// daemon and its log, the CortexFS runner and object shebangs, the
// provider helper and each configured provider's credentials.
//
// A check has a stable id and yields one or more findings (an id of its
// own for each subject, e.g. credentials.openai), each with a state and,
// unless it is ok, a fix. Adding a check is adding an entry to Checks.
// Doctor only looks: it never starts a daemon or writes a file.
package doctor

import (
	"context"
	"time"
)

// State is how a finding came out. Only fail makes doctor exit non-zero.
type State string

// The states.
const (
	OK   State = "ok"
	Warn State = "warn" // works, but something is worth knowing or doing
	Fail State = "fail" // broken: the fix says what to do
	Skip State = "skip" // could not be checked (the detail says why)
)

// Finding is one result.
type Finding struct {
	ID     string `json:"id"`
	State  State  `json:"state"`
	Detail string `json:"detail"`
	Fix    string `json:"fix"`
}

// Check is one check: a stable id and the function that runs it.
type Check struct {
	ID  string
	Run func(ctx context.Context, e *Env) []Finding
}

// Checks lists every check in the order they run. A target adds its
// own: the Desktop target its user service check here.
func Checks() []Check {
	return []Check{
		{"home", checkHome},
		{"home.permissions", checkPermissions},
		{"config", checkConfig},
		{"daemon", checkDaemon},
		{"log", checkLog},
		{"ctx.runner", checkRunner},
		{"confinement", checkConfinement},
		{"providers", checkProviders},
		{"credentials", checkCredentials},
		{"codex", checkCodex},
		{"codex.mcp", checkMCP},
		{"codex.daemon", checkCodexDaemon},
		{"desktop.relay", checkRelay},
		{"desktop.queue", checkQueue},
	}
}

// Report is what doctor prints.
type Report struct {
	OK       bool      `json:"ok"`
	Version  string    `json:"version"`
	Protocol int       `json:"protocol"`
	Home     string    `json:"home"`
	Checks   []Finding `json:"checks"`
}

// Failed counts the failed findings.
func (r Report) Failed() int {
	n := 0
	for _, f := range r.Checks {
		if f.State == Fail {
			n++
		}
	}
	return n
}

// Run runs every check. A check that takes longer than its share of
// the timeout is not waited for past it.
func Run(ctx context.Context, e *Env, checks []Check) Report {
	r := Report{Version: e.Version, Protocol: e.Proto, Home: e.Home.Root, Checks: []Finding{}}
	for _, c := range checks {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		fs := c.Run(cctx, e)
		cancel()
		for i := range fs {
			if fs[i].ID == "" {
				fs[i].ID = c.ID
			}
		}
		r.Checks = append(r.Checks, fs...)
	}
	r.OK = r.Failed() == 0
	return r
}

func one(id string, s State, detail, fix string) []Finding {
	return []Finding{{ID: id, State: s, Detail: detail, Fix: fix}}
}
