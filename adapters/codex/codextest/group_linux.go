package codextest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// liveMembers lists the processes of group pgid that are not zombies
// (an exited helper may wait a while for its new parent, init, to reap it;
// it no longer runs), read from /proc.
func liveMembers(pgid int) ([]string, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, err
	}
	var live []string
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 {
			continue
		}
		if g, _ := strconv.Atoi(string(f[2])); g != pgid || string(f[0]) == "Z" {
			continue
		}
		live = append(live, string(bytes.TrimSpace(b[:i+1]))+" "+string(f[0]))
	}
	return live, nil
}
