package task

import (
	"bytes"
	"strings"
	"testing"
)

// Secrets are hidden however the output is cut into writes: a value
// split across two writes, a line that never ends, a line past the hold
// bound; PEM key lines go whole; plain variables and words stay.
func TestRedactingStream(t *testing.T) {
	env := []string{"API_TOKEN=s3cr3t-value-1", "HOME=/home/u", "SHORT_KEY=ab", "SESSION=a1b2c3d4e5f6a7b8c9d0e1", "CBTH_TASK_ID=01a2f3e4-0000-7000-8000-0000000000aa"}
	gh := "ghp_" + strings.Repeat("x1Y2", 9)
	in := "home /home/u short ab task 01a2f3e4-0000-7000-8000-0000000000aa\n" +
		"tok s3cr3t-value-1 and a1b2c3d4e5f6a7b8c9d0e1 and " + gh + "\n" +
		"-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAK\n-----END RSA PRIVATE KEY-----\n" +
		strings.Repeat("z", maxHold+10) + " s3cr3t-value-1 tail without end s3cr3t-value-1"
	want := "home /home/u short ab task 01a2f3e4-0000-7000-8000-0000000000aa\n" +
		"tok <redacted API_TOKEN> and <redacted SESSION> and <redacted token>\n" +
		"<redacted private key>\n" +
		strings.Repeat("z", maxHold+10) + " <redacted API_TOKEN> tail without end <redacted API_TOKEN>"
	for _, size := range []int{1, 3, 7, 64, 4096, len(in)} {
		var out bytes.Buffer
		r := NewRedacting(&out, env)
		for i := 0; i < len(in); i += size {
			r.Write([]byte(in[i:min(i+size, len(in))]))
		}
		r.Close()
		if out.String() != want {
			t.Errorf("writes of %d bytes: got %q...", size, strings.TrimLeft(out.String(), "z")[:min(200, len(strings.TrimLeft(out.String(), "z")))])
		}
	}
}
