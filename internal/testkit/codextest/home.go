package codextest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Model is the model slug the test config names: one from Codex's bundled
// catalog, so Codex does not warn that it has no metadata for it.
const Model = "gpt-5.5"

// Config is the config.toml of a test CODEX_HOME: every model call goes to
// baseURL (Codex POSTs $baseURL/responses), no API key is sent, and a broken
// stream or a refused request fails the turn at once instead of retrying.
func Config(baseURL string) string {
	return fmt.Sprintf(`model = %q
model_provider = "fake"

[model_providers.fake]
name = "Fake"
base_url = %q
wire_api = "responses"
stream_max_retries = 0
request_max_retries = 0

[analytics]
enabled = false
`, Model, baseURL)
}

// Home makes a private CODEX_HOME (0700) whose config.toml sends model calls
// to baseURL. Its cleanup fails the test if Codex installed a managed
// app-server daemon there: plain `codex` does that and leaves the daemon
// running, and no test may.
func Home(t testing.TB, baseURL string) string {
	t.Helper()
	home := filepath.Join(t.TempDir(), "codex-home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(Config(baseURL)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(home, "packages", "app-server-daemon")); err == nil {
			t.Errorf("codextest: Codex installed a managed app-server daemon under %s", home)
		}
	})
	return home
}

// Env is the environment of a codex child process: the test's own without
// any CODEX_* variable or provider key, plus CODEX_HOME=home and a private
// HOME, so nothing reads or writes the user's ~/.codex.
func Env(t testing.TB, home string) []string {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "CODEX_") || strings.HasSuffix(k, "_API_KEY") || k == "HOME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "CODEX_HOME="+home, "HOME="+t.TempDir())
}

// TUIConfig is what a test CODEX_HOME adds so that the Codex TUI opens
// straight on a conversation in project: the project trusted (no trust
// prompt), the screen-reader check done, and the notices about newer
// models already shown (the TUI asks before anything else otherwise).
func TUIConfig(project string) string {
	return fmt.Sprintf(`
[projects.%q]
trust_level = "trusted"

[tui]
screen_reader_detection_done = true

[tui.model_availability_nux]
"gpt-6.1-sol" = 1

[notice.model_migrations]
"gpt-5.5" = "gpt-6-sol"
`, project)
}

// TUIHome is Home with TUIConfig(project) added.
func TUIHome(t testing.TB, baseURL, project string) string {
	t.Helper()
	home := Home(t, baseURL)
	f, err := os.OpenFile(filepath.Join(home, "config.toml"), os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(TUIConfig(project)); err != nil {
		t.Fatal(err)
	}
	return home
}
