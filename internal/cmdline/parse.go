package cmdline

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Result is what a command line selected.
type Result struct {
	// Node is the selected command; the root when the line named none.
	Node *Node
	// Help is set when -h or --help appeared: print Node's help and exit 0
	// without running anything. kong gives help precedence over every check
	// that follows reading the line (required flags, enums), so does this.
	Help bool
}

// Error is a usage error: the line does not fit the command tree.
type Error struct {
	// Node is the deepest command the line reached, for the short usage.
	Node *Node
	msg  string
}

func (e *Error) Error() string { return e.msg }

func usagef(n *Node, format string, args ...any) *Error {
	return &Error{Node: n, msg: fmt.Sprintf(format, args...)}
}

// Parse fills root, a pointer to the command-tree struct, from args (the
// command line without the program name).
//
// The grammar is kong's, for the features cbth uses: words that do not
// start with '-' (and "-" itself) are positional arguments of the current
// command or else name a subcommand; "--" makes every later word
// positional; --name=value and --name value; -x short flags, which may be
// clustered (-fn5); a command's flags are accepted after its name and
// after any of its subcommands' names, not before. A separate value word
// must not start with '-' unless it is exactly "-" (use --name=-value). A
// scalar flag given twice keeps the last value; a slice flag collects every
// occurrence, split on its separator.
func (a App) Parse(root any, args []string) (*Result, error) {
	n, err := a.rootNode(root)
	if err != nil {
		return nil, err
	}
	p := &parser{args: args, node: n, path: []*Node{n}}
	p.flags = append(p.flags, n.Flags...)
	if err := p.scan(); err != nil {
		return nil, err
	}
	if p.help {
		return &Result{Node: p.node, Help: true}, nil
	}
	for _, n := range p.path {
		if err := apply(n); err != nil {
			return nil, err
		}
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return &Result{Node: p.node}, nil
}

type parser struct {
	args  []string
	i     int
	node  *Node
	path  []*Node  // root first, selected command last
	flags []*Value // the flags of every command on the path so far
	pos   int      // next positional argument of node
	dash  bool     // "--" seen: every word is positional
	help  bool
}

// token is a candidate flag value. An inline value (after '=', or the rest
// of a short-flag cluster) is always a value; a separate word is one only
// if it does not look like a flag.
type token struct {
	s      string
	inline bool
	eol    bool
}

func (t token) isValue() bool {
	return !t.eol && (t.inline || t.s == "-" || !strings.HasPrefix(t.s, "-"))
}

func (t token) String() string {
	if t.eol {
		return "end of line"
	}
	return strconv.Quote(t.s)
}

func (p *parser) scan() error {
	for p.i < len(p.args) {
		a := p.args[p.i]
		p.i++
		switch {
		case p.dash || a == "-" || !strings.HasPrefix(a, "-"):
			if err := p.positional(a); err != nil {
				return err
			}
		case a == "--":
			p.dash = true
		case strings.HasPrefix(a, "--"):
			name, val, inline := strings.Cut(a[2:], "=")
			f := p.lookup(func(f *Value) bool { return f.Name == name })
			if f == nil {
				return p.unknown("--" + name)
			}
			t := token{s: val, inline: true}
			if !inline && !f.IsBool() {
				t = p.next() // a bool flag takes its value only after '='
			}
			if err := p.set(f, t, inline); err != nil {
				return err
			}
		default: // one or more short flags: -f, -n5, -fn5
			rest := a[1:]
			for rest != "" {
				c := rest[0]
				rest = rest[1:]
				f := p.lookup(func(f *Value) bool { return f.Short != 0 && f.Short == c })
				if f == nil {
					return p.unknown("-" + string([]byte{c}))
				}
				if f.IsBool() {
					if err := p.set(f, token{}, false); err != nil {
						return err
					}
					continue
				}
				t := token{s: rest, inline: true}
				if rest == "" {
					t = p.next()
				}
				rest = ""
				if err := p.set(f, t, false); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// next takes the following word as a flag's value, whatever it is; set
// rejects it if it looks like a flag.
func (p *parser) next() token {
	if p.i >= len(p.args) {
		return token{eol: true}
	}
	p.i++
	return token{s: p.args[p.i-1]}
}

func (p *parser) lookup(match func(*Value) bool) *Value {
	for _, f := range p.flags {
		if match(f) {
			return f
		}
	}
	return nil
}

func (p *parser) unknown(flag string) error {
	return usagef(p.node, "unknown flag %s", flag)
}

func (p *parser) positional(a string) error {
	if p.pos < len(p.node.Args) {
		v := p.node.Args[p.pos]
		p.pos++
		return p.set(v, token{s: a, inline: true}, false)
	}
	c, err := p.node.child(a)
	if err != nil {
		return err
	}
	if c == nil {
		return usagef(p.node, "unexpected argument %s", a)
	}
	p.node = c
	p.path = append(p.path, c)
	p.flags = append(p.flags, c.Flags...)
	p.pos = 0
	return nil
}

// set records one occurrence of v with its value token. withEq tells a
// bool flag whether it was given as --flag=value.
func (p *parser) set(v *Value, t token, withEq bool) error {
	if v == p.path[0].Flags[0] { // rootNode puts --help first
		p.help = true
	}
	if !v.given {
		v.tmp = reflect.New(v.field.Type()).Elem()
		if v.IsSlice() {
			v.tmp.Set(reflect.MakeSlice(v.field.Type(), 0, 0))
		}
	}
	v.given = true
	if v.IsBool() {
		b := true
		if withEq {
			var err error
			if b, err = parseBool(t.s); err != nil {
				return usagef(p.node, "%s: %v", v.summary(), err)
			}
		}
		v.tmp.SetBool(b)
		return nil
	}
	if v.IsSlice() {
		if t.eol {
			return usagef(p.node, "%s: missing value", v.summary())
		}
		for _, s := range split(t.s, v.Sep) {
			e := token{s: s, inline: t.inline}
			if !e.isValue() {
				return p.notValue(v, e)
			}
			x, _, err := decode(v, v.field.Type().Elem(), e.s)
			if err != nil {
				return usagef(p.node, "%s: %v", v.summary(), err)
			}
			v.tmp.Set(reflect.Append(v.tmp, x))
		}
		return nil
	}
	if !t.isValue() {
		return p.notValue(v, t)
	}
	x, keep, err := decode(v, v.field.Type(), t.s)
	if err != nil {
		return usagef(p.node, "%s: %v", v.summary(), err)
	}
	if !keep {
		v.tmp.Set(x)
	}
	return nil
}

func (p *parser) notValue(v *Value, t token) error {
	if t.eol {
		return usagef(p.node, "%s: expected a value", v.summary())
	}
	return usagef(p.node, "%s: expected a value but got %s (a flag); use %s=%s if that is the value", v.summary(), t, v.summary(), t)
}

func (v *Value) summary() string {
	if v.Positional {
		return "<" + v.Name + ">"
	}
	return "--" + v.Name
}

// decode converts one word to a value of type t. keep=true means "leave the
// value as it was": kong's path type ignores an empty word when the flag
// has a default.
func decode(v *Value, t reflect.Type, s string) (x reflect.Value, keep bool, err error) {
	x = reflect.New(t).Elem()
	switch {
	case t == durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return x, false, fmt.Errorf("expected a duration but got %q", s)
		}
		x.SetInt(int64(d))
	case t == timeType:
		tm, err := time.Parse(time.RFC3339, validUTF8(s))
		if err != nil {
			return x, false, fmt.Errorf("expected an RFC 3339 time but got %q", s)
		}
		x.Set(reflect.ValueOf(tm))
	case t.Kind() == reflect.String:
		s = validUTF8(s)
		if v.Path {
			if v.HasDefault && s == "" {
				return x, true, nil
			}
			if s != "-" {
				s = ExpandPath(s)
			}
		}
		x.SetString(s)
	case t.Kind() == reflect.Bool:
		b, err := parseBool(s)
		if err != nil {
			return x, false, err
		}
		x.SetBool(b)
	case x.CanInt():
		n, err := strconv.ParseInt(s, 0, t.Bits())
		if err != nil {
			return x, false, fmt.Errorf("expected a %d-bit integer but got %q", t.Bits(), s)
		}
		x.SetInt(n)
	case x.CanUint():
		n, err := strconv.ParseUint(s, 0, t.Bits())
		if err != nil {
			return x, false, fmt.Errorf("expected a %d-bit unsigned integer but got %q", t.Bits(), s)
		}
		x.SetUint(n)
	default:
		return x, false, fmt.Errorf("unsupported type %s", t)
	}
	return x, false, nil
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "1", "yes":
		return true, nil
	case "false", "0", "no":
		return false, nil
	}
	return false, fmt.Errorf("expected true, 1, yes, false, 0 or no but got %q", s)
}

// validUTF8 replaces each byte that is not part of valid UTF-8 with U+FFFD.
// kong passes string values through a JSON round trip, which does exactly
// this; matching it keeps a stray byte from meaning different things to
// the two parsers (and keeps invalid UTF-8 out of the event log).
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// split cuts a slice flag's word on sep (-1: never). A backslash before
// sep keeps it literal; a backslash before anything else stays. Empty
// pieces count except a trailing one, so "" gives no element and "a,"
// one. Invalid UTF-8 bytes become U+FFFD, as in kong.
func split(s string, sep rune) []string {
	if sep == -1 {
		return []string{s}
	}
	var out []string
	var cur strings.Builder
	escaped := false
	for i, r := range s {
		switch {
		case escaped:
			if r != sep {
				cur.WriteByte('\\')
			}
			cur.WriteRune(r)
			escaped = false
		case r == '\\' && i < len(s)-1:
			escaped = true
		case r == sep:
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// ExpandPath makes a type:"path" value absolute: "~/x" under the home
// directory, anything relative under the working directory. It reads the
// home from $HOME (os.UserHomeDir), not the password database: os/user
// would link cgo into the binary.
func ExpandPath(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	if strings.HasPrefix(p, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return p
		}
		return filepath.Join(home, p[2:])
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return abs
}

// apply writes a command's values into its struct: what the line gave,
// else the default, else zero.
func apply(n *Node) error {
	for _, vs := range [][]*Value{n.Flags, n.Args} {
		for _, v := range vs {
			switch {
			case v.given:
				v.field.Set(v.tmp)
			case v.HasDefault:
				x, err := defaultValue(v)
				if err != nil {
					return err
				}
				v.field.Set(x)
			default:
				v.field.Set(reflect.Zero(v.field.Type()))
			}
		}
	}
	return nil
}

func defaultValue(v *Value) (reflect.Value, error) {
	t := v.field.Type()
	bad := func(err error) error {
		return fmt.Errorf("cmdline: default of %s: %v", v.summary(), err)
	}
	if v.IsSlice() {
		x := reflect.MakeSlice(t, 0, 0)
		for _, s := range split(v.Default, v.Sep) {
			e, _, err := decode(v, t.Elem(), s)
			if err != nil {
				return x, bad(err)
			}
			x = reflect.Append(x, e)
		}
		return x, nil
	}
	x, keep, err := decode(v, t, v.Default)
	if err != nil {
		return x, bad(err)
	}
	if keep {
		x = reflect.Zero(t)
	}
	return x, nil
}

// set reports kong's notion of a value being present: given on the line,
// or carrying a default.
func (v *Value) set() bool { return v.given || v.HasDefault }

func (p *parser) validate() error {
	// Enums: every value on the path that was given or has a default.
	for _, n := range p.path {
		for _, vs := range [][]*Value{n.Args, n.Flags} {
			for _, v := range vs {
				if v.Enum == "" || !(v.given || !v.Required || v.HasDefault) {
					continue
				}
				if err := checkEnum(p.node, v); err != nil {
					return err
				}
			}
		}
	}
	for _, n := range p.path {
		if err := missingFlags(p.node, n); err != nil {
			return err
		}
	}
	var missing []string
	for _, a := range p.node.Args {
		if a.Required && !a.given {
			missing = append(missing, strconv.Quote(a.summary()))
		}
	}
	if len(p.node.subs) > 0 && !p.node.runnable() {
		for _, s := range p.node.subs {
			missing = append(missing, strconv.Quote(s.name))
		}
	}
	switch {
	case len(missing) == 1:
		return usagef(p.node, "expected %s", missing[0])
	case len(missing) > 1:
		return usagef(p.node, "expected one of %s", strings.Join(missing, ", "))
	}
	for _, n := range p.path {
		seen := map[string]*Value{}
		for _, f := range n.Flags {
			if !f.set() {
				continue
			}
			for _, g := range f.Xor {
				if o := seen[g]; o != nil {
					return usagef(p.node, "--%s and --%s can't be used together", o.Name, f.Name)
				}
				seen[g] = f
			}
		}
	}
	return nil
}

func checkEnum(at *Node, v *Value) error {
	allowed := v.EnumValues()
	ok := func(s string) bool {
		for _, a := range allowed {
			if a == s {
				return true
			}
		}
		return false
	}
	var vals []string
	if v.IsSlice() {
		for i := range v.field.Len() {
			vals = append(vals, fmt.Sprint(v.field.Index(i).Interface()))
		}
	} else {
		vals = []string{fmt.Sprint(v.field.Interface())}
	}
	for _, s := range vals {
		if !ok(s) {
			q := make([]string, len(allowed))
			for i, a := range allowed {
				q[i] = strconv.Quote(a)
			}
			return usagef(at, "%s must be one of %s but got %q", v.summary(), strings.Join(q, ","), s)
		}
	}
	return nil
}

// missingFlags reports required flags of n that the line left out. A
// required flag in an xor group is satisfied by any member of the group;
// as in kong, the group is reported only when more than one required
// member is missing.
func missingFlags(at *Node, n *Node) error {
	var missing []string
	groupSet := map[string]bool{}
	groupMissing := map[string][]string{}
	for _, f := range n.Flags {
		if f.set() {
			for _, g := range f.Xor {
				groupSet[g] = true
			}
		}
	}
	for _, f := range n.Flags {
		if !f.Required || f.set() {
			continue
		}
		if len(f.Xor) == 0 {
			missing = append(missing, f.usage())
			continue
		}
		for _, g := range f.Xor {
			if !groupSet[g] {
				groupMissing[g] = append(groupMissing[g], f.usage())
			}
		}
	}
	for _, fs := range groupMissing {
		if len(fs) > 1 {
			missing = append(missing, strings.Join(fs, " or "))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(missing)
	return usagef(at, "missing flags: %s", strings.Join(missing, ", "))
}
