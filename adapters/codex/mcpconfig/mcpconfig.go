// Package mcpconfig writes, removes and reads cbth's entry in a Codex
// config.toml (spec/mcp.md): the [mcp_servers.cbth] server Codex starts
// for each session, the approval of the tools that act, and the skill
// that tells an agent when to use them. The same entry becomes `-c`
// overrides for an app-server cbth starts itself, so a managed session
// has the tools whether or not the user installed them.
//
// The entry is one marked block of text. Everything outside the markers
// (the user's settings, comments and order) is left byte for byte; the
// whole file must still parse after a change, or nothing is written.
package mcpconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Server is the server's name in Codex: its tools reach the model in the
// namespace mcp__cbth.
const Server = "cbth"

// The markers around the block cbth owns.
const (
	beginMarker = "# >>> cbth mcp: written by `cbth mcp install`, removed by `cbth mcp uninstall` >>>"
	endMarker   = "# <<< cbth mcp <<<"
)

// Entry is cbth's MCP server entry: the executable Codex runs (with the
// arguments `mcp serve`), the cbth home it serves (Codex passes only a
// short allow-list of environment variables to MCP servers, and
// CBTH_HOME is not on it) and the tools Codex may run without asking.
type Entry struct {
	Command string
	Home    string
	Approve []string
}

// ApprovalTools are the tools of `cbth mcp serve` that act (they carry no
// readOnlyHint): Codex asks before running them, and refuses them under
// approval_policy = "never", unless its config approves them.
var ApprovalTools = []string{"job_submit", "task_run", "job_cancel", "watch_start", "watch_stop",
	"desktop_bridge_preflight", "desktop_note_arm_pending", "desktop_note_arm", "desktop_note_paused",
	"desktop_note_boundary_crossed", "desktop_validate_mcp"}

// OptIn are the tools that act that an install approves only when the
// user asks for it (`cbth mcp install --approve`), each with what that
// approval means. task_run and watch_start run a command outside Codex's
// sandbox, as the user; desktop_bridge_preflight lets the first thread
// that calls it become the Desktop bridge. Codex asks before every call
// of these otherwise.
var OptIn = map[string]string{
	"task_run":                 "Codex will not ask before task_run: whenever the model calls it, a command your [mcp] rules allow runs outside Codex's sandbox, as you, with your access",
	"watch_start":              "Codex will not ask before watch_start: whenever the model calls it, a command your [mcp] rules allow runs outside Codex's sandbox, as you, with your access, for as long as it runs (its matching output lines wake the thread)",
	"desktop_bridge_preflight": "Codex will not ask before desktop_bridge_preflight: while no bridge thread is selected, the first thread that calls it becomes the Desktop bridge",
}

// DefaultApproved are the tools an install approves: those that act,
// but none of OptIn. What they do stays inside cbth (a job recorded, one
// of the thread's own jobs cancelled, a Desktop step checked against the
// selected bridge and the thread's binding).
func DefaultApproved() []string {
	var out []string
	for _, t := range ApprovalTools {
		if _, opt := OptIn[t]; !opt {
			out = append(out, t)
		}
	}
	return out
}

