package daemon

import (
	"io"
	"os"

	"context"
	"encoding/json"

	"github.com/cbth-dev/cbth/adapters/cortexfs/cli"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/errs"
	"github.com/cbth-dev/cbth/engine/projections"
	"github.com/cbth-dev/cbth/events"
)

// TreeArgs name a CortexFS tree and, for saves, its wanted content.
type TreeArgs struct {
	Root string   `json:"root"`
	Set  tree.Set `json:"set"`
}

// TreeDoc is ctx.tree.load's result.
type TreeDoc struct {
	Exists bool     `json:"exists"`
	Set    tree.Set `json:"set"`
}

// loadTree returns a tree's registrations as a set.
func (d *Daemon) loadTree(root string) (TreeDoc, error) {
	var doc TreeDoc
	err := d.eng.View(func(v *projections.Tx) error {
		s, err := v.State(events.KindCtxTree, root)
		if err != nil || s == nil {
			return err
		}
		doc.Exists = true
		doc.Set, err = setOf(s.(*aggregate.CtxTree))
		return err
	})
	return doc, err
}

func setOf(t *aggregate.CtxTree) (tree.Set, error) {
	s := tree.Set{Runner: t.Runner, Objects: []object.Object{}, Aliases: []tree.Alias{}}
	for _, e := range t.Objects {
		var o object.Object
		if err := json.Unmarshal(e.Value, &o); err != nil {
			return s, errs.Wrap(errs.ECORRUPT, err, "object %s", e.Key)
		}
		s.Objects = append(s.Objects, o)
	}
	for _, e := range t.Aliases {
		var a tree.Alias
		if err := json.Unmarshal(e.Value, &a); err != nil {
			return s, errs.Wrap(errs.ECORRUPT, err, "alias %s", e.Key)
		}
		s.Aliases = append(s.Aliases, a)
	}
	return s, nil
}

// saveTree records the set's changes as events, then brings the files up
// to date: the tree on disk is a projection of the registrations.
func (d *Daemon) saveTree(ctx context.Context, a TreeArgs) (map[string]any, error) {
	if err := a.Set.Validate(); err != nil {
		return nil, err
	}
	cmd := command.SaveTree{Root: a.Root, Runner: a.Set.Runner}
	for _, o := range a.Set.Objects {
		b, err := json.Marshal(o)
		if err != nil {
			return nil, errs.Wrap(errs.EINVAL, err, "object %s", o.Rel())
		}
		cmd.Objects = append(cmd.Objects, aggregate.Entry{Key: o.Rel(), Value: b})
	}
	for _, al := range a.Set.Aliases {
		b, _ := json.Marshal(al)
		cmd.Aliases = append(cmd.Aliases, aggregate.Entry{Key: al.Path, Value: b})
	}
	res, err := d.eng.Execute(ctx, engine.Meta{Actor: events.ActorCLI, CorrelationID: "ctx-tree"}, cmd)
	if err != nil {
		return nil, err
	}
	if err := d.materializeTree(a.Root); err != nil {
		return nil, err
	}
	return map[string]any{"outcome": res.Outcome, "events": len(res.Events)}, nil
}

func (d *Daemon) materializeTree(root string) error {
	doc, err := d.loadTree(root)
	if err != nil || !doc.Exists {
		return err
	}
	if err := tree.Materialize(root, doc.Set); err != nil {
		return err
	}
	d.serveSockets(root, doc.Set)
	return nil
}

// serveSockets runs the .sock of every session=socket model of a tree for
// as long as the daemon runs, and stops those whose model went away.
func (d *Daemon) serveSockets(root string, set tree.Set) {
	d.sockMu.Lock()
	defer d.sockMu.Unlock()
	want := map[string]bool{}
	for _, o := range set.Objects {
		if o.Kind == object.KindModel && o.Session == object.SessionSocket {
			want[root+"\x00"+o.Path] = true
		}
	}
	for key, stop := range d.sockets {
		if !want[key] {
			stop()
			delete(d.sockets, key)
		}
	}
	for key := range want {
		if _, ok := d.sockets[key]; ok {
			continue
		}
		model := key[len(root)+1:]
		ctx, cancel := context.WithCancel(d.ctx)
		d.sockets[key] = cancel
		go func() {
			err := cli.ServeModel(ctx, root, model, os.Getuid(), io.Discard, d.opt.Clock.Now)
			if err != nil && ctx.Err() == nil {
				d.opt.Log.Error("model socket", "model", model, "err", err)
			}
		}()
	}
}

// catchUpTrees rewrites every registered tree at start, so files lost or
// left behind by a crash between an append and its projection are mended.
func (d *Daemon) catchUpTrees() error {
	var roots []string
	_ = d.eng.View(func(v *projections.Tx) error {
		return v.ForEach(events.KindCtxTree, func(s aggregate.State) error {
			roots = append(roots, s.Head().ID)
			return nil
		})
	})
	for _, r := range roots {
		if err := d.materializeTree(r); err != nil {
			d.opt.Log.Error("materialize ctx tree", "root", r, "err", err)
		}
	}
	return nil
}
