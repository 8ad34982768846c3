// Package credenv names the environment variables a provider's
// credential is read from. It is apart from package cred so that cbth,
// which passes those variables (and only those) to the provider helper,
// does not link the keychain client cred holds.
package credenv

import "strings"

// EnvNames lists the variables tried for provider, first match wins. The
// override (a .d/default api_key_env) comes first.
func EnvNames(provider, override string) []string {
	var names []string
	if override != "" {
		names = append(names, override)
	}
	switch provider {
	case "openai":
		names = append(names, "OPENAI_API_KEY")
	case "anthropic":
		names = append(names, "ANTHROPIC_API_KEY")
	case "google", "gemini":
		names = append(names, "GEMINI_API_KEY", "GOOGLE_API_KEY")
	default:
		names = append(names, EnvName(provider))
	}
	return names
}

// EnvName is <PROVIDER>_API_KEY with every non-alphanumeric byte as '_':
// api.lmm.best gives API_LMM_BEST_API_KEY.
func EnvName(provider string) string {
	b := []byte(strings.ToUpper(provider))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b) + "_API_KEY"
}
