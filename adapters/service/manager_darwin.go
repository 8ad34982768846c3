package service

import (
	"os"
	"path/filepath"

	"github.com/cbth-dev/cbth/internal/errs"
)

// ForOS returns the user's launchd: agents in ~/Library/LaunchAgents,
// driven by launchctl in the gui/<uid> domain, or by $CBTH_SERVICE_CTL
// when set.
func ForOS(getenv func(string) string, run func(string, ...string) ([]byte, error)) (Manager, error) {
	h := getenv("HOME")
	if h == "" {
		return Manager{}, errs.New(errs.EINVAL, "HOME is not set")
	}
	ctl := getenv("CBTH_SERVICE_CTL")
	if ctl == "" {
		ctl = "launchctl"
	}
	return Manager{Kind: "launchd", Dir: filepath.Join(h, "Library", "LaunchAgents"), Ctl: ctl, UID: os.Getuid(), Run: run}, nil
}
