// Command fakecodex stands in for the codex executable where a test needs
// an app-server the real one cannot be made into: one that lacks a method
// or a notification, reports another version, or ignores SIGTERM. It
// answers the way Codex 0.169 does (an unknown method is -32600 "unknown
// variant"), and only as far as cbth's probe and supervisor ask.
//
//	codex --version
//	codex app-server generate-json-schema [--experimental] --out DIR
//	codex app-server --listen unix://PATH
//	codex --remote unix://PATH [ARGS...]   (a foreground: connects, initializes,
//	                                      resumes the thread after "resume",
//	                                      exits FAKECODEX_EXIT, default 0)
//
// Environment:
//
//	FAKECODEX_VERSION      the version it claims (default 0.169.0)
//	FAKECODEX_DROP         comma-separated methods, notifications and
//	                       "status:<turn status>" it lacks
//	FAKECODEX_DROP_SCHEMA  the same, for the schema only (the server still
//	                       serves them)
//	FAKECODEX_DROP_SERVER  the same, for the server only (the schema still
//	                       lists them)
//	FAKECODEX_IGNORE_TERM  ignore SIGTERM
//	FAKECODEX_CHILD        start a child (sleep) in its process group
//	FAKECODEX_HOLD         a foreground stays until SIGTERM or SIGINT
//
// thread/resume answers for any thread but the nil UUID (which the probe
// uses) with an idle thread in the current directory, approval policy
// "never" and a read-only sandbox without network.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/coder/websocket"
)

var (
	methods = []string{"initialize", "thread/start", "thread/resume", "thread/read", "thread/turns/list",
		"thread/loaded/list", "turn/start", "turn/steer", "turn/interrupt"}
	notifications = []string{"error", "thread/started", "thread/status/changed", "thread/closed",
		"turn/started", "turn/completed", "item/started", "item/completed"}
	statuses = []string{"completed", "interrupted", "failed", "inProgress"}
)

