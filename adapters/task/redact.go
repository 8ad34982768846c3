package task

import (
	"bytes"
	"io"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// What a task prints is kept: in its spool (a file of the home, then the
// job's result artifact) and, for its last bytes, in the log for good.
// So a task's output is redacted on its way in, before either sees it:
// the values of the task's own environment that may be secrets, and the
// common shapes of tokens and keys, whatever variable they came from.

// MinSecretLen is the shortest value of a secret-named variable that is
// hidden: shorter ones would blot out ordinary words of the output.
const MinSecretLen = 6

// minTokenLen is the shortest value of any other variable hidden when it
// looks like a token.
const minTokenLen = 20

// SecretName reports whether an environment variable's name marks its
// value as a secret: *_KEY, *_TOKEN, *_SECRET, *_PAT, or PASSWORD,
// PASSWD, CREDENTIAL, AUTH or PRIVATE anywhere (any case).
func SecretName(name string) bool {
	n := strings.ToUpper(name)
	for _, s := range []string{"_KEY", "_TOKEN", "_SECRET", "_PAT"} {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	for _, s := range []string{"PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "PRIVATE", "SECRET", "TOKEN"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// plainNames are variables whose values are never secrets and often
// printed (paths, the locale, ids cbth gives the task itself).
var plainNames = []string{"PATH", "HOME", "PWD", "OLDPWD", "SHELL", "TERM", "LANG", "LANGUAGE", "USER", "LOGNAME", "TMPDIR", "TZ",
	"HOSTNAME", "DISPLAY", "EDITOR", "VISUAL", "PAGER", "SHLVL", "_", "COLORTERM", "CBTH_HOME", "CBTH_TASK_ID", "CBTH_JOB_ID",
	"CODEX_THREAD_ID", "GOPATH", "GOROOT", "GOCACHE", "GOMODCACHE"}

func plainName(n string) bool {
	return slices.Contains(plainNames, n) || strings.HasPrefix(n, "LC_") || strings.HasPrefix(n, "XDG_")
}

// tokenLike reports whether a value looks like a key or token: long, one
// word, letters and digits mixed, not a path.
func tokenLike(v string) bool {
	if len(v) < minTokenLen || strings.ContainsAny(v, " \t\n/") {
		return false
	}
	return strings.ContainsAny(v, "0123456789") && strings.IndexFunc(v, unicode.IsLetter) >= 0
}

// shape is a common form of credential, found in any output, and what
// replaces it (a regexp template: a header's or a URL's own text stays).
// A shape is looked for only in a line that holds one of its hints (in
// lower case when fold), which keeps a flood of output cheap. The forms
// that keep their context go first, so a token in them is hidden once,
// under its context.
type shape struct {
	re    *regexp.Regexp
	with  string
	hints []string
	fold  bool
}

var shapes = []shape{
	{regexp.MustCompile(`(?i)\b((?:proxy-)?authorization\s*:\s*(?:bearer|basic|token)\s+)[^\s"'<]+`), "${1}<redacted token>", []string{"authorization"}, true},
	{regexp.MustCompile(`(?i)\b(bearer\s+)[A-Za-z0-9_\-.=+/]{16,}`), "${1}<redacted token>", []string{"bearer"}, true},
	{regexp.MustCompile(`(://[^/\s:@]+:)[^/\s@]+@`), "${1}<redacted>@", []string{"://"}, false},                                            // credentials in a URL
	{regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{30,}`), "<redacted token>", []string{"gh"}, false},                                        // GitHub tokens
	{regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{22,}`), "<redacted token>", []string{"github_pat_"}, false},                             // GitHub fine-grained tokens
	{regexp.MustCompile(`\bglpat-[A-Za-z0-9_\-]{20,}`), "<redacted token>", []string{"glpat-"}, false},                                     // GitLab
	{regexp.MustCompile(`\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}`), "<redacted token>", []string{"sk-"}, false},                            // OpenAI, Anthropic
	{regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9\-]{10,}`), "<redacted token>", []string{"xox"}, false},                                   // Slack
	{regexp.MustCompile(`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`), "<redacted token>", []string{"AKIA", "ASIA"}, false},                             // AWS access key ids
	{regexp.MustCompile(`\bAIza[0-9A-Za-z_\-]{35}`), "<redacted token>", []string{"AIza"}, false},                                          // Google API keys
	{regexp.MustCompile(`\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}`), "<redacted token>", []string{"eyJ"}, false}, // JWTs
}

// privateKey marks the lines of a PEM private key.
var (
	keyBegin = []byte("-----BEGIN ")
	keyEnd   = []byte("-----END ")
	keyWord  = []byte("PRIVATE KEY-----")
)

// secret is one value to hide and the name to hide it under.
type secret struct{ name, value string }

// Secrets are the values of env (a task's own environment) that are
// hidden in its output: a secret-named variable's of at least
// MinSecretLen bytes, and any other's that looks like a token, except
// the variables that never hold one. Longer values first, so one that
// holds another is hidden whole.
func Secrets(env []string) []secret {
	var ss []secret
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok || plainName(k):
		case SecretName(k) && len(v) >= MinSecretLen, tokenLike(v):
			ss = append(ss, secret{k, v})
		}
	}
	slices.SortStableFunc(ss, func(a, b secret) int { return len(b.value) - len(a.value) })
	return ss
}

// Redactor returns a function that redacts one text, as the Redacting
// writer redacts a stream: for texts made before it (the tail of a task
// lost with an older daemon).
func Redactor(env []string) func(string) string {
	ss := Secrets(env)
	return func(s string) string { return string(redactLine([]byte(s), ss)) }
}

func redactLine(b []byte, ss []secret) []byte {
	for _, x := range ss {
		if bytes.Contains(b, []byte(x.value)) {
			b = bytes.ReplaceAll(b, []byte(x.value), []byte("<redacted "+x.name+">"))
		}
	}
	var lower []byte
	for _, sh := range shapes {
		in := b
		if sh.fold {
			if lower == nil {
				lower = bytes.ToLower(b)
			}
			in = lower
		}
		if !slices.ContainsFunc(sh.hints, func(h string) bool { return bytes.Contains(in, []byte(h)) }) {
			continue
		}
		b = sh.re.ReplaceAll(b, []byte(sh.with))
		lower = nil
	}
	return b
}

// maxHold bounds how much of a line without its end is held back: past
// it the part before the last holdBack bytes goes on, redacted (a secret
// no longer than holdBack is never cut in two; one in a longer unbroken
// run may be).
const (
	maxHold  = 64 << 10
	holdBack = 4 << 10
)

// Redacting writes the task's output to w a line at a time, redacted.
// A partial line waits for its end (or for maxHold); Close writes what is
// left. Lines of a PEM private key are replaced by one marker.
type Redacting struct {
	w     io.Writer
	ss    []secret
	buf   []byte
	inKey bool
}

// NewRedacting returns a redacting writer to w for a task run with env.
func NewRedacting(w io.Writer, env []string) *Redacting {
	return &Redacting{w: w, ss: Secrets(env)}
}

// Write takes output as it comes.
func (r *Redacting) Write(p []byte) (int, error) {
	r.buf = append(r.buf, p...)
	if i := bytes.LastIndexByte(r.buf, '\n'); i >= 0 {
		if err := r.lines(r.buf[:i+1]); err != nil {
			return len(p), err
		}
		r.buf = r.buf[i+1:]
	}
	if len(r.buf) > maxHold {
		out := redactLine(r.buf, r.ss)
		cut := len(out) - holdBack
		if !r.inKey {
			if _, err := r.w.Write(out[:cut]); err != nil {
				return len(p), err
			}
		}
		r.buf = append([]byte(nil), out[cut:]...)
	}
	if len(r.buf) == 0 {
		r.buf = nil
	}
	return len(p), nil
}

// Close writes what is held.
func (r *Redacting) Close() error {
	if len(r.buf) == 0 {
		return nil
	}
	err := r.emit(r.buf)
	r.buf = nil
	return err
}

// lines redacts whole lines: all at once, unless a private key is in
// them (its lines go one by one).
func (r *Redacting) lines(block []byte) error {
	if !r.inKey && !bytes.Contains(block, keyBegin) {
		_, err := r.w.Write(redactLine(block, r.ss))
		return err
	}
	for len(block) > 0 {
		i := bytes.IndexByte(block, '\n')
		if err := r.emit(block[:i+1]); err != nil {
			return err
		}
		block = block[i+1:]
	}
	return nil
}

func (r *Redacting) emit(line []byte) error {
	switch {
	case r.inKey:
		if bytes.Contains(line, keyEnd) {
			r.inKey = false
		}
		return nil
	case bytes.Contains(line, keyBegin) && bytes.Contains(line, keyWord):
		r.inKey = !bytes.Contains(line[bytes.Index(line, keyBegin)+len(keyBegin):], keyEnd)
		_, err := r.w.Write([]byte("<redacted private key>\n"))
		return err
	}
	_, err := r.w.Write(redactLine(line, r.ss))
	return err
}
