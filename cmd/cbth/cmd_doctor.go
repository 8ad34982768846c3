package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cbth-dev/cbth/adapters/doctor"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/internal/plural"
)

// DoctorCmd is `cbth doctor`. It only looks: it starts no daemon and
// writes nothing.
type DoctorCmd struct{}

// Run runs every check and exits 1 when one failed.
func (DoctorCmd) Run(env *Env) error {
	h, err := env.Home()
	if err != nil {
		return err
	}
	exe, _ := os.Executable()
	e := &doctor.Env{Home: h, CtxRoot: cortexEnv(env).CtxRoot, Getenv: env.Getenv,
		LookupEnv:  func(k string) (string, bool) { v := env.Getenv(k); return v, v != "" },
		Executable: exe, Version: Version, Proto: ipc.Proto, UID: os.Getuid()}
	rep := doctor.Run(context.Background(), e, doctor.Checks())
	err = env.emit(rep, func(w io.Writer) {
		for _, f := range rep.Checks {
			fmt.Fprintf(w, "%-4s  %-20s %s\n", strings.ToUpper(string(f.State)), f.ID, f.Detail)
			if f.Fix != "" && f.State != doctor.OK {
				fmt.Fprintf(w, "      %-20s fix: %s\n", "", f.Fix)
			}
		}
	})
	if err != nil {
		return err
	}
	if n := rep.Failed(); n > 0 {
		// The report is the output: no error object follows it.
		fmt.Fprintf(env.Stderr, "cbth: doctor found %s\n", plural.Count(n, "problem", "problems"))
		return exitStatus(1)
	}
	return nil
}
