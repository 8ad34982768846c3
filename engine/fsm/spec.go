package fsm

import (
	"fmt"
	"strings"
)

// Markdown renders every table as the project's spec/fsm.md: a table of
// moves, a table of updates and a Mermaid state diagram per machine. The
// file is generated; a test fails when it and the code disagree.
func Markdown() string {
	var b strings.Builder
	b.WriteString("# State machines\n\n")
	b.WriteString("<!-- Generated from engine/fsm/fsm.go by `go test ./engine/fsm -update`. Do not edit. -->\n\n")
	b.WriteString("Every event appended to the log is checked against its aggregate's machine when it is written\n")
	b.WriteString("and again when the log is replayed or verified. `none` is the pseudo-state of an aggregate that\n")
	b.WriteString("does not exist yet. A *move* changes state; an *update* records data and is legal only in the\n")
	b.WriteString("listed states. Any other (state, event) pair is rejected with code `ESTATE` and appends nothing.\n")
	for _, t := range Tables() {
		fmt.Fprintf(&b, "\n## %s\n\n", t.Kind)
		fmt.Fprintf(&b, "States: %s.\n\n", "`"+strings.Join(t.States, "`, `")+"`")
		b.WriteString("| event | from | to |\n|---|---|---|\n")
		for _, mv := range t.Moves {
			fmt.Fprintf(&b, "| `%s` | %s | `%s` |\n", mv.Event, "`"+strings.Join(mv.From, "`, `")+"`", mv.To)
		}
		if len(t.Updates) > 0 {
			b.WriteString("\n| update | legal in |\n|---|---|\n")
			for _, u := range t.Updates {
				fmt.Fprintf(&b, "| `%s` | %s |\n", u.Event, "`"+strings.Join(u.In, "`, `")+"`")
			}
		}
		b.WriteString("\n```mermaid\nstateDiagram-v2\n")
		for _, mv := range t.Moves {
			for _, f := range mv.From {
				from := f
				if f == None {
					from = "[*]"
				}
				fmt.Fprintf(&b, "    %s --> %s: %s\n", from, mv.To, mv.Event)
			}
		}
		b.WriteString("```\n")
	}
	return b.String()
}
