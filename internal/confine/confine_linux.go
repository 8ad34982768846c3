package confine

import (
	"fmt"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// systemRO are the directories every confined program may read and run
// programs from: the system's own, never a user's.
var systemRO = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix/store", "/run/current-system"}

func check() Status {
	var st Status
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < 1 {
		st.Mechanism = fmt.Sprintf("none: this kernel has no Landlock (%v); it needs Linux 5.13 or later with landlock in its lsm= list", err)
		st.Rights = append(st.Rights, Right{Name: RightFiles, How: "no Landlock"})
	} else {
		st.Available, st.Mechanism = true, fmt.Sprintf("landlock ABI %d", v)
		st.Rights = append(st.Rights, Right{Name: RightFiles, Confined: true, How: st.Mechanism})
	}
	ok, how := seccompStatus()
	st.Rights = append(st.Rights, Right{Name: RightUnixSockets, Confined: ok, How: how})
	if v >= 6 {
		st.Rights = append(st.Rights, Right{Name: RightSignals, Confined: true, How: fmt.Sprintf("landlock ABI %d scopes", v)})
	} else {
		st.Rights = append(st.Rights, Right{Name: RightSignals, How: "Landlock scopes need ABI 6 (Linux 6.12)"})
	}
	return st
}

// apply confines this process, and so the program it executes next,
// with every file system right Landlock knows of handled (best effort:
// what the kernel has), then leaves argv as it is.
func apply(p Policy, argv []string) ([]string, error) {
	rules := []landlock.Rule{
		landlock.RODirs(systemRO...).IgnoreIfMissing(),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full", "/dev/tty").IgnoreIfMissing(),
		landlock.ROFiles("/dev/urandom", "/dev/random").IgnoreIfMissing(),
	}
	if len(p.RW) > 0 {
		rules = append(rules, landlock.RWDirs(p.RW...).WithRefer())
	}
	if len(p.Exec) > 0 {
		rules = append(rules, landlock.ROFiles(p.Exec...))
	}
	if len(p.Unix) > 0 {
		rules = append(rules, landlock.PathAccess(llsys.AccessFSResolveUnix, p.Unix...).IgnoreIfMissing())
	}
	if err := landlock.V11.BestEffort().RestrictPaths(rules...); err != nil {
		return nil, fmt.Errorf("landlock: %w", err)
	}
	if p.Scoped {
		if err := landlock.V11.BestEffort().RestrictScoped(); err != nil {
			return nil, fmt.Errorf("landlock scopes: %w", err)
		}
	}
	if ok, _ := seccompStatus(); ok && len(p.Unix) == 0 {
		if err := denyUnixSockets(); err != nil {
			return nil, fmt.Errorf("seccomp: %w", err)
		}
	}
	return argv, nil
}
