package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/internal/execfile"
	"github.com/cbth-dev/cbth/internal/testkit/proctest"
)

// These tests reach a remote gateway the way a user does: through a real
// OpenSSH server (Debian's openssh-server), started by the test on
// loopback with a generated host key, the generated client key its only
// authorized key and a private known_hosts, as the user running the
// test. The remote side is this same cbth under a home of its own. They
// fail when sshd is missing: .ci/run installs it. CBTH_TEST_NO_SSHD=1
// skips them on purpose (a machine without openssh-server, knowingly).

// testSSHD is one test's sshd and the client side's files.
type testSSHD struct {
	dir  string
	port int
	// config is an ssh_config (given with -F) naming the host aliases
	// "remote" and "stall" (its key in known_hosts), "stranger" (the
	// same server, an empty known_hosts), "nokey" (the same server, a
	// key it does not know), "closed" (a loopback port nobody listens
	// on) and "silent" (one that takes connections and never answers).
	config string
	log    *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func needSSH(t testing.TB) string {
	t.Helper()
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/sshd"); serr == nil {
			sshd, err = "/usr/sbin/sshd", nil
		}
	}
	for _, tool := range []string{"ssh", "ssh-keygen"} {
		if _, lerr := exec.LookPath(tool); lerr != nil && err == nil {
			err = lerr
		}
	}
	if err != nil {
		if os.Getenv("CBTH_TEST_NO_SSHD") == "1" {
			t.Skip("no OpenSSH server or client here, and CBTH_TEST_NO_SSHD=1 says to skip")
		}
		t.Fatalf("these tests need OpenSSH's sshd, ssh and ssh-keygen (Debian: openssh-server, openssh-client; .ci/run installs them; CBTH_TEST_NO_SSHD=1 skips): %v", err)
	}
	return sshd
}

