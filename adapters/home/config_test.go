package home_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/internal/errs"
)

func TestLoadConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string // "" means no config.toml
		env     string // CBTH_IDLE_TIMEOUT
		wantErr string // substring; "" means success
		check   func(t *testing.T, c home.Config)
	}{
		{name: "no file gives the defaults", check: func(t *testing.T, c home.Config) {
			if !reflect.DeepEqual(c, home.Defaults()) {
				t.Errorf("got %+v, want the defaults", c)
			}
		}},
		{name: "values override defaults", file: `
idle_timeout = "90s"
max_result_bytes = 1024
park_hook = ["/bin/echo", "parked"]

[delivery]
max_jobs_per_batch = 3
max_wait_window = "250ms"
`, check: func(t *testing.T, c home.Config) {
			if c.IdleTimeout.Duration != 90*time.Second || c.MaxResultBytes != 1024 {
				t.Errorf("top level not read: %+v", c)
			}
			if len(c.ParkHook) != 2 || c.ParkHook[1] != "parked" {
				t.Errorf("park_hook = %q", c.ParkHook)
			}
			if c.Delivery.MaxJobsPerBatch != 3 || c.Delivery.MaxWaitWindow.Duration != 250*time.Millisecond {
				t.Errorf("[delivery] not read: %+v", c.Delivery)
			}
			if c.Delivery.Cooldown != home.Defaults().Delivery.Cooldown {
				t.Errorf("an absent key lost its default: %v", c.Delivery.Cooldown)
			}
		}},
		{name: "the environment wins over the file", file: `idle_timeout = "90s"`, env: "3s", check: func(t *testing.T, c home.Config) {
			if c.IdleTimeout.Duration != 3*time.Second {
				t.Errorf("idle timeout %v", c.IdleTimeout)
			}
		}},
		{name: "unknown top-level key", file: "idle_timeout = \"1m\"\nidel_timeout = \"2m\"\n", wantErr: "idel_timeout"},
		{name: "unknown key in a table", file: "[delivery]\nmax_jobs = 3\n", wantErr: "max_jobs"},
		{name: "bad duration", file: `idle_timeout = "ten minutes"`, wantErr: "idle_timeout"},
		{name: "wrong type", file: `max_result_bytes = "big"`, wantErr: "max_result_bytes"},
		{name: "not TOML", file: "idle_timeout = \n", wantErr: "config.toml"},
		{name: "task bounds read", file: "[task]\nmax_running = 2\noutput_tail = 100\nspool_max = 1000\nkill_grace = \"1s\"\n", check: func(t *testing.T, c home.Config) {
			if c.Task != (home.Task{MaxRunning: 2, OutputTail: 100, SpoolMax: 1000, KillGrace: home.Duration{Duration: time.Second}}) {
				t.Errorf("[task] = %+v", c.Task)
			}
		}},
		{name: "the default spool cap gives way to max_result_bytes", file: "max_result_bytes = 1024\n", check: func(t *testing.T, c home.Config) {
			if c.Task.SpoolMax != 1024 {
				t.Errorf("spool_max = %d, want 1024", c.Task.SpoolMax)
			}
		}},
		{name: "spool cap over max_result_bytes", file: "max_result_bytes = 1024\n[task]\nspool_max = 2048\n", wantErr: "spool_max"},
		{name: "no task may run", file: "[task]\nmax_running = 0\n", wantErr: "max_running"},
		{name: "tail too long for the log", file: "[task]\noutput_tail = 65537\n", wantErr: "output_tail"},
		{name: "no grace", file: "[task]\nkill_grace = \"0s\"\n", wantErr: "kill_grace"},
		{name: "zero idle timeout", file: `idle_timeout = "0s"`, wantErr: "idle_timeout must be positive"},
		{name: "zero sweep interval", file: "[delivery]\nsweep_interval = \"0s\"\n", wantErr: "[delivery] sweep_interval must be positive"},
		{name: "zero redelivery window", file: "[delivery]\nredelivery_window = \"0s\"\n", wantErr: "[delivery] redelivery_window must be positive"},
		{name: "negative retention", file: `post_close_ttl = "-1h"`, wantErr: "post_close_ttl must not be negative"},
		{name: "empty batches", file: "[delivery]\nmax_jobs_per_batch = 0\n", wantErr: "[delivery] max_jobs_per_batch must be at least 1"},
		{name: "no delivery attempts", file: "[delivery]\nmax_delivery_attempts = -2\n", wantErr: "[delivery] max_delivery_attempts must be at least 1"},
		{name: "no result bytes", file: "max_result_bytes = 0\n", wantErr: "max_result_bytes must be at least 1"},
		{name: "empty park hook", file: `park_hook = [""]`, wantErr: "park_hook names no command"},
		{name: "back-off cap below its start", file: "[delivery]\neligible_backoff = \"2m\"\neligible_backoff_max = \"1m\"\n", wantErr: "[delivery] eligible_backoff_max (1m0s) must be at least eligible_backoff (2m0s)"},
		{name: "back-off cap below the default start", file: "[delivery]\neligible_backoff_max = \"30s\"\n", wantErr: "eligible_backoff_max"},
		{name: "jitter of a whole wait", file: "[delivery]\neligible_backoff_jitter = 1.0\n", wantErr: "[delivery] eligible_backoff_jitter must be at least 0 and less than 1"},
		{name: "negative jitter", file: "[delivery]\neligible_backoff_jitter = -0.1\n", wantErr: "eligible_backoff_jitter"},
		{name: "jitter not a number", file: "[delivery]\neligible_backoff_jitter = nan\n", wantErr: "eligible_backoff_jitter"},
		{name: "back-off settings", file: "[delivery]\neligible_backoff = \"10s\"\neligible_backoff_max = \"10s\"\neligible_backoff_jitter = 0\n",
			check: func(t *testing.T, c home.Config) {
				if d := c.Delivery; d.EligibleBackoff.Duration != 10*time.Second || d.EligibleBackoffMax.Duration != 10*time.Second || d.EligibleBackoffJitter != 0 {
					t.Fatalf("back-off settings read as %+v", d)
				}
			}},
		{name: "bad environment", env: "soon", wantErr: "CBTH_IDLE_TIMEOUT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := home.Home{Root: t.TempDir()}
			if tc.file != "" {
				if err := os.WriteFile(filepath.Join(h.Root, "config.toml"), []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			getenv := func(k string) string {
				if k == "CBTH_IDLE_TIMEOUT" {
					return tc.env
				}
				return ""
			}
			c, err := h.LoadConfig(getenv)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("accepted; want an error naming %q", tc.wantErr)
				}
				if errs.CodeOf(err) != errs.EINVAL || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v (%s); want EINVAL naming %q", err, errs.CodeOf(err), tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

// No config file, however broken, panics the loader or fails with
// anything but EINVAL.
func FuzzLoadConfig(f *testing.F) {
	f.Add("idle_timeout = \"90s\"\n[delivery]\nmax_jobs_per_batch = 3\n")
	f.Add("park_hook = [\"a\", \"b\"]\n")
	f.Add("[delivery\n")
	f.Add("idle_timeout = 5\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, file string) {
		h := home.Home{Root: dir}
		if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := h.LoadConfig(func(string) string { return "" })
		if err != nil && errs.CodeOf(err) != errs.EINVAL {
			t.Fatalf("%q: %v (%s), want EINVAL", file, err, errs.CodeOf(err))
		}
	})
}

// codex_binary is a name or an absolute path, codex_home an absolute
// path; "~/" means $HOME; without codex_home the daemon's CODEX_HOME, then
// ~/.codex, is the Codex home.
func TestCodexConfig(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	for _, tc := range []struct {
		file, wantErr, binary, codexHome string
	}{
		{file: `codex_binary = "codex"`, binary: "codex", codexHome: "/u/.codex"},
		{file: `codex_binary = "~/bin/codex"` + "\n" + `codex_home = "~/ch"`, binary: "/u/bin/codex", codexHome: "/u/ch"},
		{file: `codex_home = "/x/../y/"`, binary: "codex", codexHome: "/y"},
		{file: `codex_binary = "bin/codex"`, wantErr: "relative"},
		{file: `codex_home = "ch"`, wantErr: "not an absolute path"},
	} {
		h := home.Home{Root: t.TempDir()}
		if err := os.WriteFile(h.Config(), []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		getenv := env(map[string]string{"HOME": "/u"})
		c, err := h.LoadConfig(getenv)
		if tc.wantErr != "" {
			if errs.CodeOf(err) != errs.EINVAL || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %v, want EINVAL %q", tc.file, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		ch, err := c.CodexHomeDir(getenv)
		if c.CodexBinaryName() != tc.binary || ch != tc.codexHome || err != nil {
			t.Errorf("%s: binary %q home %q %v, want %q %q", tc.file, c.CodexBinaryName(), ch, err, tc.binary, tc.codexHome)
		}
	}
	c := home.Defaults()
	if ch, _ := c.CodexHomeDir(env(map[string]string{"HOME": "/u", "CODEX_HOME": "/env/codex"})); ch != "/env/codex" {
		t.Errorf("the daemon's CODEX_HOME: %q", ch)
	}
	if _, err := c.CodexHomeDir(env(map[string]string{"CODEX_HOME": "rel"})); errs.CodeOf(err) != errs.ENOTCONF {
		t.Errorf("a relative CODEX_HOME: %v", err)
	}
}

// The [cli] section: defaults fit the real Codex (acceptance 90 s, a 6 h
// observation window), and a window not longer than the idle timeout, or
// a settle delay not shorter than the reconcile window, is refused.
func TestCLIConfig(t *testing.T) {
	d := home.Defaults()
	if d.CLI.AcceptanceTimeout.Duration < 90*time.Second || d.CLI.ObservationWindow.Duration != 6*time.Hour || d.CLI.TrustedAll || d.CLI.Steer {
		t.Fatalf("[cli] defaults %+v", d.CLI)
	}
	for _, tc := range []struct {
		toml string
		ok   bool
	}{
		{"[cli]\nacceptance_timeout = \"2m\"\nsteer = true\n", true},
		{"idle_timeout = \"7h\"\n", false},
		{"[cli]\nobservation_window = \"5m\"\n", false},
		{"[cli]\nsettle_delay = \"30s\"\n", false},
		{"[cli]\nacceptance_timeout = \"0s\"\n", false},
	} {
		h := home.Home{Root: t.TempDir()}
		if err := os.WriteFile(h.Config(), []byte(tc.toml), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := h.LoadConfig(func(string) string { return "" })
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v", tc.toml, err)
		}
	}
}

// [[ctx.shared]]: each space names the objects whose sessions may use
// scope shared; a bad name or object, a name used twice, or an object in
// two spaces is EINVAL naming the key. No section: no shared space.
func TestCtxSharedConfig(t *testing.T) {
	if len(home.Defaults().Ctx.Shared) != 0 {
		t.Fatal("a shared space by default")
	}
	for _, tc := range []struct {
		toml, wantErr string
		spaces        map[string]string
	}{
		{toml: "[[ctx.shared]]\nname = \"team\"\nobjects = [\"agent/coder\", \"model/debug/echo\"]\n[[ctx.shared]]\nname = \"ops\"\nobjects = [\"agent/ops\"]\n",
			spaces: map[string]string{"agent/coder": "team", "model/debug/echo": "team", "agent/ops": "ops"}},
		{toml: "[[ctx.shared]]\nname = \"../x\"\nobjects = [\"agent/coder\"]\n", wantErr: `name "../x"`},
		{toml: "[[ctx.shared]]\nname = \"\"\nobjects = [\"agent/coder\"]\n", wantErr: "[[ctx.shared]] #1"},
		{toml: "[[ctx.shared]]\nname = \"team\"\nobjects = [\"coder\"]\n", wantErr: "agent/NAME or model/PROVIDER/MODEL"},
		{toml: "[[ctx.shared]]\nname = \"team\"\nobjects = [\"model/echo\"]\n", wantErr: `object "model/echo"`},
		{toml: "[[ctx.shared]]\nname = \"team\"\nobjects = []\n", wantErr: "lists no objects"},
		{toml: "[[ctx.shared]]\nname = \"a\"\nobjects = [\"agent/x\"]\n[[ctx.shared]]\nname = \"a\"\nobjects = [\"agent/y\"]\n", wantErr: "used twice"},
		{toml: "[[ctx.shared]]\nname = \"a\"\nobjects = [\"agent/x\"]\n[[ctx.shared]]\nname = \"b\"\nobjects = [\"agent/x\"]\n", wantErr: "in one shared space"},
		{toml: "[[ctx.shared]]\nname = \"a\"\nobject = [\"agent/x\"]\n", wantErr: "unknown key"},
	} {
		h := home.Home{Root: t.TempDir()}
		if err := os.WriteFile(h.Config(), []byte(tc.toml), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := h.LoadConfig(func(string) string { return "" })
		if tc.wantErr != "" {
			if errs.CodeOf(err) != errs.EINVAL || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "config.toml") {
				t.Errorf("%q: %v, want EINVAL %q", tc.toml, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.toml, err)
		}
		got := c.Ctx.SharedSpaces()
		if len(got) != len(tc.spaces) {
			t.Fatalf("%q: spaces %v", tc.toml, got)
		}
		for o, sp := range tc.spaces {
			if got[o] != sp {
				t.Errorf("%q: %s in %q, want %q", tc.toml, o, got[o], sp)
			}
		}
	}
}

// [gateway.remotes.NAME]: a table gets its defaults; a missing host, a
// host ssh would read as an option, a bad name or timeout is EINVAL
// naming the table.
func TestGatewayRemotesConfig(t *testing.T) {
	load := func(toml string) (home.Config, error) {
		h := home.Home{Root: t.TempDir()}
		if err := os.WriteFile(h.Config(), []byte(toml), 0o600); err != nil {
			t.Fatal(err)
		}
		return h.LoadConfig(func(string) string { return "" })
	}
	c, err := load("[gateway.remotes.dev]\nhost = \"devbox\"\n[gateway.remotes.ci]\nhost = \"me@ci.example\"\nssh = \"/usr/bin/ssh\"\nssh_options = [\"-p\", \"2222\"]\ncbth = \"CBTH_HOME=/srv/cbth /opt/cbth\"\nstall_timeout = \"5s\"\n")
	if err != nil {
		t.Fatal(err)
	}
	want := home.GatewayRemote{Host: "devbox", SSH: "ssh", CBTH: "cbth", ConnectTimeout: home.Duration{Duration: 30 * time.Second},
		StallTimeout: home.Duration{Duration: 30 * time.Second}, IdleTimeout: home.Duration{Duration: time.Minute}}
	if got := c.Gateway.Remotes["dev"]; !reflect.DeepEqual(got, want) {
		t.Errorf("dev: %+v, want the defaults %+v", got, want)
	}
	if ci := c.Gateway.Remotes["ci"]; ci.SSH != "/usr/bin/ssh" || len(ci.SSHOptions) != 2 || ci.CBTH != "CBTH_HOME=/srv/cbth /opt/cbth" || ci.StallTimeout.Duration != 5*time.Second {
		t.Errorf("ci: %+v", ci)
	}
	for _, tc := range []struct{ toml, says string }{
		{"[gateway.remotes.dev]\nssh = \"ssh\"\n", "[gateway.remotes.dev]: host is required"},
		{"[gateway.remotes.dev]\nhost = \"-oProxyCommand=x\"\n", "is not a host name"},
		{"[gateway.remotes.dev]\nhost = \"a b\"\n", "is not a host name"},
		{"[gateway.remotes.\"-x\"]\nhost = \"h\"\n", "[gateway.remotes.-x]"},
		{"[gateway.remotes.dev]\nhost = \"h\"\nstall_timeout = \"2h\"\n", "stall_timeout must be positive"},
		{"[gateway.remotes.dev]\nhost = \"h\"\ncbth = \"a\\nb\"\n", "cbth must be one line"},
		{"[gateway.remotes.dev]\nhost = \"h\"\nport = 22\n", "port"},
	} {
		_, err := load(tc.toml)
		if errs.CodeOf(err) != errs.EINVAL || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q: %v, want EINVAL saying %q", tc.toml, err, tc.says)
		}
	}
}