// Approvals are the tools an install approves: DefaultApproved and the
// opt-in tools in extra, in ApprovalTools' order. A tool that does not
// act, or that cbth does not have, is EINVAL.
func Approvals(extra []string) ([]string, error) {
	for _, t := range extra {
		if !slices.Contains(ApprovalTools, t) {
			return nil, errs.New(errs.EINVAL, "--approve %q: the tools that need an approval are %s (the others only read, and run without one)", t, strings.Join(ApprovalTools, ", "))
		}
	}
	var out []string
	for _, t := range ApprovalTools {
		if _, opt := OptIn[t]; !opt || slices.Contains(extra, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

// Args are the arguments Codex starts the command with.
var Args = []string{"mcp", "serve"}

// Block is the entry as config.toml text, markers included.
func (e Entry) Block() string {
	var b strings.Builder
	fmt.Fprintln(&b, beginMarker)
	fmt.Fprintf(&b, "[mcp_servers.%s]\n", Server)
	fmt.Fprintf(&b, "command = %s\n", quote(e.Command))
	fmt.Fprintf(&b, "args = %s\n", TOMLList(Args))
	fmt.Fprintf(&b, "env = { CBTH_HOME = %s }\n", quote(e.Home))
	for _, t := range e.Approve {
		fmt.Fprintf(&b, "\n[mcp_servers.%s.tools.%s]\napproval_mode = \"approve\"\n", Server, t)
	}
	fmt.Fprintln(&b, endMarker)
	return b.String()
}

// Overrides are the same settings as `codex -c` arguments.
func (e Entry) Overrides() []string {
	p := "mcp_servers." + Server + "."
	out := []string{
		"-c", p + "command=" + quote(e.Command),
		"-c", p + "args=" + TOMLList(Args),
		"-c", p + "env={ CBTH_HOME = " + quote(e.Home) + " }",
	}
	for _, t := range e.Approve {
		out = append(out, "-c", p+"tools."+t+".approval_mode=\"approve\"")
	}
	return out
}

// Install writes e into the config.toml at path (created 0600 with its
// directory 0700 if absent), replacing an earlier block of cbth's. It
// reports whether the file changed. An entry for a server named cbth that
// is not cbth's block is left alone and refused (EEXIST).
func Install(path string, e Entry) (bool, error) {
	old, err := read(path)
	if err != nil {
		return false, err
	}
	rest, _, err := cut(old)
	if err != nil {
		return false, errs.Wrap(errs.EINVAL, err, "%s", path)
	}
	if servers(rest)[Server] {
		return false, errs.New(errs.EEXIST, "%s already has an [mcp_servers.%s] entry that cbth did not write: remove it, then run cbth mcp install again", path, Server)
	}
	next := append([]byte(nil), rest...)
	if len(next) > 0 && !bytes.HasSuffix(next, []byte("\n")) {
		next = append(next, '\n')
	}
	if len(next) > 0 {
		next = append(next, '\n')
	}
	next = append(next, e.Block()...)
	if bytes.Equal(next, old) {
		return false, nil
	}
	if err := write(path, next); err != nil {
		return false, err
	}
	return true, nil
}

// Uninstall removes cbth's block from the config.toml at path; the rest
// stays as it was. It reports whether the file changed.
func Uninstall(path string) (bool, error) {
	old, err := read(path)
	if err != nil || old == nil {
		return false, err
	}
	rest, found, err := cut(old)
	if err != nil {
		return false, errs.Wrap(errs.EINVAL, err, "%s", path)
	}
	if !found {
		return false, nil
	}
	if err := write(path, rest); err != nil {
		return false, err
	}
	return true, nil
}

// Status is what Codex will make of cbth's entry in a config.toml.
type Status struct {
	Path      string   `json:"path"`
	Installed bool     `json:"installed"` // cbth's block is there
	Command   string   `json:"command"`
	Home      string   `json:"cbth_home"`
	Approved  []string `json:"approved_tools"`
	Problems  []string `json:"problems"`
}

// Inspect reads the config.toml at path and checks the cbth entry against
// want: the executable exists and runs `mcp serve`, it serves want.Home,
// and the tools that act are approved.
func Inspect(path string, want Entry) Status {
	st := Status{Path: path, Approved: []string{}, Problems: []string{}}
	raw, err := read(path)
	if err != nil {
		st.Problems = append(st.Problems, err.Error())
		return st
	}
	var doc struct {
		MCPServers map[string]struct {
			Command string            `toml:"command"`
			Args    []string          `toml:"args"`
			Env     map[string]string `toml:"env"`
			Enabled *bool             `toml:"enabled"`
			Tools   map[string]struct {
				ApprovalMode string `toml:"approval_mode"`
			} `toml:"tools"`
		} `toml:"mcp_servers"`
	}
	if err := toml.Unmarshal(raw, &doc); err != nil {
		st.Problems = append(st.Problems, fmt.Sprintf("%s does not parse: %v", path, err))
		return st
	}
	s, ok := doc.MCPServers[Server]
	if !ok {
		st.Problems = append(st.Problems, fmt.Sprintf("%s has no [mcp_servers.%s] entry: run cbth mcp install", path, Server))
		return st
	}
	_, found, cerr := cut(raw)
	st.Installed = cerr == nil && found
	st.Command, st.Home = s.Command, s.Env["CBTH_HOME"]
	for t, a := range s.Tools {
		if a.ApprovalMode == "approve" {
			st.Approved = append(st.Approved, t)
		}
	}
	slices.Sort(st.Approved)
	if s.Enabled != nil && !*s.Enabled {
		st.Problems = append(st.Problems, "the entry is disabled (enabled = false)")
	}
	if fi, err := os.Stat(s.Command); err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		st.Problems = append(st.Problems, fmt.Sprintf("its command %q is not an executable file: run cbth mcp install", s.Command))
	}
	if !slices.Equal(s.Args, Args) {
		st.Problems = append(st.Problems, fmt.Sprintf("its args are %q, not %q", s.Args, Args))
	}
	if st.Home != want.Home {
		st.Problems = append(st.Problems, fmt.Sprintf("it serves CBTH_HOME %q, not this home %q: run cbth mcp install", st.Home, want.Home))
	}
	for _, t := range want.Approve {
		if !slices.Contains(st.Approved, t) {
			st.Problems = append(st.Problems, fmt.Sprintf("tool %s is not approved: under approval_policy = \"never\" Codex refuses it", t))
		}
	}
	return st
}

// read returns the file's bytes, nil if it does not exist.
func read(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if _, lerr := os.Lstat(path); lerr == nil {
			return nil, errs.New(errs.EINVAL, "%s is a symbolic link to a file that does not exist: create its target, or replace the link with a file", path)
		}
		return nil, nil
	}
	if err != nil {
		return nil, errs.Wrap(errs.EACCES, err, "read %s", path)
	}
	return b, nil
}

// marker is where one of cbth's marker lines is: its offset and the
// offset just past its line.
type marker struct{ at, end int }

// markers finds cbth's marker lines: comments that are whole lines of
// the document, as a TOML parser reads it. A marker's text inside a
// multi-line string, or after a value on its line, is the user's text,
// never a marker. A file that does not parse is refused: what is cbth's
// in it cannot be told.
func markers(b []byte) (begins, ends []marker, err error) {
	p := unstable.Parser{KeepComments: true}
	p.Reset(b)
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind != unstable.Comment {
			continue
		}
		r := p.Range(e.Data)
		at, end := int(r.Offset), int(r.Offset+r.Length)
		if at > 0 && b[at-1] != '\n' {
			continue // indented, or after something on its line
		}
		if end < len(b) && b[end] == '\r' {
			end++
		}
		if end < len(b) && b[end] == '\n' {
			end++
		}
		switch string(bytes.TrimRight(e.Data, "\r")) {
		case beginMarker:
			begins = append(begins, marker{at, end})
		case endMarker:
			ends = append(ends, marker{at, end})
		}
	}
	if err := p.Error(); err != nil {
		return nil, nil, fmt.Errorf("it does not parse as TOML (%v): fix it first", err)
	}
	return begins, ends, nil
}

