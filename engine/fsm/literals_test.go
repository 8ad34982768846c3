package fsm_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/engine/fsm"
)

// stateNames is every state of every table: the names a comparison must
// reach through a typed constant, never through a literal.
func stateNames() map[string]bool {
	out := map[string]bool{}
	for _, tab := range fsm.Tables() {
		for _, s := range tab.States {
			out[s] = true
		}
	}
	return out
}

// typedNames adds to names the value of every constant declared as one
// of namedTypes in files: the outcomes deciders answer with, the targets.
func typedNames(files []*ast.File, names map[string]bool) {
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				v := spec.(*ast.ValueSpec)
				if !isNamedType(v.Type, f.Name.Name) {
					continue
				}
				for _, e := range v.Values {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if s, err := strconv.Unquote(lit.Value); err == nil {
							names[s] = true
						}
					}
				}
			}
		}
	}
}

// namedTypes are the typed names besides the states, by package and type:
// decider outcomes and delivery targets.
var namedTypes = map[string]string{"engine": "Outcome", "command": "Target"}

func isNamedType(e ast.Expr, pkg string) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return namedTypes[pkg] == e.Name
	case *ast.SelectorExpr:
		x, ok := e.X.(*ast.Ident)
		return ok && namedTypes[x.Name] == e.Sel.Name
	}
	return false
}

type parsed struct {
	rel  string
	file *ast.File
}

// stateLiterals parses every non-test Go file under root and returns, as
// "file:line: literal", each string literal equal to a state name, a
// decider outcome or a target that is compared with == or != or is a switch case. The
// tables' own folder (engine/fsm) is where the state names are spelled,
// so it is skipped; the outcomes are spelled only in their const blocks.
func stateLiterals(t *testing.T, root string) []string {
	t.Helper()
	fset := token.NewFileSet()
	var files []parsed
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			base := d.Name()
			if rel == filepath.Join("engine", "fsm") || base == "node_modules" || base == "testdata" ||
				(strings.HasPrefix(base, ".") && rel != ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, parsed{rel, f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	names := stateNames()
	all := make([]*ast.File, len(files))
	for i, p := range files {
		all[i] = p.file
	}
	typedNames(all, names)
	isState := func(e ast.Expr) (string, bool) {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(lit.Value)
		return s, err == nil && names[s]
	}
	var found []string
	for _, p := range files {
		rel, f := p.rel, p.file
		report := func(pos token.Pos, s string) {
			found = append(found, rel+":"+strconv.Itoa(fset.Position(pos).Line)+": "+strconv.Quote(s))
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if n.Op != token.EQL && n.Op != token.NEQ {
					return true
				}
				for _, side := range []ast.Expr{n.X, n.Y} {
					if s, ok := isState(side); ok {
						report(side.Pos(), s)
					}
				}
			case *ast.CaseClause:
				for _, e := range n.List {
					if s, ok := isState(e); ok {
						report(e.Pos(), s)
					}
				}
			case *ast.CallExpr:
				// strings.EqualFold(x, "ready"), slices.Contains(xs,
				// "ready"), slices.Contains([]string{"ready"}, x): a
				// comparison spelled as a call.
				if !comparingCall(n.Fun) {
					return true
				}
				for _, arg := range n.Args {
					for _, e := range literalsIn(arg) {
						if s, ok := isState(e); ok {
							report(e.Pos(), s)
						}
					}
				}
			case *ast.CompositeLit:
				// map[string]bool{"ready": true}: a set of states, or a
				// table by state, looked up by key is a comparison too.
				// A map of strings or of anything is a JSON object being
				// written ({"error": ...}), whose keys are field names.
				mt, ok := n.Type.(*ast.MapType)
				if !ok || writtenObject(mt.Value) {
					return true
				}
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if s, ok := isState(kv.Key); ok {
							report(kv.Key.Pos(), s)
						}
					}
				}
			}
			return true
		})
	}
	sort.Strings(found)
	return found
}

// comparingCalls are the calls that compare their arguments: a state
// literal handed to one is compared as surely as with ==.
var comparingCalls = map[string][]string{
	"strings": {"EqualFold", "Compare", "HasPrefix", "HasSuffix"},
	"slices":  {"Contains", "Index", "Equal"},
	"bytes":   {"EqualFold", "Equal"},
}

func comparingCall(fun ast.Expr) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && slices.Contains(comparingCalls[pkg.Name], sel.Sel.Name)
}

// writtenObject reports whether a map of values of type v is what a JSON
// object is built as: strings or anything.
func writtenObject(v ast.Expr) bool {
	switch v := v.(type) {
	case *ast.Ident:
		return v.Name == "string" || v.Name == "any"
	case *ast.InterfaceType:
		return v.Methods == nil || len(v.Methods.List) == 0
	}
	return false
}

// literalsIn is e itself, or the elements of a slice or array literal e
// (slices.Contains([]string{"ready", "failed"}, x)).
func literalsIn(e ast.Expr) []ast.Expr {
	c, ok := e.(*ast.CompositeLit)
	if !ok {
		return []ast.Expr{e}
	}
	if _, ok := c.Type.(*ast.ArrayType); !ok && c.Type != nil {
		return nil
	}
	return c.Elts
}

// No code outside the tables compares with a state name, a decider
// outcome or a target spelled as a literal: it names the typed constant
// (fsm.JobReady, command.OutcomeStarted, command.TargetDesktop, ...) or, for another concept that shares the
// word, that concept's own named constant, so a renamed state is a
// compile error and a misspelled one cannot compile.
func TestNoStateLiteralComparisons(t *testing.T) {
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	for _, hit := range stateLiterals(t, root) {
		t.Errorf("%s: compare with the typed constant (an engine/fsm state, an engine.Outcome, a command.Target) or a named constant of its own concept", hit)
	}
}
