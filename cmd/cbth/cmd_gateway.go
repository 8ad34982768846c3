package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cbth-dev/cbth/adapters/gateway"
	"github.com/cbth-dev/cbth/adapters/gateway/envelope"
	"github.com/cbth-dev/cbth/adapters/gateway/remote"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/google/uuid"
)

// GatewayCmd groups the channel gateway (spec/channels.md).
type GatewayCmd struct {
	Send  GatewaySendCmd  `cmd:"" help:"Send envelopes to the gateway (JSON lines on stdin, or one built from flags) and print its answers."`
	Tail  GatewayTailCmd  `cmd:"" help:"Print the gateway's routed metadata as it is recorded."`
	Route GatewayRouteCmd `cmd:"" help:"Manage the routes from workspace_id + agent_id to an agent, a thread or another machine's gateway."`
	Serve GatewayServeCmd `cmd:"" help:"Serve this machine's gateway to another cbth on stdin and stdout (what an ssh:NAME route runs over ssh)."`
}

// GatewayServeCmd is `cbth gateway serve --stdio`: the remote end of an
// ssh:NAME route, run by sshd for the local gateway
// (adapters/gateway/remote).
type GatewayServeCmd struct {
	Stdio bool `help:"Speak the gateway's stdio protocol on stdin and stdout (the only way it serves)." required:""`
}

// Run relays the link into this home's gateway, starting the daemon if
// needed. When the gateway cannot be reached the local end gets the
// reason as a frame, not only as the exit status ssh passes on. Stdout is
// the protocol's: an error goes to stderr only, even under --json.
func (c *GatewayServeCmd) Run(env *Env) error {
	conn, err := dialGateway(env)
	if err != nil {
		_ = remote.WriteFault(env.Stdout, err)
		return reported{err}
	}
	if err := remote.Serve(os.Stdin, env.Stdout, conn, remote.ServeOptions{Version: Version}); err != nil {
		return reported{err}
	}
	return nil
}

// GatewaySendCmd is `cbth gateway send`.
type GatewaySendCmd struct {
	Channel       string        `help:"channel_type: dialog or ssh_remote." default:"dialog"`
	SessionID     string        `help:"session_id (transport state only; it never routes)." name:"session-id"`
	StreamID      string        `help:"stream_id. Without it, envelopes are read from stdin, one JSON object per line." name:"stream-id"`
	Seq           uint64        `help:"seq on the stream (from 1)."`
	CorrelationID string        `help:"correlation_id (default: a new one)." name:"correlation-id"`
	Target        string        `help:"target (the endpoint the sender names, e.g. codex)." default:"cli"`
	EventType     string        `help:"event_type: message, tool_call, status or error." name:"event-type" default:"message"`
	Text          string        `help:"The message text: the payload becomes {\"text\": TEXT}."`
	Payload       string        `help:"The payload, a JSON object (instead of --text)."`
	Workspace     string        `help:"workspace_id (with --agent, the routing key)."`
	Agent         string        `help:"agent_id."`
	MessageID     string        `help:"message_id." name:"message-id"`
	DedupKey      string        `help:"dedup_key: a resend with the same key is routed once." name:"dedup-key"`
	StatusCode    string        `help:"status_code (resume asks where the stream stands)." name:"status-code"`
	ErrorCode     string        `help:"error_code." name:"error-code"`
	ReasonCode    string        `help:"reason_code (a downgrade's reason)." name:"reason-code"`
	RemoteMode    string        `help:"remote_mode of an ssh_remote channel: ide_primary or terminal_fallback." name:"remote-mode"`
	ResumeCursor  string        `help:"resume_cursor." name:"resume-cursor"`
	RetryCount    int           `help:"retry_count." name:"retry-count"`
	Timeout       time.Duration `help:"How long to wait for each answer." default:"10m"`
}

