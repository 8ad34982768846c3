package codextest

import (
	"os/exec"
	"strconv"
	"strings"
)

// liveMembers lists the processes of group pgid that are not zombies
// (an exited helper may wait a while for its new parent, launchd, to reap
// it; it no longer runs), as ps reports them.
func liveMembers(pgid int) ([]string, error) {
	out, err := exec.Command("ps", "-axo", "pid=,pgid=,stat=,comm=").Output()
	if err != nil {
		return nil, err
	}
	var live []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		if g, _ := strconv.Atoi(f[1]); g != pgid || strings.HasPrefix(f[2], "Z") {
			continue
		}
		live = append(live, line)
	}
	return live, nil
}
