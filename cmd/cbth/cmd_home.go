package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
	"github.com/cbth-dev/cbth/projections"
)

// HomeCmd groups the commands on the home itself.
type HomeCmd struct {
	Reinit HomeReinitCmd `cmd:"" help:"Move this home aside (kept as it is) and start a new one, optionally from an events export."`
}

// HomeReinitCmd is `cbth home reinit`: the explicit way out when the log
// cannot be trusted (see spec/engine.md, "Damage").
type HomeReinitCmd struct {
	Restore string `help:"An events export to load into the new home's log (its artifacts move along)." type:"path" placeholder:"FILE"`
}

// ReinitResult is what home reinit reports.
type ReinitResult struct {
	Outcome  string `json:"outcome"`
	Home     string `json:"home"`
	MovedTo  string `json:"moved_to"`
	Restored uint64 `json:"restored_events"`
}

// Run moves the home aside and starts a new one.
func (c *HomeReinitCmd) Run(env *Env) error {
	h, err := env.Home()
	if err != nil {
		return err
	}
	if _, err := os.Lstat(h.Root); err != nil {
		return errs.Wrap(errs.ENOENT, err, "no home at %s", h.Root)
	}
	if c.Restore != "" {
		// Check the whole export before anything moves: a bad one
		// leaves the home as it was.
		if err := readExport(c.Restore, func(events.Envelope) error { return nil }); err != nil {
			return err
		}
	}
	old, err := h.Acquire()
	if err != nil {
		return err
	}
	aside, err := h.MoveAside(time.Now())
	old.Close()
	if err != nil {
		return err
	}
	res := ReinitResult{Outcome: "reinitialised", Home: h.Root, MovedTo: aside}
	if err := home.EnsureDir(h.Root); err != nil {
		return err
	}
	if c.Restore != "" {
		// The log names its artifacts by path inside the home.
		if err := os.Rename(filepath.Join(aside, "artifacts"), h.Artifacts()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return errs.Wrap(errs.EINTERNAL, err, "move the artifacts into the new home")
		}
	}
	if err := h.Ensure(); err != nil {
		return err
	}
	lock, err := h.Acquire()
	if err != nil {
		return err
	}
	defer lock.Close()
	// The settings are not state: the new home keeps them.
	if b, err := os.ReadFile(filepath.Join(aside, "config.toml")); err == nil {
		if err := home.WriteFileAtomic(h.Config(), b); err != nil {
			return errs.IO(err, "copy config.toml")
		}
	}
	if c.Restore != "" {
		if res.Restored, err = restore(h, c.Restore); err != nil {
			return err
		}
	}
	return env.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "%s moved to %s; a new home starts at %s\n", h.Root, aside, h.Root)
		if c.Restore != "" {
			fmt.Fprintf(w, "restored %s from %s\n", plural.Count(res.Restored, "event", "events"), c.Restore)
		}
	})
}

func readExport(path string, fn func(events.Envelope) error) error {
	f, err := os.Open(path)
	if err != nil {
		return errs.Wrap(errs.ENOENT, err, "open %s", path)
	}
	defer f.Close()
	return engine.ReadExport(f, fn)
}

// restore loads an export into the new home's empty log.
func restore(h home.Home, path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, errs.Wrap(errs.ENOENT, err, "open %s", path)
	}
	defer f.Close()
	e, err := engine.Open(h.DB(), engine.Options{Projections: projections.Store{}})
	if err != nil {
		return 0, err
	}
	st, err := e.Import(context.Background(), f)
	if cerr := e.Close(); err == nil {
		err = cerr
	}
	return st.Events, err
}
