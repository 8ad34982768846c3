package helper_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/helper"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
)

type nop struct{}

func (nop) Stream(context.Context, driver.Request, stream.Sink) error { return nil }

// TestMain lets this test binary be a helper: run with HELPER_TEST_MAIN
// set, it is helper.Main with two drivers.
func TestMain(m *testing.M) {
	if os.Getenv("HELPER_TEST_MAIN") != "" {
		os.Exit(helper.Main("test-helper", driver.Set{"zeta": nop{}, "alpha": nop{}}))
	}
	os.Exit(m.Run())
}

func helperRun(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	c := exec.Command(os.Args[0], args...)
	c.Env = append([]string{"HELPER_TEST_MAIN=1", "PATH=" + os.Getenv("PATH")}, env...)
	var out, errb strings.Builder
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// The helper's command line: --list names its drivers in order; where a
// credential was found is said, never the credential; anything else is
// its usage and exit 2.
func TestHelperCommandLine(t *testing.T) {
	if out, _, code := helperRun(t, nil, "--list"); code != 0 || out != "alpha\nzeta\n" {
		t.Errorf("--list: %d %q", code, out)
	}
	out, _, code := helperRun(t, []string{"OPENAI_API_KEY=sk-secret-value"}, "--check-credential", "openai")
	if code != 0 || strings.TrimSpace(out) != "$OPENAI_API_KEY" || strings.Contains(out, "sk-secret") {
		t.Errorf("--check-credential openai: %d %q", code, out)
	}
	out, _, code = helperRun(t, []string{"WORK_KEY=sk-work", "OPENAI_API_KEY=sk-other"}, "--check-credential", "openai", "WORK_KEY")
	if code != 0 || strings.TrimSpace(out) != "$WORK_KEY" {
		t.Errorf("--check-credential with an override: %d %q", code, out)
	}
	for _, args := range [][]string{{"--check-credential"}, {"--check-credential", ""}, {"--frobnicate"}} {
		if _, errOut, code := helperRun(t, nil, args...); code != 2 || !strings.Contains(errOut, "usage: test-helper") {
			t.Errorf("%v: %d %q", args, code, errOut)
		}
	}
	if out, _, code := helperRun(t, nil, "--help"); code != 0 || !strings.Contains(out, "--check-credential PROVIDER") {
		t.Errorf("--help: %d %q", code, out)
	}
}
