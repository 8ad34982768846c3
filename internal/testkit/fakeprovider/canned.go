package fakeprovider

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Canned is a loopback provider for a driver's own tests: it answers
// every request with the status and body the test gives (a stream written
// by hand, or an error body) and keeps what each request carried, so the
// test holds the driver's request to the provider's wire shape.
type Canned struct {
	URL string

	mu       sync.Mutex
	requests []Canned1
}

// Canned1 is one request a Canned server received.
type Canned1 struct {
	Path   string
	Header http.Header
	Body   map[string]any
}

// StartCanned serves status and body on 127.0.0.1 until the test ends. A
// 200 answer is an event stream, any other a JSON body.
func StartCanned(t testing.TB, status int, body string) *Canned {
	t.Helper()
	c := &Canned{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m map[string]any
		json.Unmarshal(b, &m)
		c.mu.Lock()
		c.requests = append(c.requests, Canned1{Path: r.URL.Path, Header: r.Header.Clone(), Body: m})
		c.mu.Unlock()
		ct := "application/json"
		if status == http.StatusOK {
			ct = "text/event-stream"
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

// Requests are the requests received so far.
func (c *Canned) Requests() []Canned1 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Canned1(nil), c.requests...)
}
