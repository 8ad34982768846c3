package query

import (
	"strconv"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
)

// CtxSession returns the session whose directory is dir, or nil.
func CtxSession(s engine.Reader, dir string) (*aggregate.CtxSession, error) {
	return engine.CtxSession(s, dir)
}

// CtxSessions lists one object's sessions of one scope and user in a
// tree, in no particular order.
func CtxSessions(s engine.Reader, root, object, scope string, uid int) ([]*aggregate.CtxSession, error) {
	prefix := root + "\x00" + object + "\x00" + scope + "\x00" + strconv.Itoa(uid) + "\x00"
	var out []*aggregate.CtxSession
	for _, r := range s.Scan(index.CtxSession, prefix) {
		c, err := CtxSession(s, r.ID)
		if err != nil {
			return nil, err
		}
		if c != nil {
			out = append(out, c)
		}
	}
	return out, nil
}

// AllCtxSessions calls fn for every recorded session.
func AllCtxSessions(s engine.Snapshot, fn func(*aggregate.CtxSession) error) error {
	return s.ForEach(events.KindCtxSession, func(st aggregate.State) error {
		if c, ok := st.(*aggregate.CtxSession); ok {
			return fn(c)
		}
		return nil
	})
}
