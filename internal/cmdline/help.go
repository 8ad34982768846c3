package cmdline

import (
	"fmt"
	"io"
	"reflect"
	"strings"
)

const helpWidth = 80

// WriteHelp prints n's full help: usage line, description, arguments,
// every flag it accepts (its ancestors' included), and the commands below
// it. The layout follows kong's so that help reads as it did before.
func (n *Node) WriteHelp(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n", n.usageLine())
	if n.Help != "" {
		b.WriteString("\n")
		wrap(&b, n.Help, "", helpWidth)
	}
	if len(n.Args) > 0 {
		b.WriteString("\nArguments:\n")
		var rows [][2]string
		for _, a := range n.Args {
			rows = append(rows, [2]string{a.summary(), a.helpText()})
		}
		columns(&b, rows)
	}
	var groups [][]*Value
	for m := n; m != nil; m = m.Parent {
		if len(m.Flags) > 0 {
			groups = append([][]*Value{m.Flags}, groups...)
		}
	}
	if len(groups) > 0 {
		b.WriteString("\nFlags:\n")
		var rows [][2]string
		for i, g := range groups {
			if i > 0 {
				rows = append(rows, [2]string{})
			}
			for _, f := range g {
				left := "    --" + f.Name
				if f.Short != 0 {
					left = "-" + string(f.Short) + ", --" + f.Name
				}
				if !f.IsBool() {
					left += "=" + f.placeholder()
				}
				rows = append(rows, [2]string{left, f.helpText()})
			}
		}
		columns(&b, rows)
	}
	leaves, err := n.leaves()
	if err != nil {
		return err
	}
	if len(leaves) > 0 {
		b.WriteString("\nCommands:\n")
		for i, l := range leaves {
			if i > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "  %s\n", l.summaryLine())
			if l.Help != "" {
				wrap(&b, l.Help, "    ", helpWidth)
			}
		}
		if n.Parent == nil {
			fmt.Fprintf(&b, "\nRun \"%s <command> --help\" for more information on a command.\n", n.app.Name)
		}
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// Usage is the short usage printed after a usage error.
func (n *Node) Usage() string {
	return fmt.Sprintf("Usage: %s\nRun \"%s --help\" for more information.\n", n.usageLine(), n.FullPath())
}

func (n *Node) usageLine() string {
	return strings.TrimSpace(n.app.Name + " " + n.summaryLine())
}

// summaryLine is the command's path, its required flags, its arguments,
// "<command>" when it has subcommands and "[flags]" when any optional flag
// applies.
func (n *Node) summaryLine() string {
	parts := []string{}
	if p := n.Path(); p != "" {
		parts = append(parts, p)
	}
	optional := false
	for m := n; m != nil; m = m.Parent {
		var req []string
		for _, f := range m.Flags {
			switch {
			case f.Required:
				req = append(req, f.usage())
			case f.Name != "help" || m.Parent != nil:
				optional = true
			}
		}
		parts = append(parts, req...)
	}
	for _, a := range n.Args {
		if a.Required {
			parts = append(parts, a.summary())
		} else {
			parts = append(parts, "["+a.summary()+"]")
		}
	}
	if len(n.subs) > 0 {
		parts = append(parts, "<command>")
	}
	if optional {
		parts = append(parts, "[flags]")
	}
	return strings.Join(parts, " ")
}

// leaves are the commands under n that have no subcommands, depth first.
func (n *Node) leaves() ([]*Node, error) {
	var out []*Node
	cs, err := n.Children()
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		if len(c.subs) == 0 {
			out = append(out, c)
			continue
		}
		l, err := c.leaves()
		if err != nil {
			return nil, err
		}
		out = append(out, l...)
	}
	return out, nil
}

// usage is a flag as the usage line shows it: --name=PLACEHOLDER.
func (v *Value) usage() string {
	if v.IsBool() {
		return "--" + v.Name
	}
	return "--" + v.Name + "=" + v.placeholder()
}

func (v *Value) placeholder() string {
	tail := ""
	if v.IsSlice() && v.Sep != -1 {
		tail = string(v.Sep) + "..."
	}
	if v.Placeholder != "" {
		return v.Placeholder + tail
	}
	if vals := v.EnumValues(); len(vals) > 0 {
		var nonEmpty []string
		for _, e := range vals {
			if e != "" {
				nonEmpty = append(nonEmpty, e)
			}
		}
		return strings.Join(nonEmpty, "|") + tail
	}
	t := v.field.Type()
	if t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	switch {
	case t == durationType:
		return "DURATION" + tail
	case t == timeType:
		return "TIME" + tail
	case v.Path:
		return "PATH" + tail
	case t.Kind() == reflect.String:
		return "STRING" + tail
	case t.Kind() == reflect.Bool:
		return "BOOL" + tail
	}
	return "INT" + tail
}

// helpText is the flag's help with its choices and default appended.
func (v *Value) helpText() string {
	h := v.Help
	var notes []string
	if vals := v.EnumValues(); len(vals) > 0 {
		q := make([]string, len(vals))
		for i, e := range vals {
			q[i] = e
			if e == "" {
				q[i] = `""`
			}
		}
		notes = append(notes, "one of: "+strings.Join(q, ", "))
	}
	if v.HasDefault && v.Default != "" && !v.IsBool() {
		notes = append(notes, "default: "+v.Default)
	}
	if len(notes) > 0 {
		if h != "" {
			h += " "
		}
		h += "(" + strings.Join(notes, "; ") + ")"
	}
	return h
}

// columns writes rows as two indented columns; a left cell too wide for
// the column puts its help on the next line.
func columns(b *strings.Builder, rows [][2]string) {
	const maxLeft = 30
	width := 0
	for _, r := range rows {
		if l := len(r[0]); l <= maxLeft && l > width {
			width = l
		}
	}
	indent := strings.Repeat(" ", 2+width+4)
	for _, r := range rows {
		if r[0] == "" && r[1] == "" {
			b.WriteString("\n")
			continue
		}
		if len(r[0]) > width {
			fmt.Fprintf(b, "  %s\n", r[0])
			if r[1] != "" {
				wrap(b, r[1], indent, helpWidth)
			}
			continue
		}
		var h strings.Builder
		wrap(&h, r[1], indent, helpWidth)
		text := strings.TrimPrefix(h.String(), indent)
		if text == "" {
			fmt.Fprintf(b, "  %s\n", r[0])
			continue
		}
		fmt.Fprintf(b, "  %-*s    %s", width, r[0], text)
	}
}

// wrap writes text as lines of at most width columns, each after prefix.
func wrap(b *strings.Builder, text, prefix string, width int) {
	line := prefix
	empty := true
	for _, word := range strings.Fields(text) {
		if !empty && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line, empty = prefix, true
		}
		if !empty {
			line += " "
		}
		line += word
		empty = false
	}
	if !empty {
		b.WriteString(line + "\n")
	}
}
