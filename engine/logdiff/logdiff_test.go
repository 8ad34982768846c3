package logdiff_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/logdiff"
	"github.com/cbth-dev/cbth/events"
)

// ev is one event of a test log: its stream and its payload's JSON.
type ev struct {
	stream  string // kind/id
	payload string
}

// chain builds a log of evs with its hash chain, as the engine stores
// it: changing one event changes its hash and every later one's.
func chain(evs ...ev) []events.Envelope {
	var out []events.Envelope
	var prev events.Hash
	versions := map[string]uint64{}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, e := range evs {
		kind, id, _ := strings.Cut(e.stream, "/")
		versions[e.stream]++
		env := events.Envelope{
			Seq: uint64(i + 1), ID: events.DeriveID(at, []byte(e.stream), []byte(e.payload)),
			Stream: events.StreamID{Kind: events.Kind(kind), ID: id}, Version: versions[e.stream],
			Type: "test.event", Schema: 1, RecordedAt: at.Add(time.Duration(i) * time.Second),
			Actor: events.ActorCLI, Payload: events.RawJSON(e.payload), PrevHash: prev,
		}
		events.Encode(&env)
		prev = env.Hash
		out = append(out, env)
	}
	return out
}

// source reads a log held in memory, from seq from on.
func source(log []events.Envelope) logdiff.Source {
	return func(from uint64, fn func(events.Envelope) error) error {
		for _, e := range log {
			if e.Seq < from {
				continue
			}
			if err := fn(e); err != nil {
				if errors.Is(err, engine.ErrStop) {
					return nil
				}
				return err
			}
		}
		return nil
	}
}