// build makes the envelope the flags describe. The gateway validates it;
// the client does not, so what it refuses is reported the same way
// whether it came from flags or stdin.
func (c *GatewaySendCmd) build() ([]byte, error) {
	m := map[string]any{"channel_type": c.Channel, "session_id": c.SessionID, "stream_id": c.StreamID, "seq": c.Seq,
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano), "correlation_id": c.CorrelationID, "target": c.Target,
		"event_type": c.EventType}
	if c.CorrelationID == "" {
		m["correlation_id"] = uuid.NewString()
	}
	switch {
	case c.Payload != "" && c.Text != "":
		return nil, errs.New(errs.EINVAL, "give --text or --payload, not both")
	case c.Payload != "":
		m["payload"] = json.RawMessage(c.Payload)
		if !json.Valid([]byte(c.Payload)) {
			return nil, errs.New(errs.EINVAL, "--payload is not JSON")
		}
	case c.Text != "":
		m["payload"] = map[string]string{"text": c.Text}
	default:
		m["payload"] = map[string]any{}
	}
	for k, v := range map[string]string{"workspace_id": c.Workspace, "agent_id": c.Agent, "message_id": c.MessageID,
		"dedup_key": c.DedupKey, "status_code": c.StatusCode, "error_code": c.ErrorCode, "reason_code": c.ReasonCode,
		"remote_mode": c.RemoteMode, "resume_cursor": c.ResumeCursor} {
		if v != "" {
			m[k] = v
		}
	}
	if c.RetryCount != 0 {
		m["retry_count"] = c.RetryCount
	}
	return json.Marshal(m)
}

// Run sends and prints every answer as a JSON line. It fails with the
// code of the last refusal, if any, after printing everything.
func (c *GatewaySendCmd) Run(env *Env) error {
	var lines [][]byte
	if c.StreamID != "" {
		b, err := c.build()
		if err != nil {
			return err
		}
		lines = append(lines, b)
	}
	conn, err := dialGateway(env)
	if err != nil {
		return err
	}
	defer conn.Close()
	r := bufio.NewReaderSize(conn, 64<<10)
	out := bufio.NewWriter(env.Stdout)
	defer out.Flush()
	var last error
	send := func(line []byte) error {
		if len(strings.TrimSpace(string(line))) == 0 {
			return nil
		}
		_, werr := conn.Write(append(line, '\n'))
		for {
			wait := c.Timeout
			if werr != nil {
				// The gateway may have refused the connection and closed
				// it (a peer of another uid): its answer says why.
				wait = time.Second
			}
			_ = conn.SetReadDeadline(time.Now().Add(wait))
			reply, err := r.ReadBytes('\n')
			if err != nil {
				if werr != nil {
					return errs.Wrap(errs.EHOSTDOWN, werr, "write to the gateway")
				}
				return errs.Wrap(errs.EHOSTDOWN, err, "read from the gateway")
			}
			out.Write(reply)
			var e struct {
				Target    string `json:"target"`
				EventType string `json:"event_type"`
				ErrorCode string `json:"error_code"`
				Payload   struct {
					Message string `json:"message"`
				} `json:"payload"`
			}
			_ = json.Unmarshal(reply, &e)
			if e.Target != gateway.TargetGateway {
				continue
			}
			if e.EventType == envelope.EventError {
				last = reported{errs.New(errs.Code(e.ErrorCode), "the gateway refused an envelope: %s", e.Payload.Message)}
			}
			if werr != nil {
				out.Flush()
				return last
			}
			return out.Flush()
		}
	}
	if lines == nil {
		in := bufio.NewReaderSize(os.Stdin, 64<<10)
		for {
			line, err := in.ReadBytes('\n')
			if len(line) > 0 {
				if serr := send(trimNL(line)); serr != nil {
					return serr
				}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return errs.Wrap(errs.EINVAL, err, "read stdin")
			}
		}
	}
	for _, l := range lines {
		if err := send(l); err != nil {
			return err
		}
	}
	return last
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// dialGateway connects to the gateway socket, starting the daemon first
// when it is absent (unless CBTH_NO_AUTOSTART=1).
func dialGateway(env *Env) (*net.UnixConn, error) {
	if env.Getenv("CBTH_NO_AUTOSTART") != "1" {
		if _, err := call(env, api.Ping, api.Empty{}); err != nil {
			return nil, err
		}
	}
	h, err := env.Home()
	if err != nil {
		return nil, err
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: h.GatewaySocket(), Net: "unix"})
	if err != nil {
		return nil, errs.Wrap(errs.EHOSTDOWN, err, "connect to the gateway at %s", h.GatewaySocket())
	}
	return c, nil
}

// GatewayTailCmd is `cbth gateway tail`.
type GatewayTailCmd struct {
	From  uint64 `help:"First log seq to look at (default: what comes next)."`
	Count int    `help:"Stop after this many gateway events (0: never)." short:"n"`
	Wait  bool   `help:"Wait for new events; --no-wait stops at the log's head." default:"true" negatable:""`
}