func main() {
	args := os.Args[1:]
	switch {
	case len(args) == 1 && args[0] == "--version":
		fmt.Printf("codex-cli %s\n", version())
	case len(args) >= 3 && args[0] == "app-server" && args[1] == "generate-json-schema":
		out := ""
		for i, a := range args {
			if a == "--out" && i+1 < len(args) {
				out = args[i+1]
			}
		}
		if err := schema(out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case len(args) >= 3 && args[0] == "app-server" && args[1] == "--listen" && strings.HasPrefix(args[2], "unix://"):
		if err := serve(strings.TrimPrefix(args[2], "unix://")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case len(args) >= 2 && args[0] == "--remote" && strings.HasPrefix(args[1], "unix://"):
		if err := foreground(strings.TrimPrefix(args[1], "unix://"), args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "fakecodex:", err)
			os.Exit(1)
		}
		code, _ := strconv.Atoi(os.Getenv("FAKECODEX_EXIT"))
		os.Exit(code)
	default:
		fmt.Fprintf(os.Stderr, "fakecodex: unsupported arguments %q\n", args)
		os.Exit(2)
	}
}

// foreground stands in for the TUI on the shared app-server: it proves the
// socket serves, and resumes the thread a bound run names.
func foreground(sock string, args []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t, _, err := appserver.DialUnix(ctx, sock)
	if err != nil {
		return err
	}
	c := appserver.New(t, appserver.Options{})
	defer c.Close()
	if _, err := c.Initialize(ctx, appserver.ClientInfo{Name: "fakecodex-tui", Version: version()}, appserver.Capabilities{}); err != nil {
		return err
	}
	for i, a := range args {
		if a == "resume" && i+1 < len(args) {
			if _, err := c.ThreadResume(ctx, appserver.ThreadResumeParams{ThreadID: args[i+1]}); err != nil {
				return err
			}
		}
	}
	if os.Getenv("FAKECODEX_HOLD") != "" {
		fmt.Println("fakecodex: holding")
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		<-sigs
	}
	return nil
}

func version() string {
	if v := os.Getenv("FAKECODEX_VERSION"); v != "" {
		return v
	}
	return "0.169.0"
}

// keep returns names without those dropped by FAKECODEX_DROP or by the
// variable named where.
func keep(names []string, prefix, where string) []string {
	drop := strings.Split(os.Getenv("FAKECODEX_DROP")+","+os.Getenv(where), ",")
	var out []string
	for _, n := range names {
		if !slices.Contains(drop, prefix+n) {
			out = append(out, n)
		}
	}
	return out
}

// schema writes the two files of the bundle cbth reads, in Codex's layout:
// a oneOf of variants whose method is a one-value enum, and the TurnStatus
// enum among the definitions.
func schema(dir string) error {
	if dir == "" {
		return fmt.Errorf("--out is required")
	}
	variants := func(names []string) []any {
		var v []any
		for _, n := range names {
			v = append(v, map[string]any{"properties": map[string]any{"method": map[string]any{"enum": []string{n}, "type": "string"}}})
		}
		return v
	}
	files := map[string]any{
		"ClientRequest.json": map[string]any{"oneOf": variants(keep(methods, "", "FAKECODEX_DROP_SCHEMA"))},
		"ServerNotification.json": map[string]any{"oneOf": variants(keep(notifications, "", "FAKECODEX_DROP_SCHEMA")),
			"definitions": map[string]any{"TurnStatus": map[string]any{"enum": keep(statuses, "status:", "FAKECODEX_DROP_SCHEMA"), "type": "string"}}},
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, v := range files {
		b, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func serve(path string) error {
	if os.Getenv("FAKECODEX_CHILD") != "" {
		if err := exec.Command("sleep", "300").Start(); err != nil {
			return err
		}
	}
	os.Remove(path)
	// As Codex makes it: a path too long for a socket is a symlink to one
	// in an owner-only directory of the temp dir; the socket owner-only.
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	sock := path
	if len(path) > 100 {
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("fakecodex-daemon-%d", os.Getuid()))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		sum := sha256.Sum256([]byte(path))
		sock = filepath.Join(dir, hex.EncodeToString(sum[:8]))
		os.Remove(sock)
		if err := os.Symlink(sock, path); err != nil {
			return err
		}
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 1)
	if os.Getenv("FAKECODEX_IGNORE_TERM") != "" {
		signal.Ignore(syscall.SIGTERM)
	} else {
		signal.Notify(sigs, syscall.SIGTERM)
	}
	srv := &http.Server{Handler: http.HandlerFunc(handle)}
	go func() {
		<-sigs
		ln.Close()
	}()
	err = srv.Serve(ln)
	os.Remove(path)
	if err == http.ErrServerClosed || strings.Contains(fmt.Sprint(err), "use of closed") {
		return nil
	}
	return err
}

func handle(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := context.Background()
	serving := keep(methods, "", "FAKECODEX_DROP_SERVER")
	for {
		_, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ClientInfo struct{ Name string } `json:"clientInfo"`
				ThreadID   string                `json:"threadId"`
			} `json:"params"`
		}
		if json.Unmarshal(msg, &req) != nil || req.ID == nil {
			continue // notifications (initialized) need no answer
		}
		var reply map[string]any
		switch {
		case !slices.Contains(serving, req.Method):
			reply = fail(-32600, fmt.Sprintf("Invalid request: unknown variant `%s`, expected one of `%s`", req.Method, strings.Join(serving, "`, `")))
		case req.Method == "initialize":
			reply = map[string]any{"result": map[string]any{
				"userAgent":      fmt.Sprintf("%s/%s (fake; x86_64) fakecodex", req.Params.ClientInfo.Name, version()),
				"codexHome":      os.Getenv("CODEX_HOME"),
				"platformFamily": "unix", "platformOs": "linux"}}
		case req.Method == "thread/loaded/list":
			reply = map[string]any{"result": map[string]any{"data": []string{}, "nextCursor": nil}}
		case req.Method == "thread/resume" && req.Params.ThreadID == "00000000-0000-0000-0000-000000000000":
			reply = fail(-32600, "no rollout found for thread id")
		case req.Method == "thread/resume":
			cwd, _ := os.Getwd()
			reply = map[string]any{"result": map[string]any{
				"thread": map[string]any{"id": req.Params.ThreadID, "sessionId": req.Params.ThreadID, "ephemeral": false,
					"status": map[string]any{"type": "idle"}, "threadSource": "user", "cwd": cwd, "turns": []any{}},
				"model": "fake", "modelProvider": "fake", "cwd": cwd, "approvalPolicy": "never", "approvalsReviewer": "user",
				"sandbox": map[string]any{"type": "readOnly", "networkAccess": false}, "activePermissionProfile": nil}}
		default:
			reply = fail(-32600, "thread not found")
		}
		reply["id"] = req.ID
		b, _ := json.Marshal(reply)
		if c.Write(ctx, websocket.MessageText, b) != nil {
			return
		}
	}
}

func fail(code int, msg string) map[string]any {
	return map[string]any{"error": map[string]any{"code": code, "message": msg}}
}
