package gatewaymod_test

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/daemon/gatewaymod"
	"github.com/cbth-dev/cbth/adapters/daemon/inspectmod"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/daemontest"
)

// The gateway module on a daemon of its own (the host and this module):
// its route operations, its socket, and what a routed message becomes.

// Adding, replacing, listing and removing routes, each answering its
// outcome; a bad route or a missing one is refused and changes nothing.
func TestRouteOperations(t *testing.T) {
	d := daemontest.Start(t, nil, gatewaymod.New())
	for _, c := range []struct {
		name    string
		op      api.Op[api.RouteArgs, api.RouteReply]
		args    api.RouteArgs
		outcome string
		code    errs.Code
	}{
		{"add", api.GatewayRouteAdd, api.RouteArgs{WorkspaceID: "w", AgentID: "a", To: "thread:T", Target: "debug"}, "added", ""},
		{"the same again", api.GatewayRouteAdd, api.RouteArgs{WorkspaceID: "w", AgentID: "a", To: "thread:T", Target: "debug"}, "unchanged", ""},
		{"elsewhere", api.GatewayRouteAdd, api.RouteArgs{WorkspaceID: "w", AgentID: "a", To: "ctx:agent/coder", Target: "ctx"}, "replaced", ""},
		{"a second key", api.GatewayRouteAdd, api.RouteArgs{WorkspaceID: "w", AgentID: "b", To: "thread:U", Target: "debug"}, "added", ""},
		{"a thread with the ctx target", api.GatewayRouteAdd, api.RouteArgs{WorkspaceID: "w", AgentID: "c", To: "thread:T", Target: "ctx"}, "", errs.EINVAL},
		{"nowhere", api.GatewayRouteAdd, api.RouteArgs{WorkspaceID: "w", AgentID: "c", To: "mars:x", Target: "debug"}, "", errs.EINVAL},
		{"remove", api.GatewayRouteRemove, api.RouteArgs{WorkspaceID: "w", AgentID: "b"}, "removed", ""},
		{"remove again", api.GatewayRouteRemove, api.RouteArgs{WorkspaceID: "w", AgentID: "b"}, "", errs.ENOENT},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := daemontest.Call(d, api.DaemonStatus, api.Empty{}).LogHeadSeq
			rep, err := c.op.Call(d.Client, c.args)
			after := daemontest.Call(d, api.DaemonStatus, api.Empty{}).LogHeadSeq
			if c.code != "" {
				if errs.CodeOf(err) != c.code || after != before {
					t.Fatalf("%v (head %d -> %d), want %s and nothing appended", err, before, after, c.code)
				}
				return
			}
			if err != nil || string(rep.Outcome) != c.outcome || rep.Route.WorkspaceID != c.args.WorkspaceID || rep.Route.AgentID != c.args.AgentID {
				t.Fatalf("%+v, %v; want %s of the route", rep, err, c.outcome)
			}
			if (c.outcome == "unchanged") != (after == before) {
				t.Fatalf("%s: head %d -> %d", c.outcome, before, after)
			}
		})
	}
	list := daemontest.Call(d, api.GatewayRouteList, api.Empty{})
	if len(list.Routes) != 1 || list.Routes[0].AgentID != "a" || list.Routes[0].To != "ctx:agent/coder" {
		t.Fatalf("routes %+v, want the one replaced route", list.Routes)
	}
}

// gwClient is a channel client on the gateway socket.
type gwClient struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialGateway(t *testing.T, d *daemontest.Daemon) *gwClient {
	t.Helper()
	var c net.Conn
	var err error
	// The gateway listens once the daemon has caught up (the module's
	// CatchUp): at most a moment after the daemon first answers.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err = net.Dial("unix", d.Home.GatewaySocket()); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &gwClient{t: t, c: c, r: bufio.NewReader(c)}
}

