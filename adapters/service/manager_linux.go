package service

import (
	"os"
	"path/filepath"

	"github.com/cbth-dev/cbth/internal/errs"
)

// ForOS returns the user's systemd manager: units in
// $XDG_CONFIG_HOME/systemd/user (default ~/.config/systemd/user), driven
// by systemctl --user, or by $CBTH_SERVICE_CTL when set.
func ForOS(getenv func(string) string, run func(string, ...string) ([]byte, error)) (Manager, error) {
	base := getenv("XDG_CONFIG_HOME")
	if base == "" {
		h := getenv("HOME")
		if h == "" {
			return Manager{}, errs.New(errs.EINVAL, "neither XDG_CONFIG_HOME nor HOME is set")
		}
		base = filepath.Join(h, ".config")
	}
	ctl := getenv("CBTH_SERVICE_CTL")
	if ctl == "" {
		ctl = "systemctl"
	}
	return Manager{Kind: "systemd-user", Dir: filepath.Join(base, "systemd", "user"), Ctl: ctl, UID: os.Getuid(), Run: run}, nil
}
