package engine

import "testing"

// A panic or a fault inside the boundary is a value, not a crash.
func TestCatchTurnsFaultsIntoValues(t *testing.T) {
	if p := catch(func() { panic("invalid page type") }); p == nil {
		t.Fatal("a panic was not caught")
	}
	if p := catch(func() {
		var s []int
		_ = s[len(s)] // index out of range, as bbolt's page arithmetic can be
	}); p == nil {
		t.Fatal("a runtime error was not caught")
	}
	if p := catch(func() {}); p != nil {
		t.Fatalf("caught %v from nothing", p)
	}
}
