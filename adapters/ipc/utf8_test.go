package ipc

import (
	"encoding/json"
	"testing"
)

// json.Marshal's replacement of invalid UTF-8 is told apart from text
// that holds U+FFFD or the six characters \ufffd itself.
func TestReplacedFindsOnlyRewrittenText(t *testing.T) {
	type args struct {
		ThreadID string            `json:"thread_id"`
		Tags     []string          `json:"tags"`
		Meta     map[string]string `json:"meta"`
	}
	for _, c := range []struct {
		v     args
		field string
	}{
		{args{ThreadID: "plain"}, ""},
		{args{ThreadID: "a\uFFFDb"}, ""},
		{args{ThreadID: `a\ufffdb`}, ""},
		{args{ThreadID: `a\\ufffdb`}, ""},
		{args{ThreadID: "a\xffb"}, "thread_id"},
		{args{ThreadID: `x\` + "\xff"}, "thread_id"},
		{args{Tags: []string{"ok", "caf\xe9"}}, "tags[]"},
		{args{Meta: map[string]string{"k": "\xc3"}}, "meta.k"},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if got := replaced(b); got != (c.field != "") {
			t.Errorf("%q: replaced = %v", b, got)
		}
		if got := invalidField(c.v); got != c.field {
			t.Errorf("%+v: field %q, want %q", c.v, got, c.field)
		}
	}
}
