package events_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/events"
	"github.com/google/uuid"
)

// The event id's text form must stay the one github.com/google/uuid wrote
// before cbth had its own type: logs, exports and API answers carry it.
func TestUUIDTextMatchesGoogleUUID(t *testing.T) {
	for i := 0; i < 50; i++ {
		id := events.DeriveID(time.Unix(1700000000+int64(i), 0), []byte{byte(i)})
		g := uuid.UUID(id)
		if id.String() != g.String() {
			t.Fatalf("String %s, google/uuid %s", id, g)
		}
		mine, _ := json.Marshal(struct{ ID events.UUID }{id})
		theirs, _ := json.Marshal(struct{ ID uuid.UUID }{g})
		if string(mine) != string(theirs) {
			t.Fatalf("JSON %s, google/uuid %s", mine, theirs)
		}
		s := g.String()
		for _, in := range []string{s, strings.ToUpper(s)} {
			var back events.UUID
			if err := back.UnmarshalText([]byte(in)); err != nil || back != id {
				t.Fatalf("UnmarshalText(%q) = %s, %v; want %s", in, back, err, id)
			}
		}
	}
	for _, bad := range []string{"", "x", "0190a5c8-7d2e-7f3a-9b1c-2d3e4f5a6b7", "0190a5c8x7d2e-7f3a-9b1c-2d3e4f5a6b7c", "0190a5c8-7d2e-7f3a-9b1c-2d3e4f5a6b7g", "urx:uuid:0190a5c8-7d2e-7f3a-9b1c-2d3e4f5a6b7c", "0190a5c87-d2e-7f3a-9b1c-2d3e4f5a6b7c"} {
		var u events.UUID
		if err := u.UnmarshalText([]byte(bad)); err == nil {
			t.Fatalf("UnmarshalText(%q) accepted", bad)
		}
		if _, err := uuid.ParseBytes([]byte(bad)); err == nil {
			t.Fatalf("google/uuid accepts %q: the two disagree", bad)
		}
	}
}

// Whatever ParseUUID accepts is exactly the canonical form of the id it
// returns, up to the case of the hex digits.
func FuzzParseUUID(f *testing.F) {
	f.Add("0190a5c8-7d2e-7f3a-9b1c-2d3e4f5a6b7c")
	f.Add("0190A5C8-7D2E-7F3A-9B1C-2D3E4F5A6B7C")
	f.Add("{0190a5c8-7d2e-7f3a-9b1c-2d3e4f5a6b7c}")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := events.ParseUUID([]byte(s))
		if err != nil {
			return
		}
		if u.String() != strings.ToLower(s) {
			t.Fatalf("ParseUUID(%q) = %s", s, u)
		}
	})
}