// Run tails the gateway's events from the log.
func (c *GatewayTailCmd) Run(env *Env) error {
	cl, err := env.Client()
	if err != nil {
		return err
	}
	defer cl.Close()
	next := c.From
	if next == 0 {
		page, err := api.EventsRead.Call(cl, api.ReadArgs{From: ^uint64(0) >> 1, Limit: 1})
		if err != nil {
			return err
		}
		next = page.Head + 1
	}
	tw := tabwriter.NewWriter(env.Stdout, 2, 4, 2, ' ', 0)
	shown := 0
	for {
		a := api.ReadArgs{From: next}
		if c.Wait {
			a.WaitMS = 1000
		}
		page, err := api.EventsRead.Call(cl, a)
		if err != nil {
			return err
		}
		for _, e := range page.Events {
			next = e.Seq + 1
			if e.Stream.Kind != events.KindGatewayStream && e.Stream.Kind != events.KindGatewayRoute {
				continue
			}
			if env.JSON {
				b, _ := json.Marshal(e)
				fmt.Fprintln(env.Stdout, string(b))
			} else {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", e.Seq, e.RecordedAt.Format(time.RFC3339), e.Stream, e.Type, e.Payload)
				tw.Flush()
			}
			if shown++; c.Count > 0 && shown >= c.Count {
				return nil
			}
		}
		if page.Next != 0 {
			next = page.Next
			continue
		}
		if !c.Wait && next > page.Head {
			return nil
		}
	}
}

// GatewayRouteCmd groups the route commands.
type GatewayRouteCmd struct {
	Add  GatewayRouteAddCmd  `cmd:"" help:"Route a workspace_id + agent_id to ctx:agent/NAME, thread:THREAD_ID or ssh:REMOTE."`
	List GatewayRouteListCmd `cmd:"" help:"List the routes."`
	Rm   GatewayRouteRmCmd   `cmd:"" help:"Remove a route."`
}

// GatewayRouteAddCmd is `cbth gateway route add`.
type GatewayRouteAddCmd struct {
	Workspace string `help:"workspace_id of the routing key." required:""`
	Agent     string `help:"agent_id of the routing key." required:""`
	To        string `help:"ctx:agent/NAME (a CortexFS agent's socket session; ctx:model/P/M for a model socket), thread:THREAD_ID, or ssh:REMOTE (another machine's gateway, a [gateway.remotes.REMOTE] of config.toml)." required:""`
	Target    string `help:"ctx for a ctx route; ${thread_route_list} for a thread route; ssh for an ssh route." required:"" placeholder:"ctx|${thread_route_placeholder}|ssh"`
}

// Run adds the route.
func (c *GatewayRouteAddCmd) Run(env *Env) error {
	rep, err := call(env, api.GatewayRouteAdd, api.RouteArgs{WorkspaceID: c.Workspace, AgentID: c.Agent, To: c.To, Target: c.Target})
	if err != nil {
		return err
	}
	return env.emit(rep, func(w io.Writer) {
		fmt.Fprintf(w, "%s: %s / %s -> %s (%s)\n", rep.Outcome, c.Workspace, c.Agent, c.To, c.Target)
	})
}

// GatewayRouteRmCmd is `cbth gateway route rm`.
type GatewayRouteRmCmd struct {
	Workspace string `help:"workspace_id of the routing key." required:""`
	Agent     string `help:"agent_id of the routing key." required:""`
}

// Run removes the route.
func (c *GatewayRouteRmCmd) Run(env *Env) error {
	rep, err := call(env, api.GatewayRouteRemove, api.RouteArgs{WorkspaceID: c.Workspace, AgentID: c.Agent})
	if err != nil {
		return err
	}
	return env.emit(rep, func(w io.Writer) { fmt.Fprintf(w, "%s: %s / %s\n", rep.Outcome, c.Workspace, c.Agent) })
}

// GatewayRouteListCmd is `cbth gateway route list`.
type GatewayRouteListCmd struct{}

// Run lists the routes.
func (c *GatewayRouteListCmd) Run(env *Env) error {
	p, err := call(env, api.GatewayRouteList, api.Empty{})
	if err != nil {
		return err
	}
	return env.emit(p, func(w io.Writer) {
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "WORKSPACE\tAGENT\tTO\tTARGET")
		for _, r := range p.Routes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.WorkspaceID, r.AgentID, r.To, r.Target)
		}
		tw.Flush()
		if p.Omitted > 0 {
			fmt.Fprintf(w, "(%d more not shown; at most %d are listed)\n", p.Omitted, query.MaxRoutes)
		}
	})
}
