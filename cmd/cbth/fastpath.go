package main

import (
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/alecthomas/kong"
)

// Scripts run `cbth job submit|complete|fail|cancel` once per report, so
// those lines skip kong: building kong's model (reflection over every tag,
// help interpolation) costs more CPU than the rest of the command. The
// fast parser reads the very same structs and tags, accepts only plain
// `--flag value`, `--flag=value` and `--json`, and hands anything else
// (help, a missing or repeated flag, an unknown tag, a value that looks
// like a flag, invalid UTF-8) to kong, which gives the error or the help.
// TestFastPathMatchesKong holds the two parsers to the same result.

// runnable is a command that runs with the CLI environment.
type runnable interface{ Run(env *Env) error }

// fastParse returns the command and globals of a job verb line when the
// fast parser can take it, and ok=false otherwise. The verbs and their
// structs are jobTree's, so the two parsers cannot disagree on which
// struct a verb fills.
func fastParse(args []string) (cmd runnable, g Globals, ok bool) {
	tree, _ := jobTree(args)
	if tree == nil {
		return nil, g, false
	}
	verb := reflect.ValueOf(tree).Elem().FieldByName("Job").Field(0)
	cmd, ok = verb.Addr().Interface().(runnable)
	if !ok {
		return nil, g, false
	}
	// A field with a tag the fast parser does not know (a positional
	// argument, a default, an enum) sends the whole verb to kong.
	for i := range verb.NumField() {
		if !onlyFastTags(verb.Type().Field(i).Tag) {
			return nil, g, false
		}
	}
	if !parseFlags(args[2:], verb, reflect.ValueOf(&g).Elem()) {
		return nil, g, false
	}
	return cmd, g, true
}

// parseFlags fills the string fields of cmd and globals from args. It
// reports false for anything it does not handle exactly as kong would.
func parseFlags(args []string, cmd, globals reflect.Value) bool {
	for _, a := range args {
		if !utf8.ValidString(a) {
			return false // kong rewrites invalid UTF-8; let it
		}
	}
	seen := map[string]bool{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") || a == "--" {
			return false
		}
		name, val, hasVal := strings.Cut(a[2:], "=")
		if seen[name] {
			return false
		}
		seen[name] = true
		if name == "json" {
			if hasVal {
				return false
			}
			globals.FieldByName("JSON").SetBool(true)
			continue
		}
		f, tag, ok := flagField(name, cmd, globals)
		if !ok {
			return false
		}
		if !hasVal {
			if i+1 == len(args) {
				return false
			}
			i++
			val = args[i]
		}
		if strings.HasPrefix(val, "-") {
			return false // kong may read it as a flag; let it decide
		}
		if tag.Get("type") == "path" {
			val = kong.ExpandPath(val)
		}
		f.SetString(val)
	}
	// Every required flag must be there, or kong reports which is missing.
	t := cmd.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		if _, req := sf.Tag.Lookup("required"); req && !seen[flagName(sf)] {
			return false
		}
	}
	return true
}

// fastTag reports whether the fast parser understands a struct tag key;
// a field with any other kong tag (default, env, enum, short, ...) keeps
// its command on kong.
func fastTag(key string) bool {
	switch key {
	case "help", "required", "name", "placeholder", "type":
		return true
	}
	return false
}

func flagField(name string, vs ...reflect.Value) (reflect.Value, reflect.StructTag, bool) {
	for _, v := range vs {
		t := v.Type()
		for i := range t.NumField() {
			sf := t.Field(i)
			if flagName(sf) != name {
				continue
			}
			if sf.Type.Kind() != reflect.String || !onlyFastTags(sf.Tag) {
				return reflect.Value{}, "", false
			}
			if typ := sf.Tag.Get("type"); typ != "" && typ != "path" {
				return reflect.Value{}, "", false
			}
			return v.Field(i), sf.Tag, true
		}
	}
	return reflect.Value{}, "", false
}

// flagName is kong's flag name of a field: its name tag, else the field
// name in kebab case.
func flagName(sf reflect.StructField) string {
	if n := sf.Tag.Get("name"); n != "" {
		return n
	}
	var b strings.Builder
	r := []rune(sf.Name)
	for i, c := range r {
		lower := c >= 'a' && c <= 'z'
		if i > 0 && !lower && (r[i-1] >= 'a' && r[i-1] <= 'z' || i+1 < len(r) && r[i+1] >= 'a' && r[i+1] <= 'z') {
			b.WriteByte('-')
		}
		b.WriteString(strings.ToLower(string(c)))
	}
	return b.String()
}

func onlyFastTags(tag reflect.StructTag) bool {
	for tag != "" {
		tag = reflect.StructTag(strings.TrimLeft(string(tag), " "))
		key, rest, ok := strings.Cut(string(tag), ":\"")
		if !ok || !fastTag(key) {
			return false
		}
		// Skip the quoted value, honouring escapes.
		j := 0
		for j < len(rest) && rest[j] != '"' {
			if rest[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(rest) {
			return false
		}
		tag = reflect.StructTag(rest[j+1:])
	}
	return true
}
