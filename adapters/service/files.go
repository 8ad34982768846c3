package service

import (
	"strconv"
	"strings"
)

// systemdUnit renders the user unit. The daemon logs to its home, is
// restarted if it fails and never leaves on idle (--supervised).
func systemdUnit(s Spec) []byte {
	var args []string
	for _, a := range s.Args() {
		args = append(args, systemdQuote(a))
	}
	return []byte("# Written by `cbth service install`; remove it with `cbth service uninstall`.\n" +
		"[Unit]\n" +
		"Description=cbth daemon for \"" + systemdSpecifiers(s.Home) + "\"\n" +
		"\n" +
		"[Service]\n" +
		"Type=simple\n" +
		"ExecStart=" + strings.Join(args, " ") + "\n" +
		"Restart=on-failure\n" +
		"RestartSec=5\n" +
		"UMask=0077\n" +
		"\n" +
		"[Install]\n" +
		"WantedBy=default.target\n")
}

// The paths written into a unit hold no control character (Spec.Check
// refuses them: a newline would end the setting and start another).
// What else systemd would read in them is escaped by its own rules:

// systemdSpecifiers doubles %, which systemd expands in every setting
// (the Description is quoted only so that a path ending in a backslash
// cannot continue the line).
func systemdSpecifiers(s string) string { return strings.ReplaceAll(s, "%", "%%") }

// systemdQuote quotes one ExecStart word: double quotes, with backslash
// and double quote escaped (a quoted word takes C escapes), specifiers
// and variables doubled.
func systemdQuote(s string) string {
	s = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "%", "%%", "$", "$$").Replace(s)
	return `"` + s + `"`
}

// launchdLabel is the agent's label.
func launchdLabel(s Spec) string { return "dev.cbth." + s.Name() }

func launchdDomain(uid int) string { return "gui/" + strconv.Itoa(uid) }

// launchdPlist renders the agent: started at load, started again unless
// it exited cleanly.
func launchdPlist(s Spec) []byte {
	var b strings.Builder
	// Plain escaping: encoding/xml would add its package to every start
	// of cbth for one call.
	esc := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;").Replace
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>` + esc(launchdLabel(s)) + `</string>
	<key>ProgramArguments</key>
	<array>
`)
	for _, a := range s.Args() {
		b.WriteString("\t\t<string>" + esc(a) + "</string>\n")
	}
	b.WriteString(`	</array>
	<key>RunAtLoad</key>
	<true/>
	<key>KeepAlive</key>
	<dict>
		<key>SuccessfulExit</key>
		<false/>
	</dict>
	<key>ProcessType</key>
	<string>Background</string>
	<key>Umask</key>
	<integer>63</integer>
</dict>
</plist>
`)
	return []byte(b.String())
}