// send writes an envelope and reads answers until the one that ends the
// exchange (a status with its code, or an error); it returns them all.
func (g *gwClient) send(env map[string]any) []map[string]any {
	g.t.Helper()
	b, _ := json.Marshal(env)
	if _, err := g.c.Write(append(b, '\n')); err != nil {
		g.t.Fatal(err)
	}
	var out []map[string]any
	g.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		line, err := g.r.ReadBytes('\n')
		if err != nil {
			g.t.Fatalf("read the gateway's answer: %v (so far %v)", err, out)
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			g.t.Fatalf("the gateway's answer is not JSON: %s", line)
		}
		out = append(out, m)
		if m["event_type"] == "error" || m["event_type"] == "status" && m["status_code"] != nil {
			return out
		}
	}
}

func message(stream string, seq int, text string) map[string]any {
	return map[string]any{"channel_type": "dialog", "session_id": "s", "stream_id": stream, "seq": seq,
		"timestamp": "2026-11-21T10:00:00Z", "correlation_id": "conv-" + stream, "target": "wechat",
		"event_type": "message", "payload": map[string]any{"text": text}, "workspace_id": "w", "agent_id": "coder"}
}

// A message routed into a thread becomes a job of that thread, completed
// at once with the text as its result (in the artifact store, not the
// log), and the delivery core takes it from there; the same stream and
// seq sent again is a duplicate, and no second job is made.
func TestMessageIntoAThreadIsAJob(t *testing.T) {
	d := daemontest.Start(t, nil, gatewaymod.New(), inspectmod.New()) // inspectmod reads the jobs back
	daemontest.Call(d, api.GatewayRouteAdd, api.RouteArgs{WorkspaceID: "w", AgentID: "coder", To: "thread:T-gw", Target: "debug"})
	daemontest.Call(d, api.DebugTargetSet, api.DebugSetArgs{SourceThreadID: "T-gw", Behaviour: "accept"})
	g := dialGateway(t, d)
	secret := "the text of the message"
	ack := g.send(message("st-1", 1, secret))
	last := ack[len(ack)-1]
	pl, _ := last["payload"].(map[string]any)
	job, _ := pl["job_id"].(string)
	if last["status_code"] != "routed" || job == "" {
		t.Fatalf("answers %v, want routed with a job", ack)
	}
	v := daemontest.Call(d, api.JobQuery, api.JobArgs{JobID: job})
	if v.SourceThreadID != "T-gw" || string(v.TargetKind) != string(command.TargetDebug) || v.State != fsm.JobReady || v.Artifact == nil || v.Batch == nil {
		t.Fatalf("the job %+v, want a ready debug job of T-gw with an artifact in a batch", v)
	}
	if b, err := os.ReadFile(v.Artifact.ManagedPath); err != nil || string(b) != secret {
		t.Fatalf("the artifact holds %q (%v), want the text", b, err)
	}
	if db, _ := os.ReadFile(d.Home.DB()); strings.Contains(string(db), secret) {
		t.Fatal("the log file holds the message's text")
	}
	again := g.send(message("st-1", 1, secret))
	if again[len(again)-1]["status_code"] != "duplicate" {
		t.Fatalf("the resend: %v", again)
	}
	if jobs := daemontest.Call(d, api.JobList, api.JobListArgs{SourceThreadID: "T-gw"}); len(jobs.Jobs) != 1 {
		t.Fatalf("%d jobs of the thread after a resend, want 1", len(jobs.Jobs))
	}
}

// A connected channel client keeps the daemon up (a busy reason), and
// once it hangs up it no longer does.
func TestAClientKeepsTheDaemonUp(t *testing.T) {
	d := daemontest.Start(t, nil, gatewaymod.New())
	g := dialGateway(t, d)
	busy := func() []string { return daemontest.Call(d, api.DaemonStatus, api.Empty{}).BusyReasons }
	waitFor(t, "the client among the busy reasons", func() bool { return slices.Contains(busy(), "1 gateway client") })
	g.c.Close()
	waitFor(t, "the client gone from the busy reasons", func() bool { return !slices.Contains(busy(), "1 gateway client") })
}

// The socket removed from under a running daemon is listened on again
// (channel clients find the gateway by its path only).
func TestARemovedSocketComesBack(t *testing.T) {
	d := daemontest.Start(t, nil, gatewaymod.New())
	dialGateway(t, d)
	if err := os.Remove(d.Home.GatewaySocket()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the gateway socket back", func() bool {
		c, err := net.Dial("unix", d.Home.GatewaySocket())
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// waitFor polls cond until it holds, for at most 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
