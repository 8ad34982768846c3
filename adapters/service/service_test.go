package service

import (
	"encoding/xml"
	"strings"
	"testing"
)

// The agent and unit files carry the command line exactly, whatever the
// paths hold.
func TestFilesQuoteTheCommand(t *testing.T) {
	s := Spec{Exe: `/opt/my "cbth" & <co>/cbth`, Home: "/home/u/50% $HOME's", DefaultHome: "/home/u/.cbth"}
	var plist struct {
		Dict struct {
			Strings []string `xml:"array>string"`
		} `xml:"dict"`
	}
	if err := xml.Unmarshal(launchdPlist(s), &plist); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(plist.Dict.Strings, "|"); got != strings.Join(s.Args(), "|") {
		t.Fatalf("plist arguments %q, want %q", got, s.Args())
	}
	unit := string(systemdUnit(s))
	want := `ExecStart="/opt/my \"cbth\" & <co>/cbth" "--home" "/home/u/50%% $$HOME's" "daemon" "run" "--quiet" "--supervised"`
	if !strings.Contains(unit, want+"\n") {
		t.Fatalf("unit:\n%s\nwant %s", unit, want)
	}
	if s.Name() == "cbth" || (Spec{Home: "/home/u/.cbth/", DefaultHome: "/home/u/.cbth"}).Name() != "cbth" {
		t.Fatal("names: the default home's service is cbth, another home's is not")
	}
}
