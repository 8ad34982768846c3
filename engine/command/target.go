package command

import (
	"slices"
	"strings"

	"github.com/cbth-dev/cbth/events"
)

// Target is where a job's result is delivered (events.Target: the event,
// the state and the wire carry it). The values and their one list are
// here, with the flag's enum and help built from them.
type Target = events.Target

// The targets. The Codex CLI target is "cli" on the wire (the seed's
// name); in Go it is TargetCodexCLI, so it cannot be mistaken for cbth's
// own command line.
const (
	TargetCodexCLI       Target = "cli"
	TargetDesktop        Target = "desktop"
	TargetCtx            Target = "ctx"
	TargetDebug          Target = "debug"
	TargetCodexAppServer Target = "codex_app_server"
)

// TargetInfo says what a target delivers into and how a job reaches it.
type TargetInfo struct {
	Target Target
	// Flag: `--target` (job submit, task run) takes it. A codex_app_server
	// job carries a resolved delivery target, which only `cbth plugin
	// enqueue` gives it.
	Flag bool
	// ThreadRoute: a gateway route into a thread (thread:ID) may name it.
	ThreadRoute bool
	// Delivers says what the result goes into (help, spec/cli.md).
	Delivers string
}

// Targets is every target, in the order the help and spec/cli.md list
// them: the one list the CLI's enum, help and completion, the gateway's
// routes and the spec are derived from or checked against.
func Targets() []TargetInfo {
	return []TargetInfo{
		{TargetCodexCLI, true, true, "a Codex CLI thread, through the daemon's shared app-server"},
		{TargetDesktop, true, true, "a Codex Desktop thread, through its heartbeat automation"},
		{TargetCtx, true, false, "a CortexFS socket session"},
		{TargetDebug, true, true, "the scriptable test target (cbth debug target)"},
		{TargetCodexAppServer, false, false, "a host plugin's app-server lease (cbth plugin enqueue only)"},
	}
}

// FlagTargets are the targets `--target` takes, as kong's enum wants
// them.
func FlagTargets() []string { return targetNames(func(i TargetInfo) bool { return i.Flag }) }

// ThreadRouteTargets are the targets a gateway thread route may name.
func ThreadRouteTargets() []string {
	return targetNames(func(i TargetInfo) bool { return i.ThreadRoute })
}

func targetNames(keep func(TargetInfo) bool) []string {
	var out []string
	for _, i := range Targets() {
		if keep(i) {
			out = append(out, string(i.Target))
		}
	}
	return out
}

// ValidTarget says whether t is one of the targets.
func ValidTarget(t Target) bool {
	return slices.ContainsFunc(Targets(), func(i TargetInfo) bool { return i.Target == t })
}

// targetList is every target's name, for an error message.
func targetList() string {
	return strings.Join(targetNames(func(TargetInfo) bool { return true }), ", ")
}
