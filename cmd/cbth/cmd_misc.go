package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/internal/errs"
)

// VersionCmd is `cbth version`.
type VersionCmd struct{}

// Run prints the version.
func (VersionCmd) Run(env *Env) error {
	v := map[string]any{"version": Version, "protocol": ipc.Proto, "go": runtime.Version(), "os": runtime.GOOS, "arch": runtime.GOARCH}
	return env.emit(v, func(w io.Writer) {
		fmt.Fprintf(w, "cbth %s (protocol %d, %s %s/%s)\n", Version, ipc.Proto, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	})
}

// CompletionCmd is `cbth completion`.
type CompletionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"bash, zsh or fish."`
}

// completionScripts hook a shell's completion up to cbth itself: the shell
// runs cbth with COMP_LINE set, and kongplete answers from the command tree
// (see run), so completion never falls behind the commands. %[1]s is the
// quoted path of this binary.
var completionScripts = map[string]string{
	"bash": "complete -C %[1]s cbth\n",
	"zsh":  "#compdef cbth\nautoload -U +X bashcompinit && bashcompinit\ncomplete -C %[1]s cbth\n",
	"fish": `function __complete_cbth
    set -lx COMP_LINE (commandline -cp)
    test -z (commandline -ct)
    and set COMP_LINE "$COMP_LINE "
    %[1]s
end
complete -f -c cbth -a "(__complete_cbth)"
`,
}

// Run prints the script for the shell.
func (c CompletionCmd) Run(env *Env) error {
	exe, err := os.Executable()
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "locate the cbth binary")
	}
	fmt.Fprintf(env.Stdout, completionScripts[c.Shell], shellQuote(exe))
	return nil
}

// shellQuote quotes s for bash, zsh and fish alike.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
