package object_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/internal/errs"
)

// An object written to its files (the metadata file and the control
// files) reads back as the same object, for every kind; a tree rebuilt
// from disk is the tree that was written.
func TestObjectsRoundTripThroughTheirFiles(t *testing.T) {
	model := object.DebugEcho()
	network := object.Object{Kind: object.KindModel, Path: "openai/gpt-x",
		Meta:     object.Meta{ID: "openai/gpt-x", Name: "gpt-x", Type: object.KindModel, OwnedBy: "openai", ContextLength: 128000},
		NativeID: "gpt-x-2026", Driver: object.Routes{object.RouteDefault: {"openai-responses", "openai-chat"}},
		Caps: []string{"chat", "stream", "tool_call_syntax"}, Defaults: []object.KV{{Key: "temperature", Value: "0.2"}, {Key: "api_key_env", Value: "MY_KEY"}},
		Session: object.SessionSocket, Status: "ready"} // .d/log is the calls' record, never read back
	agent := object.Object{Kind: object.KindAgent, Path: "coder",
		Meta:  object.Meta{ID: "agent/coder", Name: "coder", Type: object.KindAgent},
		Model: "openai/gpt-x", Tools: []string{"fs.read", "shell.exec"}, Root: "/home/me/work", Cwd: "/src", Delivery: object.TrustedAll,
		Session: object.SessionNone}
	tool := object.Object{Kind: object.KindTool, Path: "fs.read", Meta: object.Meta{ID: "tool/fs.read", Name: "fs.read", Type: object.KindTool},
		Session: object.SessionNone}
	for _, o := range []object.Object{model, network, agent, tool} {
		if err := o.Validate(); err != nil {
			t.Fatalf("%s is not valid to begin with: %v", o.Rel(), err)
		}
		meta, err := object.RenderMeta("/usr/local/bin/cortexfs-object-runner", o.Meta)
		if err != nil {
			t.Fatal(err)
		}
		back, err := object.FromFiles(o.Kind, o.Path, meta, object.Controls(o))
		if err != nil {
			t.Fatalf("%s: %v", o.Rel(), err)
		}
		if !reflect.DeepEqual(back, o) {
			t.Errorf("%s read back as\n%+v\nwant\n%+v", o.Rel(), back, o)
		}
		if o.Kind != object.KindAgent {
			for _, f := range object.AgentFiles {
				if _, ok := object.Controls(o)[f]; ok {
					t.Errorf("%s has the agent file %s", o.Rel(), f)
				}
			}
		}
	}
}

// What an object may not be: each rule refused with EINVAL before it
// reaches the tree.
func TestObjectValidateRefusals(t *testing.T) {
	base := func() object.Object {
		return object.Object{Kind: object.KindAgent, Path: "coder", Meta: object.Meta{Type: object.KindAgent}, Model: "debug/echo", Session: object.SessionNone}
	}
	for _, c := range []struct {
		name string
		edit func(*object.Object)
		says string
	}{
		{"an unknown kind", func(o *object.Object) { o.Kind = "gadget" }, "unknown object kind"},
		{"a bad session", func(o *object.Object) { o.Session = "forever" }, "session must be"},
		{"a two-line id", func(o *object.Object) { o.NativeID = "a\nb" }, "one line"},
		{"an agent without a model", func(o *object.Object) { o.Model = "" }, "model"},
		{"a bad tool name", func(o *object.Object) { o.Tools = []string{"../x"} }, "tool"},
		{"a relative root", func(o *object.Object) { o.Root = "work" }, "clean absolute path"},
		{"an unclean root", func(o *object.Object) { o.Root = "/work/../etc" }, "clean absolute path"},
		{"a relative cwd", func(o *object.Object) { o.Cwd = "src" }, "must start with /"},
		{"a delivery word", func(o *object.Object) { o.Delivery = "everything" }, "delivery"},
		{"a model with agent files", func(o *object.Object) {
			*o = object.DebugEcho()
			o.Tools = []string{"fs.read"}
		}, "agent files"},
		{"a model without a driver", func(o *object.Object) {
			*o = object.DebugEcho()
			o.Driver = nil
		}, "no driver"},
		{"metadata without a type", func(o *object.Object) { o.Meta.Type = "" }, "no type"},
		{"a two-line status", func(o *object.Object) { o.Status = "ok\nfine" }, "one line"},
	} {
		o := base()
		c.edit(&o)
		if err := o.Validate(); errs.CodeOf(err) != errs.EINVAL || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want EINVAL saying %q", c.name, err, c.says)
		}
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("the base agent: %v", err)
	}
}
