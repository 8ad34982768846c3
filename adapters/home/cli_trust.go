package home

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/atomicfile"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/pelletier/go-toml/v2"
)

// cliHeader is a [cli] table header on a line of its own.
var cliHeader = regexp.MustCompile(`(?m)^[ \t]*\[[ \t]*cli[ \t]*\][ \t]*(#.*)?\r?$`)

// SetHomeTrust writes [cli] trust = trust into the home's config.toml,
// keeping every other byte of it: after the [cli] header when there is
// one, else in a new [cli] table at the end. The edit counts only when
// the file, parsed again, says exactly that trust and nothing else of it
// moved; a file that says another trust already is left alone (EEXIST),
// since changing what the user wrote is the user's to do. It reports
// whether the file changed. The daemon reads it when it starts.
func SetHomeTrust(path, trust string) (bool, error) {
	if trust != events.TrustStrict && trust != events.TrustOwnPermissions {
		return false, errs.New(errs.EINVAL, "trust %q is not %q or %q", trust, events.TrustStrict, events.TrustOwnPermissions)
	}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real // write through a symlinked config to its file
	}
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, errs.IO(err, "read %s", path)
	}
	before, err := parseTOML(old, path)
	if err != nil {
		return false, err
	}
	cli, _ := before["cli"].(map[string]any)
	switch cur, set := cli["trust"]; {
	case set && cur == trust:
		return false, nil
	case set:
		return false, errs.New(errs.EEXIST, "%s already says [cli] trust = %q; change it there yourself", path, cur)
	}
	line := []byte(`trust = "` + trust + `"` + "\n")
	var next []byte
	if loc := cliHeader.FindIndex(old); loc != nil {
		end := loc[1]
		if end < len(old) && old[end] == '\n' {
			end++
		}
		next = append(append(append([]byte{}, old[:end]...), line...), old[end:]...)
	} else {
		next = append([]byte{}, old...)
		if len(next) > 0 && !bytes.HasSuffix(next, []byte("\n")) {
			next = append(next, '\n')
		}
		next = append(append(next, "\n[cli]\n"...), line...)
	}
	after, err := parseTOML(next, path)
	if err != nil {
		return false, errs.Wrap(errs.EINVAL, err, "%s: the [cli] table could not be found as written; add trust = %q under [cli] yourself", path, trust)
	}
	if got, _ := after["cli"].(map[string]any); got["trust"] != trust {
		return false, errs.New(errs.EINVAL, "%s: the [cli] table could not be found as written; add trust = %q under [cli] yourself", path, trust)
	}
	delete(after["cli"].(map[string]any), "trust")
	if len(after["cli"].(map[string]any)) == 0 && cli == nil {
		delete(after, "cli")
	}
	if a, b := canonical(after), canonical(before); !bytes.Equal(a, b) {
		return false, errs.New(errs.EINVAL, "%s: adding trust would change more than it; add trust = %q under [cli] yourself", path, trust)
	}
	if err := atomicfile.Write(path, next, 0o600); err != nil {
		return false, err
	}
	return true, nil
}

func parseTOML(b []byte, path string) (map[string]any, error) {
	m := map[string]any{}
	if err := toml.Unmarshal(b, &m); err != nil {
		return nil, errs.Wrap(errs.EINVAL, err, "%s", path)
	}
	return m, nil
}

func canonical(m map[string]any) []byte {
	b, _ := toml.Marshal(m)
	return b
}
