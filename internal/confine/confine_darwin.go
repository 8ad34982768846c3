package confine

import (
	"fmt"
	"os"
	"strings"
)

// sandboxExec is macOS's sandbox launcher (deprecated by Apple, present
// on every release so far).
const sandboxExec = "/usr/bin/sandbox-exec"

// systemRO are the directories every confined program may read and run
// programs from: the system's own, never a user's.
var systemRO = []string{"/usr", "/bin", "/sbin", "/System", "/Library", "/private/etc", "/etc", "/opt", "/private/var/db/timezone", "/Applications/Xcode.app", "/Library/Developer/CommandLineTools"}

func check() Status {
	if st, err := os.Stat(sandboxExec); err != nil || !st.Mode().IsRegular() {
		how := sandboxExec + " is missing"
		return Status{Mechanism: "none: " + how, Rights: []Right{{Name: RightFiles, How: how}, {Name: RightUnixSockets, How: how}, {Name: RightSignals, How: how}}}
	}
	return Status{Available: true, Mechanism: "sandbox-exec", Rights: []Right{{Name: RightFiles, Confined: true, How: "sandbox-exec"},
		{Name: RightUnixSockets, Confined: true, How: "sandbox-exec"}, {Name: RightSignals, Confined: true, How: "sandbox-exec"}}}
}

// apply returns argv run through sandbox-exec with a profile generated
// from p: nothing is allowed but what it lists.
func apply(p Policy, argv []string) ([]string, error) {
	if !check().Available {
		return argv, nil // best effort: Status told the caller
	}
	return append([]string{sandboxExec, "-p", profile(p)}, argv...), nil
}

// profile renders p in the sandbox profile language (SBPL): deny by
// default; run programs, read metadata anywhere (path lookups need it),
// read the system's directories and the RW ones, write only the RW ones
// and the null devices; the network and mach services stay open (not
// confined, as on Linux), but no unix socket may be connected to or
// bound outside p.Unix, as the seccomp filter does on Linux (the later
// rule wins in SBPL). This profile is cross-built and checked as text;
// it has not run on a Mac.
func profile(p Policy) string {
	var b strings.Builder
	b.WriteString("(version 1)\n(deny default)\n")
	b.WriteString("(allow process-fork)\n(allow process-exec)\n(allow sysctl-read)\n(allow mach-lookup)\n(allow ipc-posix-shm)\n")
	b.WriteString("(allow network*)\n(allow file-read-metadata)\n")
	b.WriteString("(deny network-outbound (remote unix-socket (subpath \"/\")))\n(deny network-bind (local unix-socket (subpath \"/\")))\n")
	for _, d := range p.Unix {
		fmt.Fprintf(&b, "(allow network-outbound (remote unix-socket (subpath %s)))\n", quote(d))
	}
	if p.Scoped {
		b.WriteString("(allow signal (target self))\n(allow signal (target children))\n")
	} else {
		b.WriteString("(allow signal)\n")
	}
	read := append(append(append([]string{}, systemRO...), p.RW...), p.Exec...)
	b.WriteString("(allow file-read*")
	for _, d := range read {
		fmt.Fprintf(&b, " (subpath %s)", quote(d))
	}
	b.WriteString(" (literal \"/\") (literal \"/dev/urandom\") (literal \"/dev/random\"))\n")
	b.WriteString("(allow file-read* file-write* (literal \"/dev/null\") (literal \"/dev/zero\") (literal \"/dev/tty\") (literal \"/dev/dtracehelper\"))\n")
	if len(p.RW) > 0 {
		b.WriteString("(allow file-write*")
		for _, d := range p.RW {
			fmt.Fprintf(&b, " (subpath %s)", quote(d))
		}
		b.WriteString(")\n")
	}
	return b.String()
}

// quote renders a path as an SBPL string literal.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
