package cred

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/internal/errs"
)

type fakeKeychain map[string]string

func (f fakeKeychain) Get(service, account string) (string, error) {
	if account != Account {
		return "", ErrNotFound
	}
	v, ok := f[service]
	if !ok {
		return "", ErrNotFound
	}
	return v, nil
}

type stuckKeychain struct{ release chan struct{} }

func (s stuckKeychain) Get(string, string) (string, error) { <-s.release; return "late", nil }

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestPriority(t *testing.T) {
	kc := fakeKeychain{"cortexfs:openai": "kc-openai", "cortexfs:lmm": "kc-lmm"}
	cases := []struct {
		name, provider, override string
		env                      map[string]string
		want                     string
		code                     errs.Code
	}{
		{"env wins over keychain", "openai", "", map[string]string{"OPENAI_API_KEY": "env-openai"}, "env-openai", ""},
		{"keychain when env absent", "openai", "", nil, "kc-openai", ""},
		{"empty env falls through", "openai", "", map[string]string{"OPENAI_API_KEY": "  "}, "kc-openai", ""},
		{"override variable first", "lmm", "LMM_API_KEY", map[string]string{"LMM_API_KEY": "env-lmm", "LMM_API_KEY_X": "no"}, "env-lmm", ""},
		{"custom host variable", "api.lmm.best", "", map[string]string{"API_LMM_BEST_API_KEY": "h"}, "h", ""},
		{"gemini falls back to GOOGLE_API_KEY", "google", "", map[string]string{"GOOGLE_API_KEY": "g"}, "g", ""},
		{"gemini prefers GEMINI_API_KEY", "google", "", map[string]string{"GOOGLE_API_KEY": "g", "GEMINI_API_KEY": "gm"}, "gm", ""},
		{"nothing configured", "anthropic", "", nil, "", errs.ENOTCONF},
	}
	for _, c := range cases {
		s := Source{LookupEnv: env(c.env), Keychain: kc}
		got, err := s.APIKey(context.Background(), c.provider, c.override)
		if got != c.want || errs.CodeOf(err) != c.code {
			t.Errorf("%s: got %q, %v", c.name, got, err)
		}
	}
}

func TestStuckKeychainIsNotConfigured(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	s := Source{LookupEnv: env(nil), Keychain: stuckKeychain{release}, Timeout: 10 * time.Millisecond}
	_, err := s.APIKey(context.Background(), "openai", "")
	if errs.CodeOf(err) != errs.ENOTCONF {
		t.Fatalf("got %v, want ENOTCONF", err)
	}
	if !strings.Contains(err.Error(), "OPENAI_API_KEY") || !strings.Contains(err.Error(), "cortexfs:openai") {
		t.Errorf("error does not say where to configure: %v", err)
	}
}

// The real keychain on this headless box has no secret service: the
// look-up must come back (bounded) as not configured.
func TestSystemKeychainAbsentIsNotConfigured(t *testing.T) {
	s := Source{LookupEnv: env(nil), Keychain: System{}, Timeout: time.Second}
	_, err := s.APIKey(context.Background(), "cbth-test-no-such-provider", "")
	if errs.CodeOf(err) != errs.ENOTCONF {
		t.Fatalf("got %v, want ENOTCONF", err)
	}
}

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{"api.lmm.best": "API_LMM_BEST_API_KEY", "lmm": "LMM_API_KEY", "a-b+c": "A_B_C_API_KEY"} {
		if got := EnvName(in); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", in, got, want)
		}
	}
}
