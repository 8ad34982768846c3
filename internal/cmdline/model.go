// Package cmdline parses cbth's command line into the command structs,
// reading the same struct tags kong reads (cmd, arg, name, help, required,
// default, placeholder, enum, type:"path", sep, xor, short).
//
// cbth used kong until every start of the binary (each job report, each
// CortexFS object exec) was found paying for it: kong imports os/user (cgo,
// so a dynamically linked binary when a C compiler is present), go/doc,
// regexp and net/url, runs their package init, and builds its model by
// reflection over the whole tree before looking at argv. This parser
// supports only what cbth's structs use, and reflects only over the
// commands on the path the command line names. kong stays as a test-only
// dependency: the differential tests in cmd/cbth hold both parsers to the
// same result on generated and fuzzed command lines.
package cmdline

import (
	"fmt"
	"maps"
	"reflect"
	"strings"
	"time"
	"unicode"
)

// App names the program for help and usage text.
type App struct {
	Name string // the program name, e.g. "cbth"
	Help string // one paragraph shown in the root's help
}

// Node is a command: the root struct or a field tagged cmd:"".
type Node struct {
	Name   string // "" for the root
	Help   string
	Parent *Node
	app    App
	target reflect.Value // the addressable struct
	Flags  []*Value      // the flags this node declares (the root's include --help)
	Args   []*Value      // positional arguments, in order

	// Subcommands are built only when asked for: a command line reflects
	// over the commands it names and no others.
	subs     []subField
	children []*Node
}

type subField struct {
	name, help string
	value      reflect.Value
	built      *Node
}

// Value is a flag or a positional argument bound to a struct field.
type Value struct {
	Name        string
	Help        string
	Placeholder string
	Default     string
	HasDefault  bool
	Required    bool
	Positional  bool
	Path        bool   // type:"path": made absolute, ~/ expanded
	Short       byte   // 0 when none
	Enum        string // the raw enum tag, "" when none
	Sep         rune   // slice separator; -1 for sep:"none"
	Xor         []string

	field reflect.Value
	// Parse state: whether the command line gave the value, and the value
	// being built (a scalar's last occurrence, a slice's elements so far).
	given bool
	tmp   reflect.Value
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	timeType     = reflect.TypeFor[time.Time]()
)

// newNode reflects over one struct: its flags, arguments and the names of
// its subcommands, not the subcommands themselves.
func newNode(app App, name, help string, parent *Node, v reflect.Value) (*Node, error) {
	n := &Node{Name: name, Help: help, Parent: parent, app: app, target: v}
	if err := n.addFields(v); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *Node) addFields(v reflect.Value) error {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		fv := v.Field(i)
		tag := sf.Tag
		_, isCmd := tag.Lookup("cmd")
		_, isArg := tag.Lookup("arg")
		if sf.Anonymous && sf.Type.Kind() == reflect.Struct && !isCmd && !isArg {
			// Embedded structs (Globals) contribute their fields here, even
			// an unexported one: its exported fields are still settable.
			if err := n.addFields(fv); err != nil {
				return err
			}
			continue
		}
		if !fv.CanSet() {
			continue // unexported: not part of the command line
		}
		name := tag.Get("name")
		if name == "" {
			name = kebab(sf.Name)
		}
		if isCmd {
			if sf.Type.Kind() != reflect.Struct {
				return fmt.Errorf("cmdline: %s.%s: cmd:\"\" needs a struct field", t, sf.Name)
			}
			n.subs = append(n.subs, subField{name: name, help: tag.Get("help"), value: fv})
			continue
		}
		val, err := newValue(t, sf, fv, name, isArg)
		if err != nil {
			return err
		}
		if isArg {
			n.Args = append(n.Args, val)
		} else {
			n.Flags = append(n.Flags, val)
		}
	}
	return nil
}

func newValue(owner reflect.Type, sf reflect.StructField, fv reflect.Value, name string, isArg bool) (*Value, error) {
	tag := sf.Tag
	val := &Value{
		Name:        name,
		Help:        tag.Get("help"),
		Placeholder: tag.Get("placeholder"),
		Enum:        tag.Get("enum"),
		Positional:  isArg,
		Sep:         ',',
		field:       fv,
	}
	val.Default, val.HasDefault = tag.Lookup("default")
	_, val.Required = tag.Lookup("required")
	if isArg && !val.HasDefault {
		val.Required = true // kong: arguments are required unless they have a default
	}
	switch typ := tag.Get("type"); typ {
	case "":
	case "path":
		val.Path = true
	default:
		return nil, fmt.Errorf("cmdline: %s.%s: unsupported type:%q", owner, sf.Name, typ)
	}
	switch s := tag.Get("sep"); {
	case s == "none":
		val.Sep = -1
	case s != "":
		r := []rune(s)
		if len(r) != 1 {
			return nil, fmt.Errorf("cmdline: %s.%s: sep must be one character or none", owner, sf.Name)
		}
		val.Sep = r[0]
	}
	if s := tag.Get("short"); s != "" {
		if len(s) != 1 || s[0] >= 0x80 {
			return nil, fmt.Errorf("cmdline: %s.%s: short must be one ASCII character", owner, sf.Name)
		}
		val.Short = s[0]
	}
	if x := tag.Get("xor"); x != "" {
		val.Xor = strings.FieldsFunc(x, func(r rune) bool { return r == ',' || r == ' ' })
	}
	typ := sf.Type
	if typ.Kind() == reflect.Slice {
		if isArg {
			return nil, fmt.Errorf("cmdline: %s.%s: slice arguments are not supported", owner, sf.Name)
		}
		typ = typ.Elem()
	}
	if isArg && typ.Kind() == reflect.Bool {
		return nil, fmt.Errorf("cmdline: %s.%s: bool arguments are not supported", owner, sf.Name)
	}
	if !supported(typ) || val.Path && typ.Kind() != reflect.String {
		return nil, fmt.Errorf("cmdline: %s.%s: unsupported field type %s", owner, sf.Name, sf.Type)
	}
	return val, nil
}

