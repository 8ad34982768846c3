package index

import (
	"testing"
	"time"
)

// Keys parse back to what built them, and a thread whose id extends
// another's never matches the shorter one's keys.
func TestKeysRoundTripAndStayWithinTheirThread(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 123, time.UTC)
	k := ThreadOpenKey("t1", 42)
	if n, ok := ThreadOpenSeq(k, "t1"); !ok || n != 42 {
		t.Fatalf("ThreadOpenSeq = %d %v", n, ok)
	}
	if _, ok := ThreadOpenSeq(ThreadOpenKey("t1x", 42), "t1"); ok {
		t.Fatal("a key of thread t1x parsed as thread t1")
	}
	if got, ok := SendTime(SendKey("t1", at), "t1"); !ok || !got.Equal(at) {
		t.Fatalf("SendTime = %v %v", got, ok)
	}
	if _, ok := SendTime(SendKey("t", at), "t1"); ok {
		t.Fatal("a send of thread t parsed as thread t1")
	}
	ready, th, ok := ParseHead(HeadKey("debug", at, "a\x01b"), "debug")
	if !ok || th != "a\x01b" || !ready.Equal(at) {
		t.Fatalf("ParseHead = %v %q %v", ready, th, ok)
	}
	if _, _, ok := ParseHead(HeadKey("cli", at, "x"), "debug"); ok {
		t.Fatal("a cli head parsed as a debug head")
	}
	if HeadKey("debug", at, "b") < HeadKey("debug", at, "a") || HeadKey("debug", at.Add(-1), "z") > HeadKey("debug", at, "a") {
		t.Fatal("head keys do not sort by (first ready time, thread)")
	}
}
