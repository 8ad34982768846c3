package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/projections/ctxsession"
)

// The I/O of the session directories and their index: what the files
// hold is the projection's (projections/ctxsession); here they are
// written under the tree's modes, each through a temp file, fsynced and
// renamed, the JSONL files appended to.

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
	if err := os.MkdirAll(filepath.Join(dir, ctxsession.DirContext), tree.DirMode); err != nil {
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

// Current says whether dir already holds exactly files.
func Current(dir string, files map[string][]byte) bool {
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			return false
		}
	}
	st, err := os.Stat(filepath.Join(dir, ctxsession.DirContext))
	return err == nil && st.IsDir()
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
