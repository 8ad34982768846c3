package runner

import (
	"regexp"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestRunIDIsUUIDv7(t *testing.T) {
	re := regexp.MustCompile(`^run-[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		id := RunID()
		if !re.MatchString(id) || seen[id] {
			t.Fatalf("run id %q", id)
		}
		seen[id] = true
		u, err := uuid.Parse(id[4:])
		if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("%s: %v %v %v", id, err, u.Version(), u.Variant())
		}
		sec, nsec := u.Time().UnixTime()
		if d := time.Since(time.Unix(sec, nsec)); d < -time.Second || d > time.Minute {
			t.Fatalf("%s: time %v", id, time.Unix(sec, nsec))
		}
	}
}
