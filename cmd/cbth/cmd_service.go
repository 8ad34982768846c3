package main

import (
	"fmt"
	"io"
	"os/exec"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/service"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/projections/inbox"
)

// ServiceCmd groups `cbth service`: an opt-in per-user service that keeps
// the daemon running, for Codex Desktop, whose heartbeats cannot start it.
type ServiceCmd struct {
	Install   ServiceInstallCmd   `cmd:"" help:"Install and start the per-user service running this cbth's daemon for this home."`
	Uninstall ServiceUninstallCmd `cmd:"" help:"Stop and remove the per-user service."`
	Status    ServiceStatusCmd    `cmd:"" help:"Show whether the service is installed, current and running."`
}

// ServiceReply is what the service commands print.
type ServiceReply struct {
	Outcome string `json:"outcome"`
	service.Status
	DaemonRunning bool `json:"daemon_running"`
}

func serviceSetup(env *Env) (service.Manager, service.Spec, home.Home, error) {
	h, err := env.Home()
	if err != nil {
		return service.Manager{}, service.Spec{}, h, err
	}
	m, err := service.ForOS(env.Getenv, func(ctl string, args ...string) ([]byte, error) {
		return exec.Command(ctl, args...).CombinedOutput()
	})
	if err != nil {
		return m, service.Spec{}, h, err
	}
	exe, err := inbox.Executable()
	if err != nil {
		return m, service.Spec{}, h, errs.Wrap(errs.EINTERNAL, err, "find this cbth's executable")
	}
	def, err := home.Resolve(func(k string) string {
		if k == "CBTH_HOME" {
			return ""
		}
		return env.Getenv(k)
	})
	if err != nil {
		return m, service.Spec{}, h, err
	}
	return m, service.Spec{Exe: exe, Home: h.Root, DefaultHome: def.Root}, h, nil
}

func (e *Env) emitService(r ServiceReply) error {
	return e.emit(r, func(w io.Writer) {
		fmt.Fprintf(w, "%s: %s %s at %s\n", r.Outcome, r.Manager, r.Name, r.Path)
		fmt.Fprintf(w, "installed %t, current %t, manager says %s, daemon running %t\n", r.Installed, r.UpToDate, r.Active, r.DaemonRunning)
		if r.ManagerError != "" {
			fmt.Fprintf(w, "the service manager could not be asked: %s\n", r.ManagerError)
		}
	})
}

// ServiceInstallCmd is `cbth service install`.
type ServiceInstallCmd struct{}

// Run installs.
func (c *ServiceInstallCmd) Run(env *Env) error {
	m, spec, h, err := serviceSetup(env)
	if err != nil {
		return err
	}
	st, err := m.Install(spec)
	if err != nil {
		return err
	}
	return env.emitService(ServiceReply{Outcome: "installed", Status: st, DaemonRunning: h.DaemonRunning()})
}

// ServiceUninstallCmd is `cbth service uninstall`.
type ServiceUninstallCmd struct{}

// Run uninstalls.
func (c *ServiceUninstallCmd) Run(env *Env) error {
	m, spec, h, err := serviceSetup(env)
	if err != nil {
		return err
	}
	st, err := m.Uninstall(spec)
	if err != nil {
		return err
	}
	return env.emitService(ServiceReply{Outcome: "uninstalled", Status: st, DaemonRunning: h.DaemonRunning()})
}

// ServiceStatusCmd is `cbth service status`.
type ServiceStatusCmd struct{}

// Run reports.
func (c *ServiceStatusCmd) Run(env *Env) error {
	m, spec, h, err := serviceSetup(env)
	if err != nil {
		return err
	}
	return env.emitService(ServiceReply{Outcome: "status", Status: m.Query(spec), DaemonRunning: h.DaemonRunning()})
}