func freeLoopbackPort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func startSSHD(t testing.TB) *testSSHD {
	t.Helper()
	sshd := needSSH(t)
	dir := t.TempDir()
	for _, k := range []string{"host_key", "client_key", "stray_key"} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "cbth-test", "-f", filepath.Join(dir, k)).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, out)
		}
	}
	pub, err := os.ReadFile(filepath.Join(dir, "client_key.pub"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 && runtime.GOOS == "linux" {
		// sshd started by root separates privileges into this empty
		// directory, which Debian's service unit makes at boot.
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := &testSSHD{dir: dir, log: &syncBuffer{}}
	var cmd *exec.Cmd
	for try := 0; ; try++ {
		s.port = freeLoopbackPort(t)
		cfg := filepath.Join(dir, "sshd_config")
		if err := os.WriteFile(cfg, []byte(strings.Join([]string{
			"ListenAddress 127.0.0.1",
			fmt.Sprintf("Port %d", s.port),
			"HostKey " + filepath.Join(dir, "host_key"),
			"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"),
			"PidFile none",
			"UsePAM no",
			// The test's temporary directories are not where sshd
			// expects a home's keys, with a home's modes.
			"StrictModes no",
			"PasswordAuthentication no",
			"KbdInteractiveAuthentication no",
			"PubkeyAuthentication yes",
			"PermitRootLogin prohibit-password",
			"MaxStartups 100",
			"LogLevel INFO",
		}, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(sshd, "-D", "-e", "-f", cfg)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(stderr)
		var said strings.Builder
		up := false
		for {
			line, err := r.ReadString('\n')
			said.WriteString(line)
			if strings.Contains(line, "Server listening on 127.0.0.1") {
				up = true
				break
			}
			if err != nil {
				break
			}
		}
		if up {
			go io.Copy(s.log, r)
			break
		}
		cmd.Wait()
		if try < 5 && strings.Contains(said.String(), "Address already in use") {
			continue
		}
		t.Fatalf("sshd did not start: %s", said.String())
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	hostPub, err := os.ReadFile(filepath.Join(dir, "host_key.pub"))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(hostPub))
	if err := os.WriteFile(filepath.Join(dir, "known_hosts"), []byte(fmt.Sprintf("[127.0.0.1]:%d %s %s\n", s.port, f[0], f[1])), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "known_hosts_empty"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	s.config = filepath.Join(dir, "ssh_config")
	common := strings.Join([]string{
		"  HostName 127.0.0.1",
		"  User " + u.Username,
		"  IdentitiesOnly yes",
		"  IdentityAgent none",
		"  GlobalKnownHostsFile /dev/null",
		"  StrictHostKeyChecking yes",
		"  ConnectTimeout 20",
		"  LogLevel ERROR",
	}, "\n")
	if err := os.WriteFile(s.config, []byte(strings.Join([]string{
		"Host remote stall",
		"  IdentityFile " + filepath.Join(dir, "client_key"),
		fmt.Sprintf("  Port %d", s.port),
		"  UserKnownHostsFile " + filepath.Join(dir, "known_hosts"),
		common,
		"Host stranger",
		"  IdentityFile " + filepath.Join(dir, "client_key"),
		fmt.Sprintf("  Port %d", s.port),
		"  UserKnownHostsFile " + filepath.Join(dir, "known_hosts_empty"),
		common,
		"Host closed",
		"  IdentityFile " + filepath.Join(dir, "client_key"),
		fmt.Sprintf("  Port %d", freeLoopbackPort(t)),
		"  UserKnownHostsFile " + filepath.Join(dir, "known_hosts"),
		common,
		"Host silent",
		"  IdentityFile " + filepath.Join(dir, "client_key"),
		fmt.Sprintf("  Port %d", silentPort(t)),
		"  UserKnownHostsFile " + filepath.Join(dir, "known_hosts"),
		common,
		"Host nokey",
		fmt.Sprintf("  Port %d", s.port),
		"  UserKnownHostsFile " + filepath.Join(dir, "known_hosts"),
		"  IdentityFile " + filepath.Join(dir, "stray_key"),
		common,
	}, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// silentPort is a loopback port that takes connections and never says a
// word: a host that is down behind a live address.
func silentPort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// sshPids are the local ssh processes of this test's links: their
// command lines name its ssh_config.
func (s *testSSHD) sshPids(t *testing.T) []int {
	t.Helper()
	pids, err := proctest.Find(func(args string) bool { return strings.HasPrefix(args, "ssh ") && strings.Contains(args, s.config) })
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// remoteSide is the cbth a test's sshd runs: a link to the test binary
// of its own name (so its relays can be told from other tests'), under a
// home of its own.
type remoteSide struct {
	h   *homeDir
	bin string
}

func newRemoteSide(t *testing.T) *remoteSide {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "remote-cbth")
	if err := os.Symlink(cbthBin, bin); err != nil {
		t.Fatal(err)
	}
	return &remoteSide{h: newHome(t), bin: bin}
}

// command is the [gateway.remotes] cbth value that runs this side.
func (r *remoteSide) command() string {
	return fmt.Sprintf("CBTH_HOME='%s' '%s'", r.h.root, r.bin)
}

// relayPids are this side's running `gateway serve --stdio`.
func (r *remoteSide) relayPids(t *testing.T) []int {
	t.Helper()
	pids, err := proctest.Find(func(args string) bool { return args == r.bin+" gateway serve --stdio" })
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// remoteTable is one [gateway.remotes.NAME] of the local config.
func remoteTable(name, host string, s *testSSHD, cbth string, extra ...string) string {
	return fmt.Sprintf("[gateway.remotes.%s]\nhost = %q\nssh_options = [\"-F\", %q]\ncbth = %q\n%s\n", name, host, s.config, cbth, strings.Join(extra, "\n"))
}

// sshEnvelope is an ssh_remote envelope line.
func sshEnvelope(stream string, seq int, event string, payload map[string]any, extra map[string]any) []byte {
	if payload == nil {
		payload = map[string]any{}
	}
	m := map[string]any{"channel_type": "ssh_remote", "session_id": "tty-1", "stream_id": stream, "seq": seq,
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano), "correlation_id": "conv-" + stream, "target": "vscode",
		"event_type": event, "workspace_id": "w", "agent_id": "a", "remote_mode": "ide_primary", "payload": payload}
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// gwClient is one long-lived `cbth gateway send` reading envelopes from
// its stdin: a client whose connection outlives the links under it.
type gwClient struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func (h *homeDir) gwClient() *gwClient {
	h.t.Helper()
	cmd := h.cmd("gateway", "send")
	in, err := cmd.StdinPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	c := &gwClient{t: h.t, cmd: cmd, in: in, out: bufio.NewReader(out)}
	h.t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return c
}

func (c *gwClient) write(line []byte) {
	c.t.Helper()
	if _, err := c.in.Write(append(line, '\n')); err != nil {
		c.t.Fatal(err)
	}
}

// answers reads what comes back for one envelope: up to and including
// the gateway's own last word.
func (c *gwClient) answers() []gwEnv {
	c.t.Helper()
	var got []gwEnv
	for {
		line, err := c.out.ReadString('\n')
		if err != nil {
			c.t.Fatalf("gateway send ended: %v (answers so far %+v)", err, got)
		}
		got = append(got, parseGW(c.t, line)...)
		if last(got).Target == "gateway" {
			return got
		}
	}
}

func (c *gwClient) send(line []byte) []gwEnv {
	c.t.Helper()
	c.write(line)
	return c.answers()
}

// recordedSeqs counts, per seq, the envelopes a home recorded on a
// stream with an outcome other than refused or failed.
func (h *homeDir) recordedSeqs(stream string) map[uint64]int {
	h.t.Helper()
	n := map[uint64]int{}
	for _, e := range h.recorded(stream) {
		seq, _ := e.Payload["seq"].(float64)
		if o := e.Payload["outcome"]; o != "refused" && o != "failed" {
			n[uint64(seq)]++
		}
	}
	return n
}

// linkPids are the local ssh processes of this test's links to host
// running cbth there (the ssh command line ends with both).
func (s *testSSHD) linkPids(t *testing.T, host, cbth string) []int {
	t.Helper()
	pids, err := proctest.Find(func(args string) bool {
		return strings.HasPrefix(args, "ssh ") && strings.Contains(args, s.config) && strings.HasSuffix(args, " "+host+" "+cbth+" gateway serve --stdio")
	})
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// noProcessLeft waits until no ssh of this test's links to host running
// cbth is left, every relay of the remote side belongs to a live link,
// and no process names one of also.
func noProcessLeft(t *testing.T, s *testSSHD, r *remoteSide, host, cbth string, also ...string) {
	t.Helper()
	waitFor(t, "no ssh, relay or remote command of the link left", 30*time.Second, func() bool {
		if len(s.linkPids(t, host, cbth)) > 0 || len(r.relayPids(t)) > len(s.sshPids(t)) {
			return false
		}
		for _, a := range also {
			if n, _ := proctest.Count(func(args string) bool { return strings.Contains(args, a) }); n > 0 {
				return false
			}
		}
		return true
	})
}

// A route's ssh_remote envelopes round-trip through a real sshd: a
// message reaches the remote's agent by the remote's own route and its
// answer comes back on the stream; status and error events are recorded
// on both sides, and an ide_primary error downgrades both streams to
// terminal_fallback with its reason code. Neither home keeps the text.
func TestGatewaySSHRemoteRoundTrip(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	r := newRemoteSide(t)
	servedModel(t, r.h)
	r.h.ok(nil, "gateway", "route", "add", "--workspace", "w", "--agent", "a", "--to", "ctx:model/local/chat", "--target", "ctx")
	h := newHome(t)
	h.config(remoteTable("dev", "remote", s, r.command()))
	// A route to a remote no table describes is refused at once.
	if r := h.run("gateway", "route", "add", "--workspace", "w", "--agent", "a", "--to", "ssh:nowhere", "--target", "ssh", "--json"); r.code != 1 ||
		!strings.Contains(r.stdout, `"code":"ENOENT"`) || !strings.Contains(r.stdout, "[gateway.remotes.nowhere]") {
		t.Fatalf("route to an unknown remote: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var rt struct {
		Outcome string `json:"outcome"`
	}
	h.ok(&rt, "gateway", "route", "add", "--workspace", "w", "--agent", "a", "--to", "ssh:dev", "--target", "ssh")
	if rt.Outcome != "added" {
		t.Fatalf("route add: %+v", rt)
	}
	secret := fmt.Sprintf("over-ssh-%d-quokka", time.Now().UnixNano())
	c := h.gwClient()

	got := c.send(sshEnvelope("st-1", 1, "message", map[string]any{"text": secret}, nil))
	var text string
	var prev uint64
	for _, e := range got {
		if e.StreamID != "st-1" || e.ChannelType != "ssh_remote" || e.CorrelationID != "conv-st-1" || e.Seq <= prev {
			t.Fatalf("answer off the stream or out of order: %+v", e)
		}
		prev = e.Seq
		if e.EventType == "message" && e.Payload.Delta {
			text += e.Payload.Text
		}
	}
	a := last(got)
	if text != secret || a.StatusCode != "routed" || a.Payload.AckSeq != 1 || a.ResumeCursor != "1" || a.Payload.RemoteOutcome != "routed" {
		t.Fatalf("the remote agent's answer %q, ack %+v; answers %+v", text, a, got)
	}
	if got[0].Target != "ctx:model/local/chat" {
		t.Fatalf("replies name the remote's destination: %+v", got[0])
	}
	// status: recorded there, routed (forwarded) here.
	if a := last(c.send(sshEnvelope("st-1", 2, "status", nil, nil))); a.StatusCode != "routed" || a.Payload.RemoteOutcome != "recorded" {
		t.Fatalf("status: %+v", a)
	}
	// An ide_primary error downgrades, here and there, with its reason.
	a = last(c.send(sshEnvelope("st-1", 3, "error", map[string]any{"message": "the IDE went away"}, map[string]any{"error_code": "ide_unreachable"})))
	if a.RemoteMode != "terminal_fallback" || a.ReasonCode != "ide_unreachable" {
		t.Fatalf("downgrade: %+v", a)
	}
	for _, side := range []*homeDir{h, r.h} {
		ch := side.events("gateway.mode_changed")
		if len(ch) != 2 || !strings.Contains(ch[1].line, `"to":"terminal_fallback"`) || !strings.Contains(ch[1].line, `"reason_code":"ide_unreachable"`) {
			t.Fatalf("mode changes of %s: %+v", side.root, ch)
		}
	}
	// A dialog message of the key takes the same way.
	got = c.send([]byte(fmt.Sprintf(`{"channel_type":"dialog","session_id":"web","stream_id":"st-2","seq":1,"timestamp":"2026-03-24T12:00:00Z","correlation_id":"conv-2","target":"wechat","event_type":"message","workspace_id":"w","agent_id":"a","payload":{"text":"%s-dialog"}}`, secret)))
	if last(got).StatusCode != "routed" || len(got) < 2 {
		t.Fatalf("dialog over ssh: %+v", got)
	}
	// The remote refuses what its own routes do not take: the refusal
	// comes back with its code and reason, and the seq stays unused here.
	h.ok(nil, "gateway", "route", "add", "--workspace", "w", "--agent", "b", "--to", "ssh:dev", "--target", "ssh")
	a = last(c.send(sshEnvelope("st-3", 1, "message", map[string]any{"text": "for nobody there"}, map[string]any{"agent_id": "b"})))
	if a.EventType != "error" || a.ErrorCode != "ENOENT" || a.ReasonCode != "no_route" || a.Payload.RemoteOutcome != "refused" ||
		a.Payload.Outcome != "failed" || a.ResumeCursor != "0" || !strings.Contains(a.Payload.Message, "the remote gateway answered") {
		t.Fatalf("the remote's refusal: %+v", a)
	}
	// A resend is this gateway's duplicate: the remote does not see it.
	remoteHead := r.h.status().LogHeadSeq
	if a := last(c.send(sshEnvelope("st-1", 1, "message", map[string]any{"text": secret}, nil))); a.StatusCode != "duplicate" {
		t.Fatalf("resend: %+v", a)
	}
	if n := r.h.status().LogHeadSeq; n != remoteHead {
		t.Fatalf("the remote's log moved from %d to %d for a duplicate", remoteHead, n)
	}
	for side, want := range map[*homeDir]map[uint64]int{h: {1: 1, 2: 1, 3: 1}, r.h: {1: 1, 2: 1, 3: 1}} {
		if got := side.recordedSeqs("st-1"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s recorded %v, want %v", side.root, got, want)
		}
	}
	// One link served them all.
	if p := s.sshPids(t); len(p) != 1 {
		t.Fatalf("ssh processes %v, want one link", p)
	}

	// Metadata only, on both sides: the text is in no file of the local
	// home and in none of the remote's but its agent's own session.
	for _, side := range []*homeDir{h, r.h} {
		agentFiles := filepath.Join(side.root, "ctx", "home")
		db := filepath.Join(side.root, "cbth.db")
		filepath.Walk(side.root, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() || p == db || strings.HasPrefix(p, agentFiles+string(filepath.Separator)) || fi.Mode()&os.ModeSocket != 0 {
				return nil
			}
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s holds the payload", p)
			}
			return nil
		})
		for _, l := range strings.Split(side.run("events", "export").stdout, "\n") {
			var e logged
			if strings.Contains(l, secret) && (json.Unmarshal([]byte(l), &e) != nil || e.Stream.Kind != "ctxsession") {
				t.Errorf("an event of %s not of the agent's session holds the payload: %s", side.root, l)
			}
		}
	}
	if grepDir(t, filepath.Join(r.h.root, "ctx", "home"), secret) == 0 {
		t.Fatal("the remote agent's session does not hold the message: was it routed?")
	}
	// The conversation is traceable on both sides by its correlation id.
	for _, side := range []*homeDir{h, r.h} {
		if out := side.run("events", "export", "--correlation-id", "conv-st-1").stdout; strings.Count(out, "gateway.envelope_recorded") != 3 {
			t.Fatalf("%s: export --correlation-id:\n%s", side.root, out)
		}
	}

	// The local daemon's stop ends its links, and with them the remote
	// relays.
	c.in.Close()
	c.cmd.Wait()
	h.run("daemon", "stop")
	noProcessLeft(t, s, r, "remote", r.command())
	if p := r.relayPids(t); len(p) > 0 {
		t.Fatalf("relays left: %v", p)
	}
}

// fakeAgent serves a CortexFS agent socket (spec/cortexfs.md, "Model
// socket") for a test: each turn answers "echo: INPUT", except that a
// turn whose input is held waits until the test lets it go. It tells
// the test of each turn as it arrives and keeps the message ids.
type fakeAgent struct {
	mu      sync.Mutex
	ids     []string
	inputs  []string
	hold    map[string]chan struct{}
	arrived chan string
}

func serveFakeAgent(t *testing.T, sock string) *fakeAgent {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	a := &fakeAgent{hold: map[string]chan struct{}{}, arrived: make(chan string, 100)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go a.turn(c)
		}
	}()
	return a
}

func (a *fakeAgent) turn(c net.Conn) {
	defer c.Close()
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return
	}
	var req struct{ Op, ID, Session, Input string }
	if json.Unmarshal(line, &req) != nil || req.Op != "send" {
		return
	}
	a.mu.Lock()
	a.ids, a.inputs = append(a.ids, req.ID), append(a.inputs, req.Input)
	held := a.hold[req.Input]
	delete(a.hold, req.Input) // held once: the turn sent again answers at once
	a.mu.Unlock()
	a.arrived <- req.Input
	if held != nil {
		<-held
	}
	for _, f := range []string{`{"type":"start","run":"r-` + req.ID + `"}`, `{"type":"message","text":"echo: ` + req.Input + `"}`, `{"type":"done","status":"ok"}`} {
		if _, err := c.Write([]byte(f + "\n")); err != nil {
			return
		}
	}
}

// holdNext makes the next turn of input wait for release.
func (a *fakeAgent) holdNext(input string) (release func()) {
	ch := make(chan struct{})
	a.mu.Lock()
	a.hold[input] = ch
	a.mu.Unlock()
	return func() { close(ch) }
}

// waitTurn waits for a turn of input (the turns before it pass).
func (a *fakeAgent) waitTurn(t *testing.T, input string) {
	t.Helper()
	for {
		select {
		case got := <-a.arrived:
			if got == input {
				return
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("the agent never got %q", input)
		}
	}
}

// The link killed under a stream, three ways, and resumed: nothing lost
// and nothing twice at the receiver. Between envelopes, the dead link is
// replaced. While the remote's agent works on an envelope, the relay
// goes with the link and the remote gateway cannot record it: the next
// link's resume request finds it missing and it is sent again (its
// message id the same, so a real agent socket replays the run). After
// the remote recorded one but before its acknowledgement came back (the
// local ssh frozen, then killed), the resume request finds it there and
// it is not sent again.
func TestGatewaySSHRemoteResumesAfterTheLinkDrops(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	r := newRemoteSide(t)
	agent := serveFakeAgent(t, filepath.Join(r.h.root, "ctx", "agent", "fake.sock"))
	r.h.ok(nil, "gateway", "route", "add", "--workspace", "w", "--agent", "a", "--to", "ctx:agent/fake", "--target", "ctx")
	h := newHome(t)
	h.config(remoteTable("dev", "remote", s, r.command()))
	h.ok(nil, "gateway", "route", "add", "--workspace", "w", "--agent", "a", "--to", "ssh:dev", "--target", "ssh")
	c := h.gwClient()
	msg := func(seq int) []byte {
		return sshEnvelope("st-r", seq, "message", map[string]any{"text": fmt.Sprintf("m%d", seq)}, nil)
	}
	oneSSH := func() int {
		t.Helper()
		p := s.sshPids(t)
		if len(p) != 1 {
			t.Fatalf("ssh processes %v, want one", p)
		}
		return p[0]
	}
	acks := map[uint64]int{}
	check := func(seq int, got []gwEnv, remoteOutcome string) {
		t.Helper()
		a := last(got)
		if a.StatusCode != "routed" || a.Payload.AckSeq != uint64(seq) || a.Payload.RemoteOutcome != remoteOutcome {
			t.Fatalf("seq %d: ack %+v, want routed with remote outcome %s (answers %+v)", seq, a, remoteOutcome, got)
		}
		acks[a.Payload.AckSeq]++
		if remoteOutcome == "routed" && !strings.Contains(fmt.Sprint(got), fmt.Sprintf("echo: m%d", seq)) {
			t.Fatalf("seq %d: no answer of the agent in %+v", seq, got)
		}
	}
	for seq := 1; seq <= 3; seq++ {
		check(seq, c.send(msg(seq)), "routed")
	}

	// 1. Killed between envelopes.
	first := oneSSH()
	syscall.Kill(first, syscall.SIGKILL)
	waitFor(t, "the killed link's ssh and relay to end", 30*time.Second, func() bool { return len(s.sshPids(t)) == 0 && len(r.relayPids(t)) == 0 })
	check(4, c.send(msg(4)), "routed")

	// 2. Killed while the remote's agent works on seq 5.
	release := agent.holdNext("m5")
	c.write(msg(5))
	agent.waitTurn(t, "m5")
	relays := r.relayPids(t)
	if len(relays) != 1 {
		t.Fatalf("relays %v", relays)
	}
	syscall.Kill(oneSSH(), syscall.SIGKILL)
	waitFor(t, "the relay of the killed link to end", 30*time.Second, func() bool {
		return !containsPid(r.relayPids(t), relays[0])
	})
	release()
	agent.waitTurn(t, "m5") // sent again on the next link
	check(5, c.answers(), "routed")

	// 3. The remote recorded seq 6, its acknowledgement lost with the
	// link.
	release = agent.holdNext("m6")
	c.write(msg(6))
	agent.waitTurn(t, "m6")
	frozen := oneSSH()
	syscall.Kill(frozen, syscall.SIGSTOP)
	release()
	waitFor(t, "the remote to record seq 6", 30*time.Second, func() bool { return r.h.recordedSeqs("st-r")[6] == 1 })
	syscall.Kill(frozen, syscall.SIGKILL)
	check(6, c.answers(), "duplicate")

	for seq := 7; seq <= 8; seq++ {
		check(seq, c.send(msg(seq)), "routed")
	}

	want := map[uint64]int{1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1, 8: 1}
	if fmt.Sprint(acks) != fmt.Sprint(want) {
		t.Fatalf("acknowledgements %v", acks)
	}
	for _, side := range []*homeDir{h, r.h} {
		if got := side.recordedSeqs("st-r"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s recorded %v, want each seq once", side.root, got)
		}
		if gaps := side.events("gateway.gap_reported"); len(gaps) != 0 {
			t.Fatalf("%s: gaps %+v", side.root, gaps)
		}
	}
	// The agent had every turn once, but seq 5's twice under one
	// message id: the socket protocol's key for running it once.
	agent.mu.Lock()
	ids, inputs := agent.ids, agent.inputs
	agent.mu.Unlock()
	seen := map[string]int{}
	byInput := map[string]string{}
	for i, in := range inputs {
		seen[in]++
		if prev, ok := byInput[in]; ok && prev != ids[i] {
			t.Fatalf("%s sent again under another message id: %s, %s", in, prev, ids[i])
		}
		byInput[in] = ids[i]
	}
	if fmt.Sprint(seen) != "map[m1:1 m2:1 m3:1 m4:1 m5:2 m6:1 m7:1 m8:1]" {
		t.Fatalf("turns %v", seen)
	}
	b, _ := os.ReadFile(filepath.Join(h.root, "log", "daemon.log"))
	for _, want := range []string{"sending again what the dropped link carried", "the remote had the envelope the dropped link carried"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("daemon.log does not say %q", want)
		}
	}
	c.in.Close()
	c.cmd.Wait()
	h.run("daemon", "stop")
	noProcessLeft(t, s, r, "remote", r.command())
	if p := r.relayPids(t); len(p) > 0 {
		t.Fatalf("relays left: %v", p)
	}
}

func containsPid(pids []int, pid int) bool {
	for _, p := range pids {
		if p == pid {
			return true
		}
	}
	return false
}

// Each fault of an ssh route gets its stable error code and reason,
// loses nothing (the envelope's seq stays unused: sent again once the
// route works, it is routed, and the remote has it once) and leaves no
// process behind: a host that refuses, an unknown host key, no ssh
// client, a remote without cbth, a remote of another protocol version, a
// stalled ssh (frozen: it reads nothing), an envelope over the frame
// limit.
func TestGatewaySSHRemoteFaults(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	r := newRemoteSide(t)
	r.h.ok(nil, "daemon", "status")
	// A remote cbth of a later protocol: it says hello in version 99,
	// then reads until the link closes.
	other := filepath.Join(t.TempDir(), "cbth-v99")
	if err := execfile.Put(other, []byte("#!/bin/sh\nprintf '%s\\n' 'hello {\"protocol\":\"cbth-gateway-stdio\",\"version\":99,\"max_frame\":4194304,\"cbth\":\"9.9.9\"}'\ncat >/dev/null\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A cbth from before `gateway serve`, and a remote whose login
	// prints a greeting where the protocol is due.
	old := filepath.Join(t.TempDir(), "cbth-old")
	if err := execfile.Put(old, []byte("#!/bin/sh\necho 'cbth: error: unexpected argument serve' >&2\nexit 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	chatty := filepath.Join(t.TempDir(), "cbth-chatty")
	if err := execfile.Put(chatty, []byte("#!/bin/sh\necho 'Welcome to the build box'\ncat >/dev/null\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := newHome(t)
	h.config(remoteTable("dev", "remote", s, r.command()) +
		remoteTable("old", "remote", s, old) +
		remoteTable("chatty", "remote", s, chatty) +
		remoteTable("refused", "closed", s, r.command()) +
		remoteTable("stranger", "stranger", s, r.command()) +
		remoteTable("nossh", "never-reached", s, r.command(), `ssh = "cbth-test-no-such-ssh"`) +
		remoteTable("nocbth", "remote", s, "/nonexistent/cbth") +
		remoteTable("v99", "remote", s, other) +
		remoteTable("stall", "stall", s, r.command(), `stall_timeout = "1s"`) +
		remoteTable("silent", "silent", s, r.command(), `connect_timeout = "1s"`) +
		remoteTable("nokey", "nokey", s, r.command()))
	route := func(t *testing.T, to string) {
		t.Helper()
		h.ok(nil, "gateway", "route", "add", "--workspace", "w", "--agent", "a", "--to", "ssh:"+to, "--target", "ssh")
	}
	send := func(t *testing.T, code int, line []byte) gwEnv {
		t.Helper()
		cmd := h.cmd("gateway", "send")
		cmd.Stdin = bytes.NewReader(append(line, '\n'))
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		got := 0
		if ee, ok := err.(*exec.ExitError); ok {
			got = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if got != code {
			t.Fatalf("gateway send: exit %d, want %d\n%s%s", got, code, out.String(), errb.String())
		}
		return last(parseGW(t, out.String()))
	}
	// recovers: the same envelope, once the route works, is routed and
	// recorded once on each side.
	recovers := func(t *testing.T, stream string, seq int, line []byte) {
		t.Helper()
		route(t, "dev")
		if a := send(t, 0, line); a.StatusCode != "routed" || a.Payload.AckSeq != uint64(seq) {
			t.Fatalf("%s seq %d sent again: %+v", stream, seq, a)
		}
		for _, side := range []*homeDir{h, r.h} {
			if n := side.recordedSeqs(stream)[uint64(seq)]; n != 1 {
				t.Fatalf("%s: %s seq %d recorded %d times", side.root, stream, seq, n)
			}
		}
	}

	for _, c := range []struct {
		remote, host, cbth, code, reason, says string
		exit                                   int
	}{
		{"refused", "closed", r.command(), "EHOSTDOWN", "ssh_connect", "Connection refused", 69},
		{"silent", "silent", r.command(), "EHOSTDOWN", "connect_timeout", "within connect_timeout 1s", 69},
		{"stranger", "stranger", r.command(), "EACCES", "host_key", "Host key verification failed", 13},
		{"nokey", "nokey", r.command(), "EACCES", "ssh_auth", "Permission denied", 13},
		{"nossh", "never-reached", r.command(), "ENOENT", "ssh_not_found", `cannot run the ssh client "cbth-test-no-such-ssh"`, 1},
		{"nocbth", "remote", "/nonexistent/cbth", "ENOENT", "remote_cbth_missing", `the remote shell found no "/nonexistent/cbth"`, 1},
		{"v99", "remote", other, "EVERSION", "protocol_version", "speaks cbth-gateway-stdio version 99, this one version 1", 69},
		{"old", "remote", old, "ENOTSUP", "remote_serve", "unexpected argument serve", 69},
		{"chatty", "remote", chatty, "ENOTSUP", "remote_protocol", "Welcome to the build box", 69},
	} {
		t.Run(c.remote, func(t *testing.T) {
			route(t, c.remote)
			stream := "st-" + c.remote
			line := sshEnvelope(stream, 1, "status", nil, nil)
			a := send(t, c.exit, line)
			if a.EventType != "error" || a.ErrorCode != c.code || a.ReasonCode != c.reason || a.Payload.Outcome != "failed" || !strings.Contains(a.Payload.Message, c.says) {
				t.Fatalf("answer %+v, want %s/%s saying %q", a, c.code, c.reason, c.says)
			}
			if a.ResumeCursor != "0" {
				t.Fatalf("the cursor moved past a failed envelope: %+v", a)
			}
			noProcessLeft(t, s, r, c.host, c.cbth, other, chatty)
			recovers(t, stream, 1, line)
		})
	}

	t.Run("stalled", func(t *testing.T) {
		// Frozen, ssh reads nothing: a large envelope fills the pipe
		// and the write waits; a small one waits for an answer and no
		// heartbeat comes. Each gives up after stall_timeout.
		seq := 0
		for i, payload := range []map[string]any{{"text": strings.Repeat("x", 900<<10)}, nil} {
			route(t, "stall")
			seq++
			if a := send(t, 0, sshEnvelope("st-stall", seq, "status", nil, nil)); a.StatusCode != "routed" {
				t.Fatalf("before the stall: %+v", a)
			}
			pid := s.linkPids(t, "stall", r.command())
			if len(pid) != 1 {
				t.Fatalf("ssh processes %v", pid)
			}
			syscall.Kill(pid[0], syscall.SIGSTOP)
			seq++
			line := sshEnvelope("st-stall", seq, "status", payload, nil)
			a := send(t, 1, line)
			if a.ErrorCode != "ETIMEDOUT" || a.ReasonCode != "stalled" || a.Payload.Outcome != "failed" {
				t.Fatalf("stall %d: %+v", i, a)
			}
			noProcessLeft(t, s, r, "stall", r.command())
			recovers(t, "st-stall", seq, line)
		}
	})

	// The table taken away after the route was made, and a config.toml
	// that does not load: the envelope fails with the reason, and goes
	// once the file is right again.
	t.Run("config", func(t *testing.T) {
		good, err := os.ReadFile(filepath.Join(h.root, "config.toml"))
		if err != nil {
			t.Fatal(err)
		}
		h.config(string(good) + remoteTable("gone", "remote", s, r.command()))
		route(t, "gone")
		for i, c := range []struct {
			file, code, reason, says string
			exit                     int
		}{
			{string(good), "ENOENT", "no_remote", "no [gateway.remotes.gone]", 1},
			{string(good) + "\n[gateway.remotes.gone]\nhots = \"typo\"\n", "EINVAL", "config", "hots", 2},
		} {
			h.config(c.file)
			line := sshEnvelope("st-config", 1, "status", nil, nil)
			a := send(t, c.exit, line)
			if a.ErrorCode != c.code || a.ReasonCode != c.reason || !strings.Contains(a.Payload.Message, c.says) {
				t.Fatalf("case %d: %+v, want %s/%s saying %q", i, a, c.code, c.reason, c.says)
			}
		}
		h.config(string(good))
		recovers(t, "st-config", 1, sshEnvelope("st-config", 1, "status", nil, nil))
	})

	t.Run("frame_limit", func(t *testing.T) {
		route(t, "dev")
		if a := send(t, 0, sshEnvelope("st-big", 1, "status", nil, nil)); a.StatusCode != "routed" {
			t.Fatalf("before: %+v", a)
		}
		link := s.sshPids(t)
		head := r.h.status().LogHeadSeq
		big := sshEnvelope("st-big", 2, "status", map[string]any{"text": strings.Repeat("y", 1<<20)}, nil)
		if a := send(t, 2, big); a.ErrorCode != "EMSGSIZE" || a.ReasonCode != "frame_size" {
			t.Fatalf("over the limit: %+v", a)
		}
		if now := r.h.status().LogHeadSeq; now != head {
			t.Fatalf("the remote's log moved from %d to %d", head, now)
		}
		// The largest envelope the limit allows goes through, on the
		// same link.
		at := map[string]any{"timestamp": "2026-03-24T12:00:00Z"}
		fill := sshEnvelope("st-big", 2, "status", map[string]any{"text": ""}, at)
		max := sshEnvelope("st-big", 2, "status", map[string]any{"text": strings.Repeat("z", 1<<20-len(fill))}, at)
		if len(max) != 1<<20 {
			t.Fatalf("the largest envelope is %d bytes", len(max))
		}
		if a := send(t, 0, max); a.StatusCode != "routed" || a.Payload.RemoteOutcome != "recorded" {
			t.Fatalf("the largest envelope: %+v", a)
		}
		if now := s.sshPids(t); fmt.Sprint(now) != fmt.Sprint(link) {
			t.Fatalf("the link changed from %v to %v", link, now)
		}
	})

	h.run("daemon", "stop")
	noProcessLeft(t, s, r, "remote", r.command(), other)
	if p := r.relayPids(t); len(p) > 0 {
		t.Fatalf("relays left: %v", p)
	}
}

// serveStdio runs `cbth gateway serve --stdio` in a home, as sshd would.
type serveStdio struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func (h *homeDir) serveStdio() *serveStdio {
	h.t.Helper()
	cmd := h.cmd("gateway", "serve", "--stdio")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return &serveStdio{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 8<<20)}
}

// frame reads the next frame that is not a heartbeat.
func (s *serveStdio) frame(t *testing.T) (kind, body string) {
	t.Helper()
	for {
		line, err := s.out.ReadString('\n')
		if err != nil {
			t.Fatalf("serve --stdio ended: %v", err)
		}
		kind, body, _ = strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		if kind != "ping" {
			return kind, body
		}
	}
}

func (s *serveStdio) write(t *testing.T, frame string) {
	t.Helper()
	if _, err := io.WriteString(s.in, frame+"\n"); err != nil {
		t.Fatal(err)
	}
}

// The remote end on its own: its hello, an envelope into its gateway and
// the answer back, a frame over the link's limit and an envelope over
// the gateway's refused with EMSGSIZE (and the link going on), a local
// end of another version or no hello at all refused with a code.
func TestGatewayServeStdio(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	s := h.serveStdio()
	kind, body := s.frame(t)
	var hello struct {
		Protocol string `json:"protocol"`
		Version  int    `json:"version"`
		MaxFrame int    `json:"max_frame"`
	}
	if kind != "hello" || json.Unmarshal([]byte(body), &hello) != nil || hello.Protocol != "cbth-gateway-stdio" || hello.Version != 1 || hello.MaxFrame != 4<<20 {
		t.Fatalf("hello: %s %s", kind, body)
	}
	s.write(t, `hello {"protocol":"cbth-gateway-stdio","version":1,"max_frame":4194304,"heartbeat_ms":50}`)
	answer := func() gwEnv {
		t.Helper()
		kind, body := s.frame(t)
		if kind != "env" {
			t.Fatalf("frame %s %s", kind, body)
		}
		return last(parseGW(t, body))
	}
	s.write(t, "env "+string(sshEnvelope("st-s", 1, "status", nil, nil)))
	if a := answer(); a.Target != "gateway" || a.StatusCode != "recorded" || a.Payload.AckSeq != 1 {
		t.Fatalf("ack: %+v", a)
	}
	// Heartbeats come while the link is open.
	if line, err := s.out.ReadString('\n'); err != nil || line != "ping {}\n" {
		t.Fatalf("heartbeat: %q %v", line, err)
	}
	head := h.status().LogHeadSeq
	s.write(t, "env "+strings.Repeat("x", 5<<20))
	if a := answer(); a.ErrorCode != "EMSGSIZE" || a.ReasonCode != "frame_size" || a.Target != "gateway" {
		t.Fatalf("over the link's limit: %+v", a)
	}
	s.write(t, "env "+string(sshEnvelope("st-s", 2, "status", map[string]any{"text": strings.Repeat("x", 2<<20)}, nil)))
	if a := answer(); a.ErrorCode != "EMSGSIZE" || a.ReasonCode != "frame_size" {
		t.Fatalf("over the gateway's limit: %+v", a)
	}
	if now := h.status().LogHeadSeq; now != head {
		t.Fatalf("the log moved from %d to %d", head, now)
	}
	s.write(t, "env "+string(sshEnvelope("st-s", 2, "status", nil, nil)))
	if a := answer(); a.StatusCode != "recorded" || a.Payload.AckSeq != 2 {
		t.Fatalf("after the refusals: %+v", a)
	}
	s.in.Close()
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("serve --stdio after its stdin closed: %v", err)
	}

	for _, c := range []struct {
		hello, code string
		exit        int
	}{
		{`hello {"protocol":"cbth-gateway-stdio","version":2}`, "EVERSION", 69},
		{`{"channel_type":"dialog"}`, "EINVAL", 2},
	} {
		s := h.serveStdio()
		if kind, _ := s.frame(t); kind != "hello" {
			t.Fatalf("no hello: %s", kind)
		}
		s.write(t, c.hello)
		kind, body := s.frame(t)
		var f struct{ Code, Reason, Message string }
		if kind != "err" || json.Unmarshal([]byte(body), &f) != nil || f.Code != c.code {
			t.Fatalf("%s: answered %s %s, want an err frame %s", c.hello, kind, body, c.code)
		}
		err := s.cmd.Wait()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != c.exit {
			t.Fatalf("%s: exit %v, want %d", c.hello, err, c.exit)
		}
	}
}

// BenchmarkGatewaySSHRoundTrip measures one ssh_remote envelope's round
// trip through an ssh route: written to the local gateway socket,
// recorded there and forwarded over the open ssh link to the remote's
// gateway, recorded there (both logs fsync), and its acknowledgement
// back. The floor, interleaved in the same run: the same bytes through a
// bare `ssh HOST cat` session to the same sshd, one line out and back.
// Reported: the p50 of each and their ratio.
func BenchmarkGatewaySSHRoundTrip(b *testing.B) {
	s := startSSHD(b)
	dir := b.TempDir()
	local, rem := filepath.Join(dir, "local"), filepath.Join(dir, "remote")
	runL := timed(b, append(os.Environ(), "CBTH_HOME="+local))
	runR := timed(b, append(os.Environ(), "CBTH_HOME="+rem))
	if err := os.MkdirAll(local, 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(local, "config.toml"), []byte(remoteTable("dev", "remote", s, fmt.Sprintf("CBTH_HOME='%s' '%s'", rem, cbthBin))), 0o600); err != nil {
		b.Fatal(err)
	}
	runR(cbthBin, "daemon", "status")
	defer runR(cbthBin, "daemon", "stop")
	runL(cbthBin, "gateway", "route", "add", "--workspace", "w", "--agent", "a", "--to", "ssh:dev", "--target", "ssh")
	defer runL(cbthBin, "daemon", "stop")
	gc, err := net.Dial("unix", filepath.Join(local, "run", "gateway.sock"))
	if err != nil {
		b.Fatal(err)
	}
	defer gc.Close()
	gr := bufio.NewReader(gc)
	echo := exec.Command("ssh", "-F", s.config, "-T", "-x", "-a", "-o", "BatchMode=yes", "remote", "cat")
	ein, _ := echo.StdinPipe()
	eout, _ := echo.StdoutPipe()
	if err := echo.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { ein.Close(); echo.Wait() }()
	er := bufio.NewReader(eout)
	rc, err := net.Dial("unix", filepath.Join(rem, "run", "gateway.sock"))
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	rr := bufio.NewReader(rc)
	roundTrip := func(c net.Conn, r *bufio.Reader, line []byte, want string) time.Duration {
		t0 := time.Now()
		if _, err := c.Write(append(line, '\n')); err != nil {
			b.Fatal(err)
		}
		for {
			l, err := r.ReadBytes('\n')
			if err != nil {
				b.Fatal(err)
			}
			var a gwEnv
			if json.Unmarshal(l, &a) != nil || a.Target != "gateway" {
				continue
			}
			if a.StatusCode != want {
				b.Fatalf("answer %s", l)
			}
			return time.Since(t0)
		}
	}
	viaGateway := func(line []byte) time.Duration { return roundTrip(gc, gr, line, "routed") }
	viaCat := func(line []byte) time.Duration {
		t0 := time.Now()
		if _, err := ein.Write(append(line, '\n')); err != nil {
			b.Fatal(err)
		}
		if l, err := er.ReadBytes('\n'); err != nil || len(l) != len(line)+1 {
			b.Fatalf("echo: %d bytes, %v", len(l), err)
		}
		return time.Since(t0)
	}
	// The link and the session are up before the clock runs.
	viaGateway(sshEnvelope("bench", 1, "status", nil, nil))
	viaCat(sshEnvelope("bench", 1, "status", nil, nil))
	// Where the time goes, in the same run: the same envelope recorded
	// by the local gateway alone (a key with no route) and sent to the
	// remote's gateway socket straight.
	other := func(line []byte) []byte {
		return bytes.Replace(bytes.Replace(line, []byte(`"workspace_id":"w"`), []byte(`"workspace_id":"nowhere"`), 1), []byte(`"bench"`), []byte(`"bench-alone"`), 1)
	}
	var gw, cat, localOnly, remoteOnly []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		line := sshEnvelope("bench", i+2, "status", nil, nil)
		gw = append(gw, viaGateway(line))
		cat = append(cat, viaCat(line))
		localOnly = append(localOnly, roundTrip(gc, gr, other(line), "recorded"))
		remoteOnly = append(remoteOnly, roundTrip(rc, rr, other(line), "recorded"))
	}
	b.StopTimer()
	g, c := median(gw), median(cat)
	b.ReportMetric(float64(g.Microseconds())/1000, "gateway_p50_ms")
	b.ReportMetric(float64(c.Microseconds())/1000, "ssh_cat_p50_ms")
	b.ReportMetric(float64(g)/float64(c), "x_ssh_cat")
	b.ReportMetric(float64(median(localOnly).Microseconds())/1000, "local_record_p50_ms")
	b.ReportMetric(float64(median(remoteOnly).Microseconds())/1000, "remote_record_p50_ms")
}
