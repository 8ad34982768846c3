// Package probe proves that a Codex app-server offers everything cbth's
// delivery into CLI threads needs, before any delivery is attempted. What
// it cannot prove counts as missing: the result is ENOTSUP, and the caller
// turns auto-continuation off (spec/codex-cli.md, "Capability probe").
//
// Methods are proven twice: the app-server's own schema lists them, and
// the running server dispatches them (a call on a thread that cannot exist
// is refused by the method, not as an unknown one). Notifications and turn
// statuses cannot be called, and provoking them would take a real turn,
// which costs the user's model and may run tools; they are proven by the
// schema the same executable generates, checked to be the version that
// answers on the socket.
package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/internal/errs"
)

// What delivery needs. Turn lookup (after a missed completion) takes the
// first of lookupMethods the server has.
var (
	requiredMethods       = []string{appserver.MethodThreadResume, appserver.MethodTurnStart}
	lookupMethods         = []string{appserver.MethodThreadTurnsList, appserver.MethodThreadRead}
	requiredNotifications = []string{appserver.NoteThreadStarted, appserver.NoteThreadStatusChanged, appserver.NoteTurnStarted, appserver.NoteTurnCompleted}
	// A turn's end is one of these; a status outside them (a later Codex's
	// "replaced", say) is treated as a negative end by delivery.
	requiredStatuses = []string{appserver.TurnCompleted, appserver.TurnFailed, appserver.TurnInterrupted}
)

// nilThread is a thread id no Codex generates (its ids are UUIDv7), so a
// call naming it reaches the method and fails there without side effects.
const nilThread = "00000000-0000-0000-0000-000000000000"

// Schema is what a codex executable says its app-server speaks.
type Schema struct {
	Version       string          // from `codex --version`
	Methods       map[string]bool // client requests
	Notifications map[string]bool // server notifications
	TurnStatuses  []string
}

// LoadSchema asks the executable for its version and for its app-server
// schema (`app-server generate-json-schema --experimental`, experimental
// since cbth opts into the experimental API). env must carry the
// CODEX_HOME the app-server runs with; tmp is a private directory for the
// generated files, removed afterwards.
func LoadSchema(ctx context.Context, codex string, env []string, tmp string) (*Schema, error) {
	out, err := run(ctx, codex, env, "--version")
	if err != nil {
		return nil, err
	}
	f := strings.Fields(out)
	if len(f) == 0 {
		return nil, errs.New(errs.ENOTSUP, "%s --version printed nothing", codex)
	}
	s := &Schema{Version: f[len(f)-1], Methods: map[string]bool{}, Notifications: map[string]bool{}}

	dir, err := os.MkdirTemp(tmp, "codex-schema-")
	if err != nil {
		return nil, errs.Wrap(errs.EINTERNAL, err, "schema directory")
	}
	defer os.RemoveAll(dir)
	if _, err := run(ctx, codex, env, "app-server", "generate-json-schema", "--experimental", "--out", dir); err != nil {
		return nil, errs.Wrap(errs.ENOTSUP, err, "codex %s cannot describe its app-server, so its capabilities cannot be proven", s.Version)
	}
	var req, note struct {
		OneOf []struct {
			Properties struct {
				Method struct {
					Enum []string `json:"enum"`
				} `json:"method"`
			} `json:"properties"`
		} `json:"oneOf"`
		Definitions struct {
			TurnStatus struct {
				Enum []string `json:"enum"`
			} `json:"TurnStatus"`
		} `json:"definitions"`
	}
	for name, v := range map[string]any{"ClientRequest.json": &req, "ServerNotification.json": &note} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil {
			err = json.Unmarshal(b, v)
		}
		if err != nil {
			return nil, errs.Wrap(errs.ENOTSUP, err, "codex %s app-server schema %s", s.Version, name)
		}
	}
	for _, v := range req.OneOf {
		for _, m := range v.Properties.Method.Enum {
			s.Methods[m] = true
		}
	}
	for _, v := range note.OneOf {
		for _, m := range v.Properties.Method.Enum {
			s.Notifications[m] = true
		}
	}
	s.TurnStatuses = note.Definitions.TurnStatus.Enum
	return s, nil
}

func run(ctx context.Context, codex string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, codex, args...)
	cmd.Env = env
	// A group of its own, ended whole when ctx ends: codex may be a
	// wrapper whose child does the work and holds stdout, and killing the
	// wrapper alone would leave Output waiting for that child.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", errs.Wrap(errs.ENOTSUP, err, "%s %s: %s", codex, strings.Join(args, " "), strings.TrimSpace(string(ee.Stderr)))
		}
		return "", errs.Wrap(errs.ENOTCONF, err, "run %s", codex)
	}
	return string(out), nil
}

// Options of a probe.
type Options struct {
	ClientInfo appserver.ClientInfo
	// Steer requires turn/steer too: the steer feature is switched on.
	Steer bool
	// Require are more methods the caller needs (the Codex daemon
	// transport: thread/loaded/list).
	Require []string
}

