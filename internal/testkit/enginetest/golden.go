package enginetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/projections"
	bolt "go.etcd.io/bbolt"
)

// Golden logs (fixtures/logs): an exported log and the projections it
// replays to, rendered by RenderImage. The engine's golden test replays
// every one; cmd/cbth's records the scenario ones through the binary.

// RenderImage prints an image as stable, reviewable JSON: bucket -> quoted
// key -> value (JSON values inline, anything else quoted).
func RenderImage(img engine.Image) []byte {
	var names []string
	for n := range img {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteString("{\n")
	for i, n := range names {
		keys := make([]string, 0, len(img[n]))
		for k := range img[n] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("  " + strconv.Quote(n) + ": {")
		for j, k := range keys {
			v := img[n][k]
			rv := strconv.Quote(string(v))
			if json.Valid(v) {
				rv = string(v)
			}
			if j > 0 {
				b.WriteString(",")
			}
			b.WriteString("\n    " + strconv.Quote(k) + ": " + rv)
		}
		b.WriteString("\n  }")
		if i < len(names)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// Replay imports the exported log at logPath into a new engine, verifies
// it (hashes, chain, every transition, projections against a rebuild) and
// returns its projections rendered by RenderImage, and how many events it
// holds.
func Replay(tb testing.TB, logPath string) ([]byte, uint64) {
	tb.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	e := Open(tb, filepath.Join(tb.TempDir(), "cbth.db"), engine.Options{NoSync: true})
	st, err := e.Import(context.Background(), f)
	if err != nil {
		tb.Fatalf("import %s: %v", logPath, err)
	}
	Verify(tb, e)
	var img engine.Image
	if err := e.DB().View(func(tx *bolt.Tx) error {
		var err error
		img, err = projections.ReadImage(tx)
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	return RenderImage(img), st.Events
}

// Canon makes a log recorded through the binary the same on every run
// and every machine. The daemon's own part already is on a manual clock
// (CBTH_TEST_CLOCK; the engine derives its ids from the hash chain); what
// is left comes from outside: the paths of the test's directories, the
// ids Codex makes, process ids, a measured duration. Canon renames those,
// every UUID of the log with them (a renamed value changes the chain the
// engine's later ids were derived from), and chains the hashes anew, so
// the result is a log that verifies and replays like the recorded one.
type Canon struct {
	// Paths are replaced, longest first, wherever they occur.
	Paths map[string]string
	// Values are patterns whose first group is a value that is renamed
	// everywhere it occurs, by order of first appearance: NAME-1, NAME-2
	// (the key of the map is NAME).
	Values map[string]*regexp.Regexp
	// Fields are patterns whose first group is replaced inside each
	// match only: same value, same replacement, by order of first
	// appearance (NAME-N, or N+1000 for a value of digits alone).
	Fields map[string]*regexp.Regexp
}

// With returns c with o's rules added.
func (c Canon) With(o Canon) Canon {
	out := Canon{Paths: map[string]string{}, Values: map[string]*regexp.Regexp{}, Fields: map[string]*regexp.Regexp{}}
	for _, src := range []Canon{c, o} {
		for k, v := range src.Paths {
			out.Paths[k] = v
		}
		for k, v := range src.Values {
			out.Values[k] = v
		}
		for k, v := range src.Fields {
			out.Fields[k] = v
		}
	}
	return out
}

// uuidPattern is a UUID in its canonical text form.
var uuidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// canonicalUUID is the n-th renamed id: a UUIDv7 of the manual clock's
// start (the tests' 2026-11-21T10:00:00Z) with n in its last bits.
func canonicalUUID(n int) string { return fmt.Sprintf("01a1fd8c-6900-7000-8000-%012x", n) }

// Apply canonicalizes an exported log (one JSON envelope a line).
func (c Canon) Apply(export []byte) ([]byte, error) {
	text := string(export)
	paths := make([]string, 0, len(c.Paths))
	for p := range c.Paths {
		paths = append(paths, p)
	}
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) > len(paths[j]) })
	for _, p := range paths {
		text = strings.ReplaceAll(text, p, c.Paths[p])
	}
	// Fields first: a field's value (a pid) must not be taken for part
	// of a value renamed everywhere.
	for _, name := range sortedKeys(c.Fields) {
		re, seen := c.Fields[name], map[string]string{}
		text = re.ReplaceAllStringFunc(text, func(m string) string {
			sub := re.FindStringSubmatchIndex(m)
			v := m[sub[2]:sub[3]]
			r, ok := seen[v]
			if !ok {
				r = fmt.Sprintf("%s-%d", name, len(seen)+1)
				if _, err := strconv.Atoi(v); err == nil {
					r = strconv.Itoa(1000 + len(seen) + 1)
				}
				seen[v] = r
			}
			return m[:sub[2]] + r + m[sub[3]:]
		})
	}
	renames := map[string]string{}
	var order []string
	for _, name := range sortedKeys(c.Values) {
		n := 0
		for _, m := range c.Values[name].FindAllStringSubmatch(text, -1) {
			if _, ok := renames[m[1]]; !ok {
				n++
				renames[m[1]] = fmt.Sprintf("%s-%d", name, n)
				order = append(order, m[1])
			}
		}
	}
	sort.Slice(order, func(i, j int) bool { return len(order[i]) > len(order[j]) })
	for _, v := range order {
		text = strings.ReplaceAll(text, v, renames[v])
	}
	ids := map[string]string{}
	text = uuidPattern.ReplaceAllStringFunc(text, func(u string) string {
		r, ok := ids[u]
		if !ok {
			r = canonicalUUID(len(ids) + 1)
			ids[u] = r
		}
		return r
	})
	return rechain([]byte(text))
}

// rechain sets every envelope's prev_hash and hash anew, in order.
func rechain(log []byte) ([]byte, error) {
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var prev events.Hash
	for line := 1; sc.Scan(); line++ {
		var env events.Envelope
		if err := json.Unmarshal(sc.Bytes(), &env); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		env.PrevHash = prev
		events.Encode(&env)
		prev = env.Hash
		if err := enc.Encode(&env); err != nil {
			return nil, err
		}
	}
	return out.Bytes(), sc.Err()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// FirstDifference names the first line two texts differ on, for a
// message: an envelope's seq and type, any other line itself (cut short),
// or which text is longer.
func FirstDifference(a, b []byte) string {
	la, lb := bytes.Split(bytes.TrimSpace(a), []byte("\n")), bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(bytes.TrimSpace(b)) == 0 {
		return "none was there"
	}
	describe := func(l []byte) string {
		var e struct {
			Seq  uint64 `json:"seq"`
			Type string `json:"type"`
		}
		if json.Unmarshal(l, &e) == nil && e.Type != "" {
			return fmt.Sprintf("seq %d %s", e.Seq, e.Type)
		}
		s := strings.TrimSpace(string(l))
		if len(s) > 100 {
			s = s[:100] + "…"
		}
		return strconv.Quote(s)
	}
	for i := 0; i < len(la) && i < len(lb); i++ {
		if !bytes.Equal(la[i], lb[i]) {
			return fmt.Sprintf("line %d: %s, was %s", i+1, describe(la[i]), describe(lb[i]))
		}
	}
	return fmt.Sprintf("%d lines, were %d", len(la), len(lb))
}
