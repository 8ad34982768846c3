package supervisor_test

import (
	"context"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/codextest"
)

func TestSmoke(t *testing.T) {
	r := codextest.StartRig(t)
	t.Logf("identity %s init %+v", r.Inst.Identity, r.Inst.Init)
	c := r.Inst.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub := c.Subscribe()
	th, err := c.ThreadStart(ctx, appserver.ThreadStartParams{Cwd: r.Cwd})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("thread %+v", th.Thread.ID)
	turn, err := c.TurnStart(ctx, appserver.TurnStartParams{ThreadID: th.Thread.ID, Input: []appserver.Input{appserver.TextInput("hello [m1]")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("turn %+v", turn)
	for m := range sub.C() {
		t.Logf("%s %s %.300s", m.Kind, m.Method, m.Params)
		if m.Method == appserver.NoteTurnCompleted {
			break
		}
	}
	t.Logf("count %d", r.Model.Count("[m1]"))
}