// Report is what a probe proved. Missing is empty exactly when the probe
// passed.
type Report struct {
	Version       string   `json:"version"`
	UserAgent     string   `json:"user_agent"`
	Methods       []string `json:"methods"`       // required methods, proven
	Lookup        string   `json:"lookup"`        // the turn lookup method delivery uses
	Steer         bool     `json:"steer"`         // turn/steer is there (needed only when enabled)
	Notifications []string `json:"notifications"` // required notifications, proven
	TurnStatuses  []string `json:"turn_statuses"` // every turn status the server declares
	Missing       []string `json:"missing,omitempty"`
}

// Probe initializes c, a connection nobody has initialized yet, with the
// experimental API, then proves every method, notification and turn status
// delivery needs against s, the schema of the same executable. When
// anything is missing it returns the report and an ENOTSUP error naming
// it. A failure to talk to the server at all (no answer) is returned as
// such (ETIMEDOUT, EHOSTDOWN): it proves nothing either way.
func Probe(ctx context.Context, c *appserver.Client, s *Schema, opts Options) (*Report, error) {
	init, err := c.Initialize(ctx, opts.ClientInfo, appserver.Capabilities{ExperimentalAPI: true})
	if err != nil {
		if _, answered := appserver.RPCCode(err); answered {
			return nil, errs.Wrap(errs.ENOTSUP, err, "codex app-server refused initialize with the experimental API")
		}
		return nil, err
	}
	r := &Report{Version: s.Version, UserAgent: init.UserAgent, TurnStatuses: s.TurnStatuses}
	if v := serverVersion(init.UserAgent); v != s.Version {
		r.Missing = append(r.Missing, fmt.Sprintf("version %s (the app-server answers as %q)", s.Version, init.UserAgent))
		return r, missing(r)
	}

	has := func(method string) (bool, error) {
		if !s.Methods[method] {
			return false, nil
		}
		return dispatches(ctx, c, method)
	}
	for _, m := range slices.Concat(requiredMethods, opts.Require) {
		ok, err := has(m)
		if err != nil {
			return nil, err
		}
		if !ok {
			r.Missing = append(r.Missing, m)
			continue
		}
		r.Methods = append(r.Methods, m)
	}
	for _, m := range lookupMethods {
		ok, err := has(m)
		if err != nil {
			return nil, err
		}
		if ok {
			r.Lookup = m
			r.Methods = append(r.Methods, m)
			break
		}
	}
	if r.Lookup == "" {
		r.Missing = append(r.Missing, strings.Join(lookupMethods, " or "))
	}
	steer, err := has(appserver.MethodTurnSteer)
	if err != nil {
		return nil, err
	}
	r.Steer = steer
	if opts.Steer {
		if steer {
			r.Methods = append(r.Methods, appserver.MethodTurnSteer)
		} else {
			r.Missing = append(r.Missing, appserver.MethodTurnSteer)
		}
	}
	for _, n := range requiredNotifications {
		if s.Notifications[n] {
			r.Notifications = append(r.Notifications, n)
		} else {
			r.Missing = append(r.Missing, "notification "+n)
		}
	}
	for _, st := range requiredStatuses {
		if !slices.Contains(s.TurnStatuses, st) {
			r.Missing = append(r.Missing, "turn status "+st)
		}
	}
	if len(r.Missing) > 0 {
		return r, missing(r)
	}
	return r, nil
}

func missing(r *Report) error {
	return errs.New(errs.ENOTSUP, "codex %s app-server lacks %s; CLI auto-continuation stays off", r.Version, strings.Join(r.Missing, ", "))
}

// serverVersion reads the version from initialize's userAgent,
// "<client name>/<version> (<platform>) ...".
func serverVersion(ua string) string {
	_, rest, ok := strings.Cut(ua, "/")
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, " ")
	return v
}

// dispatches calls method on a thread that cannot exist. The server proves
// it has the method by refusing the call for the method's own reasons (or,
// unexpectedly, by accepting it); it shows it lacks it with -32601 or, as
// Codex 0.169 does, with -32600 naming the method an unknown variant. No
// answer is returned as an error.
func dispatches(ctx context.Context, c *appserver.Client, method string) (bool, error) {
	params := map[string]any{"threadId": nilThread}
	switch method {
	case appserver.MethodThreadResume:
		params["excludeTurns"] = true
	case appserver.MethodTurnStart:
		params["input"] = []appserver.Input{}
	case appserver.MethodTurnSteer:
		params["expectedTurnId"] = nilThread
		params["input"] = []appserver.Input{}
	case appserver.MethodThreadTurnsList:
		params["limit"] = 1
	}
	err := c.Call(ctx, method, params, nil)
	if err == nil {
		return true, nil
	}
	code, answered := appserver.RPCCode(err)
	if !answered {
		return false, err
	}
	if code == appserver.CodeMethodNotFound {
		return false, nil
	}
	var rpc *appserver.RPCError
	if errors.As(err, &rpc) && code == appserver.CodeInvalidRequest && strings.Contains(rpc.Message, "unknown variant `"+method+"`") {
		return false, nil
	}
	return true, nil
}