func supported(t reflect.Type) bool {
	if t == durationType || t == timeType {
		return true
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// Type is the Go type of the bound field.
func (v *Value) Type() reflect.Type { return v.field.Type() }

// IsBool reports whether the flag takes no value (--flag means true).
func (v *Value) IsBool() bool { return v.field.Kind() == reflect.Bool }

// IsSlice reports whether the flag may repeat, each occurrence adding.
func (v *Value) IsSlice() bool { return v.field.Kind() == reflect.Slice }

// EnumValues is the enum tag's list, each entry trimmed as kong does.
func (v *Value) EnumValues() []string {
	if v.Enum == "" {
		return nil
	}
	parts := strings.Split(v.Enum, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// child returns the subcommand called name, building only that one.
func (n *Node) child(name string) (*Node, error) {
	for i := range n.subs {
		s := &n.subs[i]
		if s.name != name {
			continue
		}
		if s.built == nil {
			c, err := newNode(n.app, s.name, s.help, n, s.value)
			if err != nil {
				return nil, err
			}
			s.built = c
		}
		return s.built, nil
	}
	return nil, nil
}

// Children builds and returns every subcommand, in declaration order.
func (n *Node) Children() ([]*Node, error) {
	if n.children == nil && len(n.subs) > 0 {
		for _, s := range n.subs {
			c, err := n.child(s.name)
			if err != nil {
				return nil, err
			}
			n.children = append(n.children, c)
		}
	}
	return n.children, nil
}

// Tree builds the whole command tree of root, a pointer to a struct, for
// callers that walk every command (completion scripts, tests).
func (a App) Tree(root any) (*Node, error) {
	n, err := a.rootNode(root)
	if err != nil {
		return nil, err
	}
	var build func(*Node) error
	build = func(n *Node) error {
		cs, err := n.Children()
		if err != nil {
			return err
		}
		for _, c := range cs {
			if err := build(c); err != nil {
				return err
			}
		}
		return nil
	}
	return n, build(n)
}

func (a App) rootNode(root any) (*Node, error) {
	v := reflect.ValueOf(root)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("cmdline: expected a pointer to a struct, got %T", root)
	}
	n, err := newNode(a, "", a.Help, nil, v.Elem())
	if err != nil {
		return nil, err
	}
	help := &Value{Name: "help", Short: 'h', Help: "Show context-sensitive help.", Sep: ',',
		field: reflect.New(reflect.TypeFor[bool]()).Elem()}
	n.Flags = append([]*Value{help}, n.Flags...)
	return n, nil
}

// Path is the command's words below the root, e.g. "job submit".
func (n *Node) Path() string {
	if n.Parent == nil {
		return ""
	}
	if p := n.Parent.Path(); p != "" {
		return p + " " + n.Name
	}
	return n.Name
}

// FullPath is Path with the program name in front.
func (n *Node) FullPath() string {
	return strings.TrimSpace(n.app.Name + " " + n.Path())
}

// Target is a pointer to the command's struct, for calling its Run method.
func (n *Node) Target() any { return n.target.Addr().Interface() }

// runnable reports whether the command has a Run method, so that it may be
// selected without one of its subcommands.
func (n *Node) runnable() bool {
	return n.target.Addr().MethodByName("Run").IsValid()
}

// kebab is kong's flag and command naming: the field name split into words
// where the kind of character changes (lower, upper, digit, other), an
// upper-case run giving its last letter to a following lower-case word
// ("ThreadID" -> thread-id, "JSONL" -> jsonl, "BaseURL" -> base-url).
func kebab(s string) string {
	if b, ok := kebabASCII(s); ok {
		return b
	}
	return kebabRunes(s)
}

func kebabRunes(s string) string {
	class := func(r rune) int {
		switch {
		case unicode.IsLower(r):
			return 1
		case unicode.IsUpper(r):
			return 2
		case unicode.IsDigit(r):
			return 3
		}
		return 4
	}
	var words [][]rune
	last := 0
	for _, r := range s {
		c := class(r)
		if c == last {
			words[len(words)-1] = append(words[len(words)-1], r)
		} else {
			words = append(words, []rune{r})
		}
		last = c
	}
	for i := 0; i+1 < len(words); i++ {
		if unicode.IsUpper(words[i][0]) && unicode.IsLower(words[i+1][0]) {
			w := words[i]
			words[i+1] = append([]rune{w[len(w)-1]}, words[i+1]...)
			words[i] = w[:len(w)-1]
		}
	}
	parts := make([]string, 0, len(words))
	for _, w := range words {
		if len(w) > 0 {
			parts = append(parts, strings.ToLower(string(w)))
		}
	}
	return strings.Join(parts, "-")
}

// knownTags are the struct tag keys the parser reads. Keys of other
// encoders may sit beside them.
var knownTags = map[string]bool{
	"cmd": true, "arg": true, "name": true, "help": true, "required": true,
	"default": true, "placeholder": true, "enum": true, "type": true,
	"sep": true, "xor": true, "short": true,
	"json": false, "toml": false, "yaml": false,
}

// Check walks the whole tree of root and reports what the parser would
// silently get wrong: a tag it does not read (kong's env, hidden, aliases,
// negatable, ...), a flag name or short flag used twice on one path, a
// subcommand name used twice, a command with both arguments and
// subcommands, or an optional enum without a default. Parse does not check, to keep each start
// cheap; a test calls Check on the real tree.
func (a App) Check(root any) error {
	n, err := a.Tree(root)
	if err != nil {
		return err
	}
	var walk func(n *Node, seen map[string]bool) error
	walk = func(n *Node, seen map[string]bool) error {
		if err := checkTags(n.target.Type()); err != nil {
			return err
		}
		if len(n.Args) > 0 && len(n.subs) > 0 {
			return fmt.Errorf("cmdline: %s has both arguments and subcommands", n.FullPath())
		}
		for _, v := range append(append([]*Value(nil), n.Flags...), n.Args...) {
			if v.Enum != "" && !v.IsSlice() && !v.Required && !v.HasDefault {
				// kong refuses these; the zero value would fail the enum.
				return fmt.Errorf("cmdline: %s: enum %s needs required or a default", n.FullPath(), v.summary())
			}
		}
		seen = maps.Clone(seen)
		for _, f := range n.Flags {
			for _, k := range []string{"--" + f.Name, "-" + string(f.Short)} {
				if k == "-\x00" {
					continue
				}
				if seen[k] {
					return fmt.Errorf("cmdline: %s: flag %s declared twice on its path", n.FullPath(), k)
				}
				seen[k] = true
			}
		}
		names := map[string]bool{}
		cs, err := n.Children()
		if err != nil {
			return err
		}
		for _, c := range cs {
			if names[c.Name] {
				return fmt.Errorf("cmdline: %s: two commands named %s", n.FullPath(), c.Name)
			}
			names[c.Name] = true
			if err := walk(c, seen); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(n, map[string]bool{})
}

func checkTags(t reflect.Type) error {
	for i := range t.NumField() {
		sf := t.Field(i)
		keys, err := tagKeys(sf.Tag)
		if err != nil {
			return fmt.Errorf("cmdline: %s.%s: %v", t, sf.Name, err)
		}
		for _, k := range keys {
			if _, ok := knownTags[k]; !ok {
				return fmt.Errorf("cmdline: %s.%s: tag %s:\"\" is not supported", t, sf.Name, k)
			}
		}
		_, isCmd := sf.Tag.Lookup("cmd")
		if sf.Anonymous && sf.Type.Kind() == reflect.Struct && !isCmd {
			if err := checkTags(sf.Type); err != nil {
				return err
			}
		}
	}
	return nil
}

// tagKeys lists the keys of a conventional struct tag (key:"value" ...).
func tagKeys(tag reflect.StructTag) ([]string, error) {
	var keys []string
	s := string(tag)
	for {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			return keys, nil
		}
		key, rest, ok := strings.Cut(s, ":\"")
		if !ok || key == "" || strings.ContainsAny(key, " \"") {
			return nil, fmt.Errorf("malformed tag %q", string(tag))
		}
		j := 0
		for j < len(rest) && rest[j] != '"' {
			if rest[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(rest) {
			return nil, fmt.Errorf("malformed tag %q", string(tag))
		}
		keys = append(keys, key)
		s = rest[j+1:]
	}
}

// kebabASCII is kebab without the rune slices, for the usual ASCII field
// name: every name on the path is converted on each start. A dash goes
// where the character class changes, except that an upper-case letter
// followed by a lower-case one starts the new word itself.
func kebabASCII(s string) (string, bool) {
	class := func(c byte) int {
		switch {
		case 'a' <= c && c <= 'z':
			return 1
		case 'A' <= c && c <= 'Z':
			return 2
		case '0' <= c && c <= '9':
			return 3
		}
		return 4
	}
	b := make([]byte, 0, len(s)+4)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			return "", false
		}
		if i > 0 {
			prev, cur := class(s[i-1]), class(c)
			next := 0
			if i+1 < len(s) {
				next = class(s[i+1])
			}
			if prev != cur && !(prev == 2 && cur == 1) || prev == 2 && cur == 2 && next == 1 {
				b = append(b, '-')
			}
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return string(b), true
}
