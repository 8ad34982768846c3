// Package ctxsession is the projection of CortexFS sessions into plain
// files (spec/cortexfs.md, Sessions): what a session directory holds
// (the small files from the session's recorded state, one JSONL line
// per message or frame event) and what the index beside the sessions
// says (list, current, by-cwd). The adapter (adapters/cortexfs/session)
// writes them where it is told; the daemon rewrites them from the log at
// start.
package ctxsession

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strings"
	"time"

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
		FileState:     []byte(c.State + "\n"),
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
