package cortexmod

import (
	"context"
	"encoding/json"
	"path/filepath"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command/cortexfs"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// maxTreeBytes bounds one tree's registrations as ctx.tree.load encodes
// them: a few thousand objects.
const maxTreeBytes = ipc.MaxResult - 1024

// loadTree returns a tree's registrations as a set.
func (m *Module) loadTree(root string) (api.TreeDoc, error) {
	var doc api.TreeDoc
	err := m.h.Eng.Read(func(s engine.Snapshot) error {
		t, err := query.CtxTree(s, root)
		if err != nil || t == nil {
			return err
		}
		doc.Exists = true
		doc.Set, err = setOf(t)
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
func (m *Module) saveTree(ctx context.Context, a api.TreeArgs) (api.TreeSaveReply, error) {
	if err := a.Set.Validate(); err != nil {
		return api.TreeSaveReply{}, err
	}
	// A tree is loaded whole (ctx.tree.load, and so `cbth model list`),
	// so it may hold no more than one reply carries; refused here, it
	// never becomes a tree that cannot be read back.
	b, err := ipc.Marshal(api.TreeDoc{Exists: true, Set: a.Set})
	if err != nil {
		return api.TreeSaveReply{}, errs.Wrap(errs.EINVAL, err, "encode the tree")
	}
	if len(b) > maxTreeBytes {
		return api.TreeSaveReply{}, errs.New(errs.EMSGSIZE, "the tree's registrations would be %d bytes, over the %d a tree may hold", len(b), maxTreeBytes)
	}
	cmd := cortexfs.SaveTree{Root: a.Root, Runner: a.Set.Runner}
	for _, o := range a.Set.Objects {
		b, err := json.Marshal(o)
		if err != nil {
			return api.TreeSaveReply{}, errs.Wrap(errs.EINVAL, err, "object %s", o.Rel())
		}
		cmd.Objects = append(cmd.Objects, aggregate.Entry{Key: o.Rel(), Value: b})
	}
	for _, al := range a.Set.Aliases {
		b, _ := json.Marshal(al)
		cmd.Aliases = append(cmd.Aliases, aggregate.Entry{Key: al.Path, Value: b})
	}
	res, err := m.h.Eng.Execute(ctx, engine.Meta{Actor: events.ActorCLI, CorrelationID: "ctx-tree"}, cmd)
	if err != nil {
		return api.TreeSaveReply{}, err
	}
	if err := m.materializeTree(a.Root); err != nil {
		return api.TreeSaveReply{}, err
	}
	return api.TreeSaveReply{Outcome: res.Outcome, Events: len(res.Events)}, nil
}

// materializeTree writes a tree's files and serves its model sockets.
func (m *Module) materializeTree(root string) error {
	doc, err := m.loadTree(root)
	if err != nil || !doc.Exists {
		return err
	}
	if err := tree.Materialize(root, doc.Set); err != nil {
		return err
	}
	m.sockets.Sync(root, doc.Set)
	return nil
}

// catchUpTrees rewrites every registered tree at start, so files lost or
// left behind by a crash between an append and its projection are mended.
func (m *Module) catchUpTrees() error {
	var roots []string
	if err := m.h.Eng.Read(func(s engine.Snapshot) error {
		var err error
		roots, err = query.CtxTreeRoots(s)
		return err
	}); err != nil {
		return err
	}
	for _, r := range roots {
		if err := m.materializeTree(r); err != nil {
			m.h.Log.Error("materialize ctx tree", "root", r, "err", err)
		}
	}
	return nil
}

// ctxServe makes sure the daemon serves a session=socket object's socket
// (cbth model serve): its sessions are then events like those of every
// socket the daemon serves. The request's connection is attached, so the
// daemon stays up while the foreground holds it.
func (m *Module) ctxServe(_ context.Context, a api.CtxServeArgs) (api.CtxServeReply, error) {
	doc, err := m.loadTree(a.Root)
	if err != nil {
		return api.CtxServeReply{}, err
	}
	if !doc.Exists {
		return api.CtxServeReply{}, errs.New(errs.ENOENT, "no tree is registered at %s (cbth ctx init)", a.Root)
	}
	var obj *object.Object
	for i := range doc.Set.Objects {
		if doc.Set.Objects[i].Rel() == a.Object {
			obj = &doc.Set.Objects[i]
		}
	}
	switch {
	case obj == nil:
		return api.CtxServeReply{}, errs.New(errs.ENOENT, "no %s in the tree at %s", a.Object, a.Root)
	case obj.Session != object.SessionSocket:
		return api.CtxServeReply{}, errs.New(errs.EINVAL, "%s has session=%s; a socket is only served for session=socket", a.Object, obj.Session)
	}
	// Serving follows the registrations; a socket that failed to start
	// is tried again here.
	m.sockets.Sync(a.Root, doc.Set)
	if !m.sockets.Serves(a.Root, a.Object) {
		return api.CtxServeReply{}, errs.New(errs.EHOSTDOWN, "the daemon could not serve %s (its log says why)", a.Object)
	}
	return api.CtxServeReply{Object: a.Object, Socket: filepath.Join(a.Root, a.Object) + ".sock"}, nil
}
