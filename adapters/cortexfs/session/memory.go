package session

import (
	"encoding/json"
	"sync"

	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Memory keeps temp sessions: in process memory only, never on disk and
// never in the log, gone with the server that holds them.
type Memory struct {
	mu   sync.Mutex
	sess map[string]*memSession
}

type memSession struct {
	events   [][]byte
	messages []Record
}

func (m *Memory) get(sess string) *memSession {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sess == nil {
		m.sess = map[string]*memSession{}
	}
	s := m.sess[sess]
	if s == nil {
		s = &memSession{}
		m.sess[sess] = s
	}
	return s
}

// Ensure implements Store.
func (m *Memory) Ensure(sess string, _ Open) error { m.get(sess); return nil }

// AppendEvent implements Store.
func (m *Memory) AppendEvent(sess string, line []byte) error {
	s := m.get(sess)
	m.mu.Lock()
	defer m.mu.Unlock()
	s.events = append(s.events, append([]byte(nil), line...))
	return nil
}

// Events implements Store.
func (m *Memory) Events(sess string, after uint64, fn func(uint64, stream.Event) error) error {
	s := m.get(sess)
	m.mu.Lock()
	lines := append([][]byte(nil), s.events...)
	m.mu.Unlock()
	for _, l := range lines {
		var e stream.Event
		if err := json.Unmarshal(l, &e); err != nil {
			return errs.Wrap(errs.ECORRUPT, err, "event")
		}
		seq, err := Seq(e.ID)
		if err != nil {
			return err
		}
		if seq > after {
			if err := fn(seq, e); err != nil {
				return err
			}
		}
	}
	return nil
}

// LastSeq implements Store.
func (m *Memory) LastSeq(sess string) (uint64, error) { return lastSeq(m, sess) }

// AppendMessage implements Store.
func (m *Memory) AppendMessage(sess string, r Record) error {
	s := m.get(sess)
	m.mu.Lock()
	defer m.mu.Unlock()
	s.messages = append(s.messages, r)
	return nil
}

// Messages implements Store.
func (m *Memory) Messages(sess string) ([]Record, error) {
	s := m.get(sess)
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Record(nil), s.messages...), nil
}

// SetState implements Store.
func (m *Memory) SetState(string, fsm.CtxSessionState) error { return nil }

// SetLatest implements Store.
func (m *Memory) SetLatest(string, string) error { return nil }
