package confine

import (
	"fmt"
	"maps"
	"slices"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/sys/unix"
)

// Unix sockets are not a Landlock right before ABI 9: a confined
// program could connect to any socket of the user's, the cbth daemon's
// included, and have an unconfined process act for it. A seccomp filter
// (github.com/elastic/go-seccomp-bpf) takes the means away instead: no
// unix socket can be made, so none can be connected.
//
// The filter allows every system call of this architecture's table by
// name, except those below, and refuses (EPERM) anything else: a call of
// another ABI (32-bit calls on a 64-bit kernel, which the filter's
// per-architecture checks would not see), or one newer than the table.
// A denylist that allowed the rest would let those through.

// denied are the calls a confined program never makes:
//   - io_uring_*: io_uring makes and connects sockets without the socket
//     and connect system calls, out of the filter's sight;
//   - ptrace, process_vm_*, pidfd_getfd: reaching into another process of
//     the user's (taking its descriptors, its memory) would go around the
//     rule as surely as a socket.
var denied = []string{"io_uring_setup", "io_uring_enter", "io_uring_register",
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd"}

// socketFamilyNotUnix matches socket(2) calls whose family, the low 32
// bits of the first argument (the kernel reads an int, whatever the
// upper half holds), has a bit set above bit 0: every family but
// AF_UNSPEC (0, which no socket has) and AF_UNIX (1).
var socketFamilyNotUnix = []seccomp.NameWithConditions{
	{Name: "socket", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: 0xFFFF_FFFF &^ unix.AF_UNIX}}},
}

// noUnixSockets is the filter a program confined without unix sockets
// gets.
func noUnixSockets() (seccomp.Filter, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return seccomp.Filter{}, err
	}
	var allowed []string
	for _, name := range slices.Sorted(maps.Keys(info.SyscallNames)) {
		if name != "socket" && name != "socketcall" && !slices.Contains(denied, name) {
			allowed = append(allowed, name)
		}
	}
	return seccomp.Filter{
		NoNewPrivs: true,
		Flag:       seccomp.FilterFlagTSync,
		Policy: seccomp.Policy{
			DefaultAction: seccomp.ActionErrno,
			// The conditional group goes last: the library loads an
			// argument over the system call number it compares and does
			// not load the number again for the groups after it.
			Syscalls: []seccomp.SyscallGroup{
				{Action: seccomp.ActionAllow, Names: allowed},
				{Action: seccomp.ActionAllow, NamesWithCondtions: socketFamilyNotUnix},
			},
		},
	}, nil
}

// seccompStatus says whether this kernel takes seccomp filters.
func seccompStatus() (bool, string) {
	if !seccomp.Supported() {
		return false, "this kernel takes no seccomp filter"
	}
	if _, err := arch.GetInfo(""); err != nil {
		return false, fmt.Sprintf("no system call table for this architecture (%v)", err)
	}
	return true, "seccomp"
}

// denyUnixSockets confines this process, and what it executes, to no
// unix socket.
func denyUnixSockets() error {
	f, err := noUnixSockets()
	if err != nil {
		return err
	}
	return seccomp.LoadFilter(f)
}
