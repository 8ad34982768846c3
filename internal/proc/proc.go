// Package proc reads what the kernel says of a process: its start time,
// which with its pid names it for the life of the machine (pids are
// reused, the pair is not), and its parent and uid.
package proc

// Alive reports whether process pid is still the one that started at
// start (a zombie included).
func Alive(pid int, start string) bool {
	now, ok, err := Start(pid)
	return err == nil && ok && start != "" && now == start
}
