package plural

import "testing"

func TestCount(t *testing.T) {
	cases := []struct {
		n    int
		one  string
		many string
		want string
	}{
		{0, "problem", "problems", "0 problems"},
		{1, "problem", "problems", "1 problem"},
		{2, "problem", "problems", "2 problems"},
		{1, "batch", "batches", "1 batch"},
		{3, "batch", "batches", "3 batches"},
		{1, "network model", "network models", "1 network model"},
		{1, "entry", "entries", "1 entry"},
		{11, "entry", "entries", "11 entries"},
		{-1, "byte", "bytes", "-1 bytes"},
	}
	for _, c := range cases {
		if got := Count(c.n, c.one, c.many); got != c.want {
			t.Errorf("Count(%d, %q, %q) = %q, want %q", c.n, c.one, c.many, got, c.want)
		}
	}
	// Other integer types take the same forms.
	if got := Count(int64(1), "byte", "bytes"); got != "1 byte" {
		t.Errorf("Count(int64(1)) = %q", got)
	}
	if got := Count(uint64(1<<63), "byte", "bytes"); got != "9223372036854775808 bytes" {
		t.Errorf("Count(uint64(1<<63)) = %q", got)
	}
}
