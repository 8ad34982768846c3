package task

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/events"
)

// A watcher's matcher sees each line as the spool gets it: numbered from
// 1, redacted, a carriage return dropped, a long line cut at LineMax
// (and matched on what is left), the last line without its end too; the
// first pattern that matches is named.
func TestLineWatchMatchesRedactedLines(t *testing.T) {
	s := spec(t, time.Second, "sh", "-c", `printf 'noise\nREADY on 8080\r\nkey is %s\nERROR one\n%s ERROR\nnoise\nERROR last' "$API_TOKEN" "$(printf 'x%.0s' $(seq 1 100))"`)
	s.Env = append(s.Env, "API_TOKEN=tok-123456789")
	var mu sync.Mutex
	var got []events.TaskLine
	s.Watch = &LineWatch{Patterns: []*regexp.Regexp{regexp.MustCompile(`READY|key`), regexp.MustCompile(`ERROR`)}, LineMax: 64,
		Match: func(l events.TaskLine) { mu.Lock(); got = append(got, l); mu.Unlock() }}
	run(t, s)
	want := []events.TaskLine{
		{Line: 2, Pattern: 0, Text: "READY on 8080"},
		{Line: 3, Pattern: 0, Text: "key is <redacted API_TOKEN>"},
		{Line: 4, Pattern: 1, Text: "ERROR one"},
		{Line: 7, Pattern: 1, Text: "ERROR last"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("matched %+v\nwant    %+v (line 5 is cut before its ERROR)", got, want)
	}
}

// The kept output reads by byte offset or by line while the task runs,
// across a rotation that dropped its start, and from the merged file once
// it ended; a read cut by its bound ends on a line end.
func TestKeptOutputReads(t *testing.T) {
	s := spec(t, 5*time.Second, "sh", "-c", `i=1; while [ $i -le 300 ]; do echo "line $i"; i=$((i+1)); done; sleep 30`)
	s.SpoolMax = 2000
	p, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	var k *Kept
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if k, err = p.Kept(); err != nil {
			t.Fatal(err)
		}
		if ch, _ := k.Read(k.Start+k.Size()-9, 0, 100); strings.HasSuffix(string(ch.Data), "line 300\n") {
			break
		}
		k.Close()
		if time.Now().After(deadline) {
			t.Fatal("the output never reached line 300")
		}
	}
	check := func(k *Kept, what string) {
		t.Helper()
		if k.StartLine <= 1 || k.Start == 0 {
			t.Fatalf("%s: the start was dropped by rotation, yet kept starts at %d, line %d", what, k.Start, k.StartLine)
		}
		ch, err := k.Read(0, 250, 30)
		if err != nil || ch.Line != 250 || string(ch.Data) != "line 250\nline 251\nline 252\n" || ch.NextLine != 253 {
			t.Fatalf("%s: from line 250: %+v %q %v", what, ch, ch.Data, err)
		}
		next, err := k.Read(ch.Next, 0, 9)
		if err != nil || string(next.Data) != "line 253\n" || next.Line != 253 {
			t.Fatalf("%s: the next read: %+v %q %v", what, next, next.Data, err)
		}
		early, err := k.Read(0, 1, 9)
		if err != nil || !early.Dropped || early.Offset != k.Start {
			t.Fatalf("%s: line 1 was dropped: %+v %v", what, early, err)
		}
		if end, _ := k.Read(k.Start+k.Size(), 0, 10); len(end.Data) != 0 || end.Next != k.Start+k.Size() {
			t.Fatalf("%s: at the end: %+v", what, end)
		}
	}
	check(k, "running")
	k.Close()
	p.Stop()
	x := p.Wait()
	if _, err := p.Kept(); err != ErrEnded {
		t.Fatalf("Kept after the end: %v", err)
	}
	o := x.Output
	k, err = KeptFile(s.Spool, o.Bytes-o.Spooled, o.DroppedLines+1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	check(k, "ended")
}
