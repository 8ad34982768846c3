package sessions

import (
	"slices"
	"strings"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Modes of `cbth cli run`.
const (
	ModeBindThread  = "bind_thread"
	ModeNewThread   = "new_thread"
	ModeExploratory = "exploratory"
)

// subcommands of codex 0.169: a first positional argument naming one
// would be taken as a subcommand, not as a prompt.
var subcommands = []string{"agents", "exec", "e", "review", "login", "logout", "mcp", "plugin", "app-server",
	"remote-control", "completion", "update", "doctor", "sandbox", "debug", "apply", "a", "resume", "queue",
	"archive", "delete", "migrate-rollouts", "migrate-nfs-db", "unarchive", "fork", "cloud", "exec-server",
	"features", "help"}

// A foreground option the shared app-server and the delivery client
// cannot mirror would make the thread run with settings the session's
// snapshot does not show (permissions, features, providers, directories),
// so a managed run accepts only these (each with whether it takes a
// value); codex itself still rejects what it does not know.
var managedOptions = map[string]bool{
	"--image": true, "-i": true,
	"--no-alt-screen": false,
	"--strict-config": false,
	"--help":          false, "-h": false,
	"--version": false, "-V": false,
}

// modelOptions choose the model of a thread the foreground starts; a bound
// thread keeps its own (a resume on a loaded thread ignores them).
var modelOptions = map[string]bool{"--model": true, "-m": true}

// cbthOptions are what cbth passes itself: the shared app-server and the
// working directory.
var cbthOptions = map[string]bool{"--remote": true, "--remote-auth-token-env": true, "--no-daemon": false, "--cd": true, "-C": true}

// foregroundArgs is a parsed foreground command line: its options (each
// with its value, when it takes one as the next word) and its positional
// words (a prompt).
type foregroundArgs struct {
	opts       [][]string
	positional []string
}

// parseForeground splits args and checks them for mode. A managed run
// (bind_thread, new_thread) refuses every option it cannot mirror, and any
// subcommand; an exploratory run, outside auto-continuation, refuses only
// what would take it off the shared app-server.
func parseForeground(mode string, args []string) (foregroundArgs, error) {
	var out foregroundArgs
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(out.positional) > 0 || a == "-" || !strings.HasPrefix(a, "-") {
			if len(out.positional) == 0 && slices.Contains(subcommands, a) {
				return out, errs.New(errs.EINVAL, "codex subcommand %q cannot run under `cbth cli run`", a)
			}
			out.positional = append(out.positional, a)
			continue
		}
		if a == "--" {
			out.positional = append(out.positional, args[i+1:]...)
			break
		}
		name, _, inline := strings.Cut(a, "=")
		if !strings.HasPrefix(a, "--") && len(a) > 2 {
			name, inline = a[:2], true // -ivalue
		}
		if _, ok := cbthOptions[name]; ok {
			return out, errs.New(errs.EINVAL, "codex option %s is cbth's to set: it runs Codex on the shared app-server (for --cd, run cbth from that directory)", name)
		}
		takes, ok := managedOptions[name]
		if !ok && mode != ModeBindThread {
			takes, ok = modelOptions[name]
		}
		if !ok && mode != ModeExploratory {
			return out, errs.New(errs.EINVAL, "codex option %s cannot be mirrored by the delivery client, so a managed `cbth cli run` refuses it (set it in config.toml of the Codex home, or run without --new-thread and --bind-thread-id for an exploratory session)", name)
		}
		opt := []string{a}
		if takes && !inline && i+1 < len(args) {
			i++
			opt = append(opt, args[i])
		}
		out.opts = append(out.opts, opt)
	}
	return out, nil
}

// CheckForegroundArgs checks the arguments given after `--` to `cbth cli
// run` before anything starts (see parseForeground).
func CheckForegroundArgs(mode string, args []string) error {
	_, err := parseForeground(mode, args)
	return err
}

// ForegroundArgs is the codex command line of a foreground attached to the
// shared app-server at socket, in cwd, with the user's extra arguments:
// as given on a new thread or an exploratory run; resuming the bound
// thread, with the options first, then the subcommand, then a prompt.
func ForegroundArgs(socket, cwd, mode, thread string, extra []string) ([]string, error) {
	fa, err := parseForeground(mode, extra)
	if err != nil {
		return nil, err
	}
	args := []string{"--remote", "unix://" + socket, "--cd", cwd}
	if mode != ModeBindThread {
		return append(args, extra...), nil
	}
	for _, o := range fa.opts {
		args = append(args, o...)
	}
	args = append(args, "resume", thread)
	if len(fa.positional) > 0 {
		args = append(args, "--")
	}
	return append(args, fa.positional...), nil
}
