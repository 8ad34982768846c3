package gateway_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command/gateway"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

func gwStream(t *testing.T, e *engine.Engine, id string) *aggregate.GatewayStream {
	t.Helper()
	var st *aggregate.GatewayStream
	if err := e.Read(func(s engine.Snapshot) error {
		var err error
		st, err = query.GatewayStream(s, id)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return st
}

// Seqs past the high mark open a gap, reported once; a seq in a gap
// fills it; a seq received already is a duplicate that appends nothing;
// a refused or failed envelope leaves its seq unused.
func TestRecordEnvelopeSequence(t *testing.T) {
	e := enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{NoSync: true})
	ctx := context.Background()
	rec := func(seq uint64, outcome string) engine.Result {
		t.Helper()
		res, err := e.Execute(ctx, engine.Meta{Actor: events.ActorAdapter}, gateway.RecordEnvelope{StreamID: "s",
			Rec: events.GatewayEnvelopeRecorded{ChannelType: "dialog", Seq: seq, Type: "status", Outcome: outcome}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	rec(1, events.GatewayRecorded)
	if res := rec(5, events.GatewayRecorded); len(res.Events) != 2 || res.Events[1].Type != "gateway.gap_reported" {
		t.Fatalf("gap: %+v", res.Events)
	}
	rec(3, events.GatewayRecorded)
	st := gwStream(t, e, "s")
	if st.HighSeq != 5 || len(st.Missing) != 2 || st.Missing[0] != (aggregate.SeqRange{From: 2, To: 2}) || st.Missing[1] != (aggregate.SeqRange{From: 4, To: 4}) || st.Cursor() != 1 {
		t.Fatalf("state %+v", st)
	}
	head := e.Head()
	if res := rec(3, events.GatewayRecorded); res.Outcome != events.GatewayDuplicate || len(res.Events) != 0 || e.Head() != head {
		t.Fatalf("duplicate: %+v", res)
	}
	rec(2, events.GatewayRefused)
	rec(2, events.GatewayFailed)
	if st := gwStream(t, e, "s"); st.Seen(2) {
		t.Fatal("a refused or failed envelope used its seq")
	}
	rec(2, events.GatewayRecorded)
	rec(4, events.GatewayRecorded)
	if st := gwStream(t, e, "s"); len(st.Missing) != 0 || st.Cursor() != 5 {
		t.Fatalf("filled: %+v", st)
	}
	// Gaps are bounded: the oldest are given up.
	for i := uint64(0); i < aggregate.MaxGaps+10; i++ {
		rec(10+2*i, events.GatewayRecorded)
	}
	if st := gwStream(t, e, "s"); len(st.Missing) != aggregate.MaxGaps {
		t.Fatalf("%d gaps kept", len(st.Missing))
	}
}

// ssh_remote: an error in ide_primary downgrades with a reason code; a
// downgrade a client states itself needs one; dialog has no mode.
func TestModeAfter(t *testing.T) {
	for _, c := range []struct {
		cur        string
		rec        events.GatewayEnvelopeRecorded
		to, reason string
		code       errs.Code
	}{
		{"", events.GatewayEnvelopeRecorded{ChannelType: "ssh_remote", Type: "status", RemoteMode: "ide_primary"}, "ide_primary", "", ""},
		{"ide_primary", events.GatewayEnvelopeRecorded{ChannelType: "ssh_remote", Type: "error", RemoteMode: "ide_primary", ErrorCode: "E1"}, "terminal_fallback", "E1", ""},
		{"ide_primary", events.GatewayEnvelopeRecorded{ChannelType: "ssh_remote", Type: "error", RemoteMode: "ide_primary", ErrorCode: "E1", ReasonCode: "ide_crashed"}, "terminal_fallback", "ide_crashed", ""},
		{"ide_primary", events.GatewayEnvelopeRecorded{ChannelType: "ssh_remote", Type: "error", RemoteMode: "ide_primary"}, "terminal_fallback", "ide_primary_error", ""},
		{"ide_primary", events.GatewayEnvelopeRecorded{ChannelType: "ssh_remote", Type: "status", RemoteMode: "terminal_fallback"}, "ide_primary", "", errs.EINVAL},
		{"ide_primary", events.GatewayEnvelopeRecorded{ChannelType: "ssh_remote", Type: "status", RemoteMode: "terminal_fallback", ReasonCode: "user"}, "terminal_fallback", "user", ""},
		{"terminal_fallback", events.GatewayEnvelopeRecorded{ChannelType: "ssh_remote", Type: "status", RemoteMode: "ide_primary"}, "ide_primary", "", ""},
		{"", events.GatewayEnvelopeRecorded{ChannelType: "dialog", Type: "error"}, "", "", ""},
	} {
		to, why, err := gateway.ModeAfter(c.cur, &c.rec)
		if errs.CodeOf(err) != c.code || (err == nil && (to != c.to || why != c.reason)) {
			t.Errorf("ModeAfter(%q, %+v) = %q %q %v; want %q %q %s", c.cur, c.rec, to, why, err, c.to, c.reason, c.code)
		}
	}
}

// Routes: a ctx route goes with target ctx, a thread route with a
// delivery target; adding the same route again changes nothing; removing
// a route that is not there is ENOENT.
func TestGatewayRoutes(t *testing.T) {
	e := enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{NoSync: true})
	ctx := context.Background()
	run := func(d engine.Decider) (engine.Outcome, error) {
		res, err := e.Execute(ctx, engine.Meta{Actor: events.ActorOperator}, d)
		return res.Outcome, err
	}
	for _, b := range [][4]string{
		{"w", "a", "ctx:agent/x", "cli"}, {"w", "a", "thread:T", "ctx"}, {"w", "a", "ctx:agent/../x", "ctx"},
		{"w", "a", "ctx:tool/x", "ctx"}, {"w", "a", "mail:x", "ctx"}, {"", "a", "thread:T", "debug"}, {"w", "a", "thread:", "debug"},
		{"w", "a", "ssh:dev", "ctx"}, {"w", "a", "ssh:", "ssh"}, {"w", "a", "ssh:-oProxyCommand=x", "ssh"}, {"w", "a", "ssh:a/b", "ssh"},
		{"w", "a", "thread:T", "ssh"},
	} {
		bad := gateway.AddRoute{WorkspaceID: b[0], AgentID: b[1], To: b[2], Target: b[3]}
		if _, err := run(bad); errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	for _, c := range []struct {
		d    engine.Decider
		want engine.Outcome
	}{
		{gateway.AddRoute{WorkspaceID: "w/x", AgentID: "a", To: "ctx:agent/coder", Target: "ctx"}, "added"},
		{gateway.AddRoute{WorkspaceID: "w/x", AgentID: "a", To: "ctx:agent/coder", Target: "ctx"}, "unchanged"},
		{gateway.AddRoute{WorkspaceID: "w/x", AgentID: "a", To: "thread:T1", Target: "debug"}, "replaced"},
		{gateway.AddRoute{WorkspaceID: "w", AgentID: "x/a", To: "ctx:model/debug/echo", Target: "ctx"}, "added"},
		{gateway.AddRoute{WorkspaceID: "w/x", AgentID: "a", To: "ssh:dev-box.1", Target: "ssh"}, "replaced"},
		{gateway.RemoveRoute{WorkspaceID: "w/x", AgentID: "a"}, "removed"},
	} {
		if out, err := run(c.d); err != nil || out != c.want {
			t.Errorf("%+v: %s %v, want %s", c.d, out, err, c.want)
		}
	}
	if _, err := run(gateway.RemoveRoute{WorkspaceID: "w/x", AgentID: "a"}); errs.CodeOf(err) != errs.ENOENT {
		t.Errorf("remove again: %v", err)
	}
	// "w/x"+"a" and "w"+"x/a" are two routing keys.
	var p query.RoutePage
	_ = e.Read(func(s engine.Snapshot) error { p, _ = query.GatewayRoutes(s); return nil })
	if len(p.Routes) != 1 || p.Routes[0].WorkspaceID != "w" || p.Routes[0].AgentID != "x/a" {
		t.Fatalf("routes %+v", p)
	}
}
