package fsm_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The literal check finds a state compared by any spelling: ==, a switch
// case, strings.EqualFold, slices.Contains (of a literal, or over a slice
// literal of states) and a set or table keyed by states; a JSON object
// written with a field of a state's name is not a comparison.
func TestStateLiteralsFindEverySpelling(t *testing.T) {
	root := t.TempDir()
	src := `package planted

import (
	"slices"
	"strings"
)

func f(s string, xs []string) (bool, any) {
	a := s == "running"
	switch s {
	case "failed":
	}
	b := strings.EqualFold(s, "ready")
	c := slices.Contains(xs, "cancelled")
	d := slices.Contains([]string{"prepared", "other"}, s)
	e := map[string]bool{"cooldown": true}[s]
	g := map[string]int{"closed": 1}
	out := map[string]any{"ready": 1}
	name := map[string]string{"running": s}
	return a || b || c || d || e || g[s] > 0, []any{out, name, strings.ToUpper("failed")}
}
`
	if err := os.WriteFile(filepath.Join(root, "planted.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`planted.go:9: "running"`,
		`planted.go:11: "failed"`,
		`planted.go:13: "ready"`,
		`planted.go:14: "cancelled"`,
		`planted.go:15: "prepared"`,
		`planted.go:16: "cooldown"`,
		`planted.go:17: "closed"`,
	}
	slices.Sort(want)
	if got := stateLiterals(t, root); !slices.Equal(got, want) {
		t.Errorf("found\n%q\nwant\n%q", got, want)
	}
}
