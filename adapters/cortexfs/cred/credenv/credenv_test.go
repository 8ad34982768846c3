package credenv_test

import (
	"slices"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/cred/credenv"
)

// Each provider's credential comes from its own variables, the model's
// api_key_env first; any other provider's from <PROVIDER>_API_KEY with
// every byte that is not a letter or a digit as '_'.
func TestEnvNames(t *testing.T) {
	for _, c := range []struct {
		provider, override string
		want               []string
	}{
		{"openai", "", []string{"OPENAI_API_KEY"}},
		{"openai", "WORK_KEY", []string{"WORK_KEY", "OPENAI_API_KEY"}},
		{"anthropic", "", []string{"ANTHROPIC_API_KEY"}},
		{"google", "", []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"}},
		{"gemini", "", []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"}},
		{"api.lmm.best", "", []string{"API_LMM_BEST_API_KEY"}},
		{"my-host", "X", []string{"X", "MY_HOST_API_KEY"}},
		{"ünï", "", []string{"__N___API_KEY"}}, // each byte of a non-ASCII letter
	} {
		if got := credenv.EnvNames(c.provider, c.override); !slices.Equal(got, c.want) {
			t.Errorf("EnvNames(%q, %q) = %v, want %v", c.provider, c.override, got, c.want)
		}
	}
}
