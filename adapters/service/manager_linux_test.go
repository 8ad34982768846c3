package service

import (
	"path/filepath"
	"testing"
)

// The systemd manager's units go under $XDG_CONFIG_HOME, else ~/.config;
// $CBTH_SERVICE_CTL replaces systemctl; neither variable set is EINVAL.
func TestForOSLinux(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	m, err := ForOS(env(map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/h"}), nil)
	if err != nil || m.Dir != filepath.Join("/x", "systemd", "user") || m.Ctl != "systemctl" || m.Kind != "systemd-user" {
		t.Fatalf("XDG_CONFIG_HOME: %+v, %v", m, err)
	}
	m, err = ForOS(env(map[string]string{"HOME": "/h", "CBTH_SERVICE_CTL": "/bin/fakectl"}), nil)
	if err != nil || m.Dir != filepath.Join("/h", ".config", "systemd", "user") || m.Ctl != "/bin/fakectl" {
		t.Fatalf("HOME: %+v, %v", m, err)
	}
	if _, err := ForOS(env(nil), nil); err == nil {
		t.Fatal("neither set: no error")
	}
}
