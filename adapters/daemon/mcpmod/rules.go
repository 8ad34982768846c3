package mcpmod

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cbth-dev/cbth/adapters/codex/mcpconfig"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The refusals of task_run (spec/mcp.md, "task_run is allowed only by
// the user"). Each names the smallest rule that would allow exactly the
// call that was made, never a wider one: the model shows it to the
// user, who decides.

// outside is what every refusal says about what allowing means.
const outside = "A task runs outside Codex's sandbox, as the user, with the user's access (a build tool also runs what the workspace holds), so only the user can allow one. Tell the user; do not try variations of the command."

// form teaches how a rule reads.
const form = `A rule matches the whole command; a last element "..." lets it take more plain arguments, never one that starts with "-" or holds "="; a named task ([mcp.tasks.NAME]) lists the options it takes in args.`

// refuseArgv is the refusal of a command no rule allows.
func refuseArgv(tool string, m home.MCP, argv []string, file string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s refused, nothing ran: no rule in %s allows `%s`", tool, file, aggregate.CommandLine(argv))
	if r, ok := m.Closest(argv); ok {
		name := mcpconfig.TOMLList(r.Written())
		if r.Name != "" {
			name = fmt.Sprintf("task %q (%s)", r.Name, mcpconfig.TOMLList(r.Argv))
		}
		fmt.Fprintf(&b, "; the closest rule, %s, does not: %s", name, r.Why(argv))
	}
	fmt.Fprintf(&b, ". %s\nThe smallest rule that allows exactly this command, to add to [mcp] task_allow in that file:\n  %s\n%s",
		outside, mcpconfig.TOMLList(argv), form)
	return errs.New(errs.TaskNotAllowed, "%s", b.String())
}

// refuseNamed is the refusal of a named task called with extra arguments
// it does not take.
func refuseNamed(tool string, r home.TaskRule, argv []string, why, file string) error {
	args := slices.Clone(r.Args)
	for _, a := range argv[len(r.Argv):] {
		if !slices.ContainsFunc(args, func(p string) bool { return home.ArgMatches(p, a) }) {
			args = append(args, a)
		}
	}
	return errs.New(errs.TaskNotAllowed, "%s refused, nothing ran: task %q runs %s, and %s. %s\nThe smallest change that allows exactly this call, in %s:\n  [mcp.tasks.%s]\n  argv = %s\n  args = %s\n%s",
		tool, r.Name, mcpconfig.TOMLList(r.Argv), why, outside, file, r.Name, mcpconfig.TOMLList(r.Argv), mcpconfig.TOMLList(args), form)
}

// noTask is the answer to a named task that does not exist.
func noTask(m home.MCP, name, file string) error {
	names := m.TaskNames()
	if len(names) == 0 {
		return errs.New(errs.ENOENT, "no task %q: %s defines no named task ([mcp.tasks.NAME]); nothing ran", name, file)
	}
	return errs.New(errs.ENOENT, "no task %q in %s; nothing ran. The named tasks are: %s (task_list shows what each runs)", name, file, strings.Join(names, ", "))
}