// cut takes cbth's block (and the blank line written before it) out of
// b. A begin marker without its end is an error: what follows it cannot
// be told apart from the user's own text.
func cut(b []byte) (rest []byte, found bool, err error) {
	begins, ends, err := markers(b)
	switch {
	case err != nil:
		return nil, false, err
	case len(begins) == 0 && len(ends) == 0:
		return b, false, nil
	case len(begins) > 1 || len(ends) > 1:
		return nil, false, errors.New("cbth's block appears twice: fix the file by hand")
	case len(begins) == 0 || len(ends) == 0 || ends[0].at < begins[0].at:
		return nil, false, fmt.Errorf("cbth's block begins but never ends, or ends where it never began (its lines are %q and %q): fix the file by hand", beginMarker, endMarker)
	}
	start, end := begins[0].at, ends[0].end
	if start >= 2 && b[start-1] == '\n' && b[start-2] == '\n' {
		start--
	}
	return append(append([]byte(nil), b[:start]...), b[end:]...), true, nil
}

// servers lists the MCP servers a config defines, if it parses.
func servers(b []byte) map[string]bool {
	var doc struct {
		MCPServers map[string]any `toml:"mcp_servers"`
	}
	out := map[string]bool{}
	if toml.Unmarshal(b, &doc) == nil {
		for k := range doc.MCPServers {
			out[k] = true
		}
	}
	return out
}

// write replaces the file atomically, after checking the new text still
// parses: a config Codex cannot read would stop Codex, not only cbth. A
// config.toml that is a symbolic link (a dotfiles checkout) is written
// through: its target is replaced, the link stays.
func write(path string, b []byte) error {
	var v map[string]any
	if err := toml.Unmarshal(b, &v); err != nil {
		return errs.Wrap(errs.EINVAL, err, "%s would not parse after the change, so it was left as it was", path)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(path)
		if err != nil {
			return errs.Wrap(errs.EINVAL, err, "%s is a symbolic link that does not resolve", path)
		}
		if ti, err := os.Stat(target); err != nil || !ti.Mode().IsRegular() {
			return errs.New(errs.EINVAL, "%s is a symbolic link to %s, which is not a regular file: replace the link with a file", path, target)
		}
		path = target
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return errs.Wrap(errs.EACCES, err, "create %s", filepath.Dir(path))
	}
	return home.WriteFileAtomic(path, b)
}

// WriteSkill writes the cbth skill under codexHome/skills/cbth, reporting
// whether it changed.
func WriteSkill(codexHome string) (string, bool, error) {
	path := SkillPath(codexHome)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, []byte(Skill)) {
		return path, false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return path, false, errs.Wrap(errs.EACCES, err, "create %s", filepath.Dir(path))
	}
	if err := home.WriteFileAtomic(path, []byte(Skill)); err != nil {
		return path, false, err
	}
	return path, true, nil
}

// RemoveSkill removes the skill cbth wrote (and its directory, if empty),
// reporting whether it was there.
func RemoveSkill(codexHome string) (bool, error) {
	path := SkillPath(codexHome)
	err := os.Remove(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, errs.Wrap(errs.EACCES, err, "remove %s", path)
	}
	_ = os.Remove(filepath.Dir(path))
	return true, nil
}

// SkillPath is where the skill lives in a Codex home.
func SkillPath(codexHome string) string {
	return filepath.Join(codexHome, "skills", Server, "SKILL.md")
}

// quote renders s as a TOML basic string.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// TOMLList renders l as a TOML array of strings.
func TOMLList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