func TestCompare(t *testing.T) {
	base := []ev{{"job/1", `{"n":1}`}, {"job/2", `{"n":2}`}, {"job/1", `{"n":3}`}}
	type want struct {
		identical bool
		a, b      uint64
		divergent uint64
		atA, atB  string // stream at the divergence, "" for none
		fields    []string
		summary   logdiff.Summary
		streams   []string // status stream A B
	}
	for _, tc := range []struct {
		name string
		a, b []ev
		want want
	}{
		{"identical", base, base, want{identical: true, a: 3, b: 3, summary: logdiff.Summary{Same: 2}, streams: nil}},
		{"both empty", nil, nil, want{identical: true}},
		{"b goes on", base, append(slices.Clone(base), ev{"batch/9", `{}`}), want{a: 3, b: 4, divergent: 4, atB: "batch/9",
			fields:  []string{"actor", "event_id", "hash", "prev_hash", "recorded_at", "seq", "stream", "stream_version", "type", "schema_version"},
			summary: logdiff.Summary{Same: 2, OnlyB: 1}, streams: []string{"only_in_b batch/9 0 1"}}},
		{"a payload differs", base, []ev{base[0], {"job/2", `{"n":20,"x":true}`}, base[2]}, want{a: 3, b: 3, divergent: 2, atA: "job/2", atB: "job/2",
			fields:  []string{"event_id", "hash", "payload.n", "payload.x"},
			summary: logdiff.Summary{Changed: 2}, streams: []string{"changed job/1 2 2", "changed job/2 1 1"}}},
		{"a stream only in a", []ev{base[0], {"attempt/5", `{}`}}, []ev{base[0]}, want{a: 2, b: 1, divergent: 2, atA: "attempt/5",
			fields:  []string{"actor", "event_id", "hash", "prev_hash", "recorded_at", "seq", "stream", "stream_version", "type", "schema_version"},
			summary: logdiff.Summary{Same: 1, OnlyA: 1}, streams: []string{"only_in_a attempt/5 1 0"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := logdiff.Compare(logdiff.Log{Read: source(chain(tc.a...))}, logdiff.Log{Read: source(chain(tc.b...))})
			if err != nil {
				t.Fatal(err)
			}
			w := tc.want
			if res.Identical != w.identical || res.EventsA != w.a || res.EventsB != w.b || res.FirstDivergent != w.divergent {
				t.Errorf("identical %v, events %d and %d, divergent at %d; want %v, %d and %d, %d",
					res.Identical, res.EventsA, res.EventsB, res.FirstDivergent, w.identical, w.a, w.b, w.divergent)
			}
			at := func(e *logdiff.Event) string {
				if e == nil {
					return ""
				}
				return e.Stream
			}
			if at(res.AtA) != w.atA || at(res.AtB) != w.atB {
				t.Errorf("at the divergence %q and %q, want %q and %q", at(res.AtA), at(res.AtB), w.atA, w.atB)
			}
			var fields []string
			for _, f := range res.Fields {
				fields = append(fields, f.Field)
			}
			slices.Sort(fields)
			slices.Sort(w.fields)
			if !slices.Equal(fields, w.fields) {
				t.Errorf("fields %v, want %v", fields, w.fields)
			}
			if res.Aggregates != w.summary {
				t.Errorf("aggregates %+v, want %+v", res.Aggregates, w.summary)
			}
			var streams []string
			for _, s := range res.Streams {
				streams = append(streams, fmt.Sprintf("%s %s %d %d", s.Status, s.Stream, s.A, s.B))
			}
			if !slices.Equal(streams, w.streams) || res.Streams == nil || res.Truncated {
				t.Errorf("streams %q (truncated %v), want %q", streams, res.Truncated, w.streams)
			}
		})
	}
}

// A field at the divergence holds each side's JSON, null where a side
// lacks it.
func TestCompare_FieldValues(t *testing.T) {
	a := chain(ev{"job/1", `{"n":1,"gone":"x"}`})
	b := chain(ev{"job/1", `{"n":2}`})
	res, err := logdiff.Compare(logdiff.Log{Read: source(a)}, logdiff.Log{Read: source(b)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range res.Fields {
		got[f.Field] = string(f.A) + " " + string(f.B)
	}
	if got["payload.n"] != "1 2" || got["payload.gone"] != `"x" null` {
		t.Errorf("payload fields %q", got)
	}
}

// Past MaxStreams differing aggregates the list stops and says so; the
// summary still counts them all.
func TestCompare_StreamsAreBounded(t *testing.T) {
	var b []ev
	for i := range logdiff.MaxStreams + 5 {
		b = append(b, ev{fmt.Sprintf("job/%05d", i), `{}`})
	}
	res, err := logdiff.Compare(logdiff.Log{Read: source(nil)}, logdiff.Log{Read: source(chain(b...))})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Streams) != logdiff.MaxStreams || !res.Truncated || res.Aggregates.OnlyB != logdiff.MaxStreams+5 {
		t.Errorf("%d streams listed, truncated %v, %d counted", len(res.Streams), res.Truncated, res.Aggregates.OnlyB)
	}
}

// Each side is read whole once, every event heard of, and a failing read
// is Compare's error.
func TestCompare_ReadsAndErrors(t *testing.T) {
	log := chain(ev{"job/1", `{}`}, ev{"job/1", `{}`})
	var na, nb int
	if _, err := logdiff.Compare(logdiff.Log{Read: source(log), OnRead: func() { na++ }}, logdiff.Log{Read: source(log[:1]), OnRead: func() { nb++ }}); err != nil {
		t.Fatal(err)
	}
	if na != 2 || nb != 1 {
		t.Errorf("heard of %d and %d events, want 2 and 1", na, nb)
	}
	broken := errors.New("damaged record")
	fail := func(uint64, func(events.Envelope) error) error { return broken }
	if _, err := logdiff.Compare(logdiff.Log{Read: source(log)}, logdiff.Log{Read: fail}); !errors.Is(err, broken) {
		t.Errorf("err %v, want %v", err, broken)
	}
}

// The result's JSON is events diff's --json shape (spec/cli.md).
func TestResultJSON(t *testing.T) {
	res, err := logdiff.Compare(logdiff.Log{Read: source(chain(ev{"job/1", `{"n":1}`}))}, logdiff.Log{Read: source(chain(ev{"job/1", `{"n":2}`}))})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	b, _ := json.Marshal(res)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	keys := slices.Sorted(maps.Keys(m))
	want := []string{"a_at_divergence", "aggregates", "b_at_divergence", "events_a", "events_b", "fields", "first_divergent_seq", "identical", "streams"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
}
