package main

import (
	"strings"
	"testing"
)

// ev writes a go test -json line.
func ev(action, pkg, test, output string) string {
	s := `{"Action":"` + action + `","Package":"example.com/m/` + pkg + `"`
	if test != "" {
		s += `,"Test":"` + test + `"`
	}
	if output != "" {
		s += `,"Output":` + quote(output)
	}
	return s + "}\n"
}

func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`)
	return `"` + r.Replace(s) + `"`
}

// run is a test that ran in pkg and ended with action; a skip says why.
func run(pkg, test, action, said string) string {
	s := ev("run", pkg, test, "") + ev("output", pkg, test, "=== RUN   "+test+"\n")
	if said != "" {
		s += ev("output", pkg, test, "    x_test.go:9: "+said+"\n")
	}
	return s + ev("output", pkg, test, "--- "+strings.ToUpper(action)+": "+test+" (0.00s)\n") + ev(action, pkg, test, "")
}

func pkgDone(pkg, action string) string {
	return ev("output", pkg, "", "ok  \texample.com/m/"+pkg+"\t0.1s\n") + ev(action, pkg, "", "")
}

// The report passes a run exactly when no test or build failed, every
// skip is on the allowlist, and every allowlist line names a test that
// ran or skipped; it says which tests ran and why each skipped.
func TestReport(t *testing.T) {
	allow := `# comment
cmd/x    TestRoot           needs root
a        TestParent/needs_a_mount  a mount
`
	for _, c := range []struct {
		name   string
		events string
		allow  string
		ok     bool
		says   []string
		hides  []string
	}{
		{name: "all pass",
			events: run("a", "TestOne", "pass", "") + pkgDone("a", "pass"),
			ok:     true, says: []string{"PASS example.com/m/a TestOne", "1 passed, 0 failed, 0 skipped", "ok  \texample.com/m/a"}},
		{name: "a failure shows its output",
			events: run("a", "TestOne", "fail", "want 42, got 41") + pkgDone("a", "fail"),
			says:   []string{"want 42, got 41", "FAIL example.com/m/a TestOne", "FAIL package example.com/m/a", "1 failed"}},
		{name: "a skip on the allowlist",
			events: run("cmd/x", "TestRoot", "skip", "needs root to run as uid 65534") + run("a", "TestParent", "pass", "") +
				run("a", "TestParent/needs_a_mount", "skip", "no mount") + pkgDone("a", "pass"),
			allow: allow, ok: true,
			says:  []string{"SKIP example.com/m/cmd/x TestRoot: x_test.go:9: needs root to run as uid 65534", "allowed: needs root", "allowed: a mount", "2 skipped (2 allowed)"},
			hides: []string{"NOT ALLOWED"}},
		{name: "a skip not on the allowlist",
			events: run("a", "TestOther", "skip", "no network"),
			allow:  "", says: []string{"SKIP example.com/m/a TestOther: x_test.go:9: no network", "NOT ALLOWED"}},
		{name: "a subtest is named whole",
			events: run("a", "TestParent", "pass", "") + run("a", "TestParent/other", "skip", "no"),
			allow:  "a TestParent/needs_a_mount a mount\n", says: []string{"TestParent/other", "NOT ALLOWED", "line 1 names a TestParent/needs_a_mount"}},
		{name: "the package is matched whole",
			events: run("cmd/xx", "TestRoot", "skip", "root"),
			allow:  "x TestRoot root\n", says: []string{"NOT ALLOWED"}},
		{name: "a skip without a reason",
			events: run("a", "TestQuiet", "skip", ""), allow: "a TestQuiet fine\n", ok: true, says: []string{"(no reason given)"}},
		{name: "an allowlist line naming no test",
			events: run("a", "TestOne", "pass", ""),
			allow:  "a TestGone it used to skip\n", says: []string{"line 1 names a TestGone, which neither ran nor skipped"}},
		{name: "a listed test that ran is fine",
			events: run("cmd/x", "TestRoot", "pass", ""), allow: "cmd/x TestRoot needs root\n", ok: true},
		{name: "a build failure",
			events: run("a", "TestOne", "pass", "") + `{"ImportPath":"example.com/m/b","Action":"build-output","Output":"b/b.go:3:1: syntax error\n"}` + "\n" +
				`{"ImportPath":"example.com/m/b","Action":"build-fail"}` + "\n" + ev("fail", "b", "", ""),
			says: []string{"b/b.go:3:1: syntax error", "1 builds failed"}},
		{name: "no events", events: "", says: []string{"no test ran"}},
		{name: "not an event passes through",
			events: "go: downloading example.com/dep v1.0.0\n" + run("a", "TestOne", "pass", ""), ok: true,
			says: []string{"go: downloading example.com/dep v1.0.0"}},
		{name: "a passing test's output is not shown",
			events: run("a", "TestOne", "pass", "chatter"), ok: true, hides: []string{"chatter"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			al, err := parseAllow(strings.NewReader(c.allow))
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			if ok := report(strings.NewReader(c.events), &out, al); ok != c.ok {
				t.Errorf("report = %v, want %v:\n%s", ok, c.ok, out.String())
			}
			last := "FAIL"
			if c.ok {
				last = "PASS"
			}
			if !strings.HasSuffix(out.String(), "\n"+last+"\n") {
				t.Errorf("the report does not end with %s:\n%s", last, out.String())
			}
			for _, s := range c.says {
				if !strings.Contains(out.String(), s) {
					t.Errorf("the report lacks %q:\n%s", s, out.String())
				}
			}
			for _, s := range c.hides {
				if strings.Contains(out.String(), s) {
					t.Errorf("the report says %q:\n%s", s, out.String())
				}
			}
		})
	}
}

// An allowlist line must say why.
func TestParseAllowNeedsAReason(t *testing.T) {
	if _, err := parseAllow(strings.NewReader("cmd/x TestRoot\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a line without a reason: %v", err)
	}
	al, err := parseAllow(strings.NewReader("\n# c\n  cmd/x   TestRoot  needs   root  \n"))
	if err != nil || len(al) != 1 || al[0] != (allowed{pkg: "cmd/x", test: "TestRoot", why: "needs root", line: 3}) {
		t.Fatalf("parsed %+v, %v", al, err)
	}
}
