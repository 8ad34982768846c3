// Package artifact is the managed store for job results. A result file is
// copied into $CBTH_HOME/artifacts/<artifact_id>/ (payload plus
// manifest.json) before the event that records it is appended, so once
// `cbth job complete` succeeds the submitter's file may be deleted.
package artifact

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Store is the artifact directory of one home.
type Store struct {
	Dir      string
	MaxBytes int64
}

// Manifest is manifest.json beside each payload.
type Manifest struct {
	ArtifactID   string    `json:"artifact_id"`
	SHA256       string    `json:"sha256"`
	SizeBytes    int64     `json:"size_bytes"`
	ContentType  string    `json:"content_type"`
	SourceJobID  string    `json:"source_job_id"`
	OriginalName string    `json:"original_name"`
	CreatedAt    time.Time `json:"created_at"`
}

const tmpPrefix = ".tmp-"

// Ingest copies src into the store for job jobID. The copy is complete and
// fsynced, under its final name, before Ingest returns; the caller then
// appends the event that records it.
func (s Store) Ingest(src, jobID string, now time.Time) (command.Ingested, error) {
	f, fi, err := OpenRegular(src, "result file")
	if err != nil {
		return command.Ingested{}, err
	}
	defer f.Close()
	if fi.Size() > s.MaxBytes {
		return command.Ingested{}, errs.New(errs.EFBIG, "result file %s is %d bytes, over the %d byte limit (max_result_bytes)", src, fi.Size(), s.MaxBytes)
	}

	// MkdirTemp creates it 0700 (home.DirMode).
	tmp, err := os.MkdirTemp(s.Dir, tmpPrefix+"*")
	if err != nil {
		return command.Ingested{}, errs.IO(err, "create artifact staging directory")
	}
	committed := false
	defer func() {
		if !committed {
			os.RemoveAll(tmp)
		}
	}()
	out, err := os.OpenFile(filepath.Join(tmp, "payload"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, home.FileMode)
	if err != nil {
		return command.Ingested{}, errs.IO(err, "create artifact payload")
	}
	h := sha256.New()
	head := make([]byte, 0, 512)
	n, err := io.Copy(io.MultiWriter(out, h, &prefix{b: &head}), io.LimitReader(f, s.MaxBytes+1))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return command.Ingested{}, errs.IO(err, "copy result file %s", src)
	}
	if n > s.MaxBytes {
		return command.Ingested{}, errs.New(errs.EFBIG, "result file %s grew past the %d byte limit while it was copied", src, s.MaxBytes)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	id := events.DeriveID(now, []byte(jobID), []byte(sum)).String()
	m := Manifest{ArtifactID: id, SHA256: sum, SizeBytes: n, ContentType: contentType(src, head),
		SourceJobID: jobID, OriginalName: filepath.Base(src), CreatedAt: now}
	mb, _ := json.MarshalIndent(m, "", "  ")
	if err := home.WriteFileAtomic(filepath.Join(tmp, "manifest.json"), append(mb, '\n')); err != nil {
		return command.Ingested{}, errs.IO(err, "write artifact manifest")
	}
	final := filepath.Join(s.Dir, id)
	if err := os.Rename(tmp, final); err != nil {
		// The same job and content give the same id: a retry after a crash
		// between this rename and the event finds its own earlier copy.
		if _, serr := os.Stat(filepath.Join(final, "manifest.json")); serr != nil {
			return command.Ingested{}, errs.Wrap(errs.EINTERNAL, err, "publish artifact %s", id)
		}
	} else {
		committed = true
	}
	if err := home.SyncDir(s.Dir); err != nil {
		return command.Ingested{}, errs.IO(err, "sync artifact directory")
	}
	return command.Ingested{ArtifactID: id, ManagedPath: filepath.Join(final, "payload"), ManifestPath: filepath.Join(final, "manifest.json"),
		ContentType: m.ContentType, SizeBytes: n, SHA256: sum}, nil
}

// Remove deletes an artifact's files. Removing what is gone is not an error.
func (s Store) Remove(id string) error {
	if id == "" || strings.ContainsAny(id, "/\\") || id == "." || id == ".." {
		return errs.New(errs.EINVAL, "bad artifact id %q", id)
	}
	if err := os.RemoveAll(filepath.Join(s.Dir, id)); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "remove artifact %s", id)
	}
	return nil
}

// Orphans lists entries of the store that no live artifact owns: staging
// directories and directories whose id live does not know. Entries younger
// than notAfter are skipped, so an ingest in flight is never taken for an
// orphan; a zero notAfter (at start-up, when nothing is in flight) skips
// the age check.
func (s Store) Orphans(live func(id string) bool, notAfter time.Time) ([]string, error) {
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []string
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, tmpPrefix) && live(name) {
			continue
		}
		fi, err := e.Info()
		if err != nil || (!notAfter.IsZero() && fi.ModTime().After(notAfter)) {
			continue
		}
		out = append(out, name)
	}
	return out, nil
}

// RemoveEntry deletes one entry returned by Orphans.
func (s Store) RemoveEntry(name string) error {
	if name == "" || strings.ContainsAny(name, "/\\") || name == "." || name == ".." {
		return fmt.Errorf("bad entry %q", name)
	}
	return os.RemoveAll(filepath.Join(s.Dir, name))
}

// extType is the content type cbth records for a file extension. A fixed
// table rather than package mime: mime also reads the host's mime.types,
// so the type recorded in the log would depend on the machine.
func extType(ext string) string {
	switch strings.ToLower(ext) {
	case ".json":
		return "application/json"
	case ".jsonl":
		return "application/jsonl"
	case ".ndjson":
		return "application/x-ndjson"
	case ".txt", ".log":
		return "text/plain; charset=utf-8"
	case ".md":
		return "text/markdown; charset=utf-8"
	case ".csv":
		return "text/csv; charset=utf-8"
	case ".html", ".htm":
		return "text/html; charset=utf-8"
	case ".xml":
		return "text/xml; charset=utf-8"
	case ".yaml", ".yml":
		return "application/yaml"
	case ".toml":
		return "application/toml"
	case ".diff", ".patch":
		return "text/x-diff; charset=utf-8"
	case ".pdf":
		return "application/pdf"
	case ".png":
		return "image/png"
	case ".jpg", ".jpeg":
		return "image/jpeg"
	case ".gif":
		return "image/gif"
	case ".svg":
		return "image/svg+xml"
	case ".zip":
		return "application/zip"
	case ".gz":
		return "application/gzip"
	case ".tar":
		return "application/x-tar"
	}
	return ""
}

func contentType(name string, head []byte) string {
	if t := extType(filepath.Ext(name)); t != "" {
		return t
	}
	// A small sniff of its own: net/http's DetectContentType calls JSON
	// text/plain, and the recorded type must not change with Go's tables.
	switch {
	case len(head) == 0:
		return "application/octet-stream"
	case !utf8.Valid(head) || bytes.IndexByte(head, 0) >= 0:
		return "application/octet-stream"
	case head[0] == '{' || head[0] == '[':
		return "application/json"
	default:
		return "text/plain; charset=utf-8"
	}
}

// prefix keeps the first 512 bytes written through it.
type prefix struct{ b *[]byte }

func (p *prefix) Write(b []byte) (int, error) {
	if room := 512 - len(*p.b); room > 0 {
		if len(b) < room {
			room = len(b)
		}
		*p.b = append(*p.b, b[:room]...)
	}
	return len(b), nil
}
