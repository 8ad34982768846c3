package relay

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// rollout builds n records of a typical rollout mix: most records are
// events and messages without the prefix; one in 1,000 is a tool output
// carrying an envelope among other lines.
func rollout(n int) []byte {
	var b bytes.Buffer
	e := Envelope{Marker: "m1-0123456789abcdef0123456789abcdef01234567", Kind: KindArmPending, SourceThreadID: "S", AttemptID: "a", Generation: 1, BridgeRequestID: "r"}
	filler := strings.Repeat("x", 400)
	for i := range n {
		if i%1000 == 0 {
			b.Write(rec("response_item", "function_call_output", "Chunk ID: 1\nOutput:\nbridge wake\n"+Line(e)+"\n"))
		} else {
			fmt.Fprintf(&b, `{"timestamp":"2026-11-23T23:48:00.270Z","ordinal":%d,"type":"event_msg","payload":{"type":"token_count","info":%q}}`, i, filler)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// BenchmarkRead is the scanner's cost per byte of rollout, beside the
// physical reference: splitting the same bytes into lines with bufio and
// nothing else.
func BenchmarkRead(b *testing.B) {
	data := rollout(20000)
	b.Run("relay.Read", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			round, err := Read(bytes.NewReader(data), 0, 0, int64(len(data)), Limits{})
			if err != nil || len(round.Found) != 20 {
				b.Fatal(err, len(round.Found))
			}
		}
	})
	b.Run("reference_bufio_lines", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			sc := bufio.NewScanner(bytes.NewReader(data))
			n := 0
			for sc.Scan() {
				n++
			}
			if n != 20000 {
				b.Fatal(n)
			}
		}
	})
}
