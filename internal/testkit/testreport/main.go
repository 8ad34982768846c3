// Command testreport reads `go test -json` on stdin and says what ran:
// it passes through what plain `go test` would print (package results,
// build errors, the output of failed tests), then lists every test with
// its result, every skip with its reason, and fails (exit 1) when a test
// or a build failed, when a test skipped that the allowlist does not
// name, or when the allowlist names a test that neither ran nor skipped.
// CI (.ci/run) pipes `go test -json ./...` through it, so a test that
// skips silently on CI's machine (no root, no Landlock) fails CI unless
// the allowlist says why it may.
//
// The allowlist has a line per test: the package (its import path, or
// the path under the module), the test as go test names it (subtests
// with their parent, spaces as underscores), and why it may skip. Blank
// lines and lines starting with # are comments.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

func main() {
	allowPath := flag.String("allow", "", "the allowlist of tests that may skip")
	flag.Parse()
	var allow []allowed
	if *allowPath != "" {
		f, err := os.Open(*allowPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		allow, err = parseAllow(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "testreport: %s: %v\n", *allowPath, err)
			os.Exit(2)
		}
	}
	if !report(os.Stdin, os.Stdout, allow) {
		os.Exit(1)
	}
}

// allowed is a line of the allowlist.
type allowed struct {
	pkg, test, why string
	line           int
}

func (a allowed) matches(pkg, test string) bool {
	return test == a.test && (pkg == a.pkg || strings.HasSuffix(pkg, "/"+a.pkg))
}

func parseAllow(r io.Reader) ([]allowed, error) {
	var out []allowed
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("line %d: want a package, a test and why it may skip: %q", n, line)
		}
		out = append(out, allowed{pkg: f[0], test: f[1], why: strings.Join(f[2:], " "), line: n})
	}
	return out, sc.Err()
}

// event is a line of `go test -json` (go doc test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string
}

type key struct{ pkg, test string }

type result struct {
	key
	action  string
	elapsed float64
	reason  string // a skip's: what the test said
}

// report reads the events from r, writes the report to w, and says
// whether the run passed.
func report(r io.Reader, w io.Writer, allow []allowed) bool {
	out := map[key][]string{} // a running test's output
	var results []result
	pkgs := map[string]string{} // package -> pass, fail, skip
	buildFailed := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(w, sc.Text()) // not an event: go's own message
			continue
		}
		k := key{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(w, e.Output)
		case e.Action == "build-fail":
			buildFailed++
		case e.Test == "" && e.Action == "output":
			fmt.Fprint(w, e.Output)
		case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
			pkgs[e.Package] = e.Action
		case e.Action == "output":
			out[k] = append(out[k], e.Output)
		case e.Action == "pass" || e.Action == "fail" || e.Action == "skip":
			res := result{key: k, action: e.Action, elapsed: e.Elapsed}
			if e.Action == "fail" {
				fmt.Fprint(w, strings.Join(out[k], ""))
			}
			if e.Action == "skip" {
				res.reason = skipReason(out[k])
			}
			delete(out, k)
			results = append(results, res)
		}
	}
	ok := true
	if err := sc.Err(); err != nil {
		fmt.Fprintln(w, "testreport: reading the events:", err)
		ok = false
	}
	slices.SortFunc(results, func(a, b result) int {
		return strings.Compare(a.pkg+"\x00"+a.test, b.pkg+"\x00"+b.test)
	})

	fmt.Fprintln(w, "\n== tests run")
	var passed, failed, skipped, allowedSkips int
	for _, res := range results {
		switch res.action {
		case "pass":
			passed++
		case "fail":
			failed++
		case "skip":
			skipped++
		}
		if !strings.Contains(res.test, "/") {
			fmt.Fprintf(w, "%-4s %s %s (%s)\n", strings.ToUpper(res.action), res.pkg, res.test, time.Duration(res.elapsed*float64(time.Second)).Round(time.Millisecond))
		}
	}
	seen := make([]bool, len(allow))
	fmt.Fprintln(w, "\n== skipped")
	for _, res := range results {
		i := slices.IndexFunc(allow, func(a allowed) bool { return a.matches(res.pkg, res.test) })
		if i >= 0 {
			seen[i] = true
		}
		if res.action != "skip" {
			continue
		}
		if i < 0 {
			ok = false
			fmt.Fprintf(w, "SKIP %s %s: %s\n     NOT ALLOWED: the allowlist does not name this test; make it run here, or add it with why it may skip\n", res.pkg, res.test, res.reason)
			continue
		}
		allowedSkips++
		fmt.Fprintf(w, "SKIP %s %s: %s\n     allowed: %s\n", res.pkg, res.test, res.reason, allow[i].why)
	}
	if skipped == 0 {
		fmt.Fprintln(w, "(none)")
	}
	for i, a := range allow {
		if !seen[i] {
			ok = false
			fmt.Fprintf(w, "the allowlist's line %d names %s %s, which neither ran nor skipped: remove it or correct it\n", a.line, a.pkg, a.test)
		}
	}
	failedPkgs := 0
	for _, p := range slices.Sorted(maps.Keys(pkgs)) {
		if pkgs[p] == "fail" {
			failedPkgs++
			fmt.Fprintf(w, "FAIL package %s\n", p)
		}
	}
	if failed > 0 || failedPkgs > 0 || buildFailed > 0 {
		ok = false
	}
	if len(results) == 0 {
		ok = false
		fmt.Fprintln(w, "no test ran")
	}
	fmt.Fprintf(w, "\n== %d tests and subtests in %d packages: %d passed, %d failed, %d skipped (%d allowed); %d packages failed, %d builds failed\n",
		len(results), len(pkgs), passed, failed, skipped, allowedSkips, failedPkgs, buildFailed)
	if ok {
		fmt.Fprintln(w, "PASS")
	} else {
		fmt.Fprintln(w, "FAIL")
	}
	return ok
}

// skipReason is what a skipped test printed, without go test's own
// framing lines.
func skipReason(lines []string) string {
	var parts []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		parts = append(parts, t)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " / ")
}
