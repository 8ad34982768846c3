package supervisor

import "slices"

// maxAncestors bounds the walk up from a socket's serving process: a
// wrapper chain is a few processes deep, and the bound keeps a walk finite
// whatever the process table does meanwhile.
const maxAncestors = 64

// ServesFor reports whether the process the kernel says listens on a
// socket (peer) runs on behalf of the process cbth started (started):
// started itself, a member of its process group (the supervisor starts it
// as the leader of a group of its own), or a descendant. The codex a user
// has may be a wrapper that serves through a child: the npm package's node
// script on a Node without process.execve, a shell script, a version
// manager's shim. Any other process is not the instance's.
func ServesFor(started, peer int) bool {
	if started <= 1 {
		return false
	}
	return peer == started || slices.Contains(Owners(peer), started)
}

// Owners lists the pids a process may serve for, nearest first: its own,
// its process group's, then its parent's and so on up to (not including)
// init. What cannot be read (the process is gone, or exits during the
// walk) ends the list, so a process that is gone serves for nobody.
//
// The kernel gives no new process a pid that still names a live group, so
// a member of a started process's group was started inside it (only a
// process of the same session could join it).
func Owners(pid int) []int {
	if pid <= 1 {
		return nil
	}
	ppid, pgid, err := parentAndGroup(pid)
	if err != nil {
		return nil
	}
	out := []int{pid}
	if pgid != pid {
		out = append(out, pgid)
	}
	for range maxAncestors {
		if ppid <= 1 {
			break
		}
		out = append(out, ppid)
		if ppid, _, err = parentAndGroup(ppid); err != nil {
			break
		}
	}
	return out
}
