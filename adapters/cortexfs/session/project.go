package session

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Files of a session directory, and the index directory beside the
// sessions. The index lives under a reserved name that no session can
// take ("index" is refused as a session name where an index exists).
const (
	FileMessages  = "messages.jsonl"
	FileEvents    = "events.jsonl"
	FileLatest    = "latest.md"
	FileState     = "state"
	FileCwd       = "cwd"
	FileCreatedAt = "created_at"
	FileUpdatedAt = "updated_at"
	FileMeta      = "meta.json"
	DirContext    = "context"
	DirIndex      = "index"
)

func stamp(t time.Time) []byte { return []byte(t.UTC().Format(time.RFC3339Nano) + "\n") }

// Small renders the small files of a session from its recorded state:
// everything but the two JSONL files, which grow by one line per event.
func Small(c *aggregate.CtxSession) map[string][]byte {
	meta := bytes.TrimSpace(c.Meta)
	if len(meta) == 0 {
		meta = []byte("{}")
	}
	return map[string][]byte{
		FileLatest:    []byte(c.LatestText),
		FileState:     []byte(c.Status + "\n"),
		FileCwd:       []byte(c.Cwd + "\n"),
		FileCreatedAt: stamp(c.CreatedAt),
		FileUpdatedAt: stamp(c.UpdatedAt),
		FileMeta:      append(append([]byte(nil), meta...), '\n'),
	}
}

// Line is the JSONL line an event adds to the session directory: a
// message to messages.jsonl, a frame to events.jsonl, nothing for the
// others (their effect is in the small files).
func Line(env events.Envelope) (file string, line []byte, err error) {
	p, err := events.DecodePayload(&env)
	if err != nil {
		return "", nil, err
	}
	switch p := p.(type) {
	case *events.CtxSessionMessage:
		b, err := p.Line()
		if err != nil {
			return "", nil, errs.Wrap(errs.ECORRUPT, err, "message at seq %d", env.Seq)
		}
		return FileMessages, b, nil
	case *events.CtxSessionEvent:
		return FileEvents, p.Line(), nil
	}
	return "", nil, nil
}

// payloadOf is the message event of a record.
func payloadOf(r Record) *events.CtxSessionMessage {
	content, _ := json.Marshal(r.Content)
	m := &events.CtxSessionMessage{Role: r.Role, Content: content, Run: r.Run, ID: r.ID, CallID: r.CallID, Name: r.Name}
	if len(r.ToolCalls) > 0 {
		m.ToolCalls, _ = json.Marshal(r.ToolCalls)
	}
	return m
}

// recordOf reads a message event back.
func recordOf(p *events.CtxSessionMessage) Record {
	r := Record{ID: p.ID, Run: p.Run, Role: p.Role, CallID: p.CallID, Name: p.Name}
	_ = json.Unmarshal(p.Content, &r.Content)
	if len(p.ToolCalls) > 0 {
		var calls []driver.ToolCall
		_ = json.Unmarshal(p.ToolCalls, &calls)
		r.ToolCalls = calls
	}
	return r
}

// WriteSmall replaces the small files that differ (temp, fsync, rename).
func WriteSmall(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(filepath.Join(dir, DirContext), tree.DirMode); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "create %s", dir)
	}
	for name, b := range files {
		if err := tree.WriteFile(filepath.Join(dir, name), b, tree.FileMode); err != nil {
			return err
		}
	}
	return nil
}

// AppendLines appends lines to a JSONL file of dir.
func AppendLines(dir, file string, lines []byte) error {
	if len(lines) == 0 {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(dir, file), os.O_CREATE|os.O_WRONLY|os.O_APPEND, tree.FileMode)
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "open %s", file)
	}
	_, err = f.Write(lines)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "append to %s", file)
	}
	return nil
}

// Render is a whole session directory as its events give it.
func Render(c *aggregate.CtxSession, stream func(fn func(events.Envelope) error) error) (map[string][]byte, error) {
	files := Small(c)
	files[FileMessages], files[FileEvents] = []byte{}, []byte{}
	err := stream(func(env events.Envelope) error {
		f, line, err := Line(env)
		if err != nil || f == "" {
			return err
		}
		files[f] = append(files[f], line...)
		return nil
	})
	return files, err
}

// Current says whether dir already holds exactly files.
func Current(dir string, files map[string][]byte) bool {
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			return false
		}
	}
	st, err := os.Stat(filepath.Join(dir, DirContext))
	return err == nil && st.IsDir()
}

// CwdHash names a cwd's file under index/by-cwd/: the SHA-256 of the
// cwd's bytes in hex.
func CwdHash(cwd string) string {
	h := sha256.Sum256([]byte(cwd))
	return hex.EncodeToString(h[:])
}

// Index renders the index of a set of sessions (one object, scope and
// user): list, newest updated_at first (ties by name); current, the
// newest; by-cwd/<hash>, the newest session of each cwd. Paths are
// relative to the index directory.
func Index(sessions []*aggregate.CtxSession) map[string][]byte {
	ss := append([]*aggregate.CtxSession(nil), sessions...)
	sort.Slice(ss, func(i, j int) bool {
		if !ss[i].UpdatedAt.Equal(ss[j].UpdatedAt) {
			return ss[i].UpdatedAt.After(ss[j].UpdatedAt)
		}
		return ss[i].Name < ss[j].Name
	})
	var list strings.Builder
	files := map[string][]byte{}
	for _, s := range ss {
		list.WriteString(s.Name + "\n")
		key := "by-cwd/" + CwdHash(s.Cwd)
		if _, ok := files[key]; !ok {
			files[key] = []byte(s.Name + "\n")
		}
	}
	files["list"] = []byte(list.String())
	cur := ""
	if len(ss) > 0 {
		cur = ss[0].Name + "\n"
	}
	files["current"] = []byte(cur)
	return files
}

// WriteIndex makes dir (a session directory's parent's index/) hold
// exactly files: by-cwd entries no longer wanted are removed. Every entry
// is a plain file, never a symlink.
func WriteIndex(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(filepath.Join(dir, "by-cwd"), tree.DirMode); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "create %s", dir)
	}
	for name, b := range files {
		if err := tree.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), b, tree.FileMode); err != nil {
			return err
		}
	}
	ents, err := os.ReadDir(filepath.Join(dir, "by-cwd"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errs.Wrap(errs.EINTERNAL, err, "read %s", dir)
	}
	for _, e := range ents {
		if _, ok := files["by-cwd/"+e.Name()]; !ok {
			_ = os.RemoveAll(filepath.Join(dir, "by-cwd", e.Name()))
		}
	}
	return nil
}

// CountLines counts the lines of a file; a missing file has -1.
func CountLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	return bytes.Count(b, []byte{'\n'})
}
