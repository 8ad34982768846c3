package main

import "strings"

// readerFastPath runs the helpers a Desktop bridge heartbeat runs at every
// wake (claim-next-ready, list-arm-pending, list-pause-due,
// bridge-preflight) without building kong's model of the whole command
// tree, about a millisecond and a third of such a run. It takes the same
// command lines: `desktop <helper>` with --bridge-thread-id, --json and
// --home anywhere, each value after "=" or as the next word. Any other
// word (help, an unknown flag, a missing value, a value starting with
// "-") leaves the line to kong, which parses it the same way or explains
// what is wrong.
func readerFastPath(args []string, env *Env) (code int, ok bool) {
	var words []string
	var bridge, homeDir string
	var json bool
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		switch name {
		case "--json":
			switch {
			case !hasVal, val == "true":
				json = true
			case val == "false":
				json = false
			default:
				return 0, false
			}
			continue
		case "--home", "--bridge-thread-id":
			if !hasVal {
				if i+1 == len(args) || strings.HasPrefix(args[i+1], "-") {
					return 0, false
				}
				i++
				val = args[i]
			}
			if val == "" {
				return 0, false
			}
			if name == "--home" {
				homeDir = val
			} else {
				bridge = val
			}
			continue
		}
		if strings.HasPrefix(a, "-") {
			return 0, false
		}
		words = append(words, a)
	}
	if len(words) != 2 || words[0] != "desktop" || bridge == "" {
		return 0, false
	}
	var run func(*Env) error
	switch words[1] {
	case "claim-next-ready":
		run = (&DesktopClaimNextReadyCmd{BridgeThreadID: bridge}).Run
	case "list-arm-pending":
		run = (&DesktopListArmPendingCmd{BridgeThreadID: bridge}).Run
	case "list-pause-due":
		run = (&DesktopListPauseDueCmd{BridgeThreadID: bridge}).Run
	case "bridge-preflight":
		run = (&DesktopPreflightCmd{BridgeThreadID: bridge}).Run
	default:
		return 0, false
	}
	env.JSON, env.HomeFlag = json, homeDir
	if err := run(env); err != nil {
		return env.fail(err), true
	}
	return 0, true
}
