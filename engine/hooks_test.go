package engine

import (
	"context"

	"github.com/cbth-dev/cbth/events"
	bolt "go.etcd.io/bbolt"
)

// Hooks into the engine's insides for its tests in package engine_test:
// those open engines with the bbolt projections (package projections),
// which import this package, so they cannot be internal tests.

const (
	AckSlot  = ackSlot
	MaxCache = maxCache
)

var BucketLog, BucketReserve = bucketLog, bucketReserve

// LogPath is the path of e's log file.
func LogPath(e *Engine) string { return e.path }

// LastHash is the hash of e's last committed record.
func LastHash(e *Engine) events.Hash { return e.lastHash }

// EncodeAck is the stored form of one slot of the acknowledged head.
func EncodeAck(a Ack) []byte { return a.encode() }

// Exclusive runs fn in its own write transaction inside the writer.
func Exclusive(e *Engine, ctx context.Context, fn func(tx *bolt.Tx) error) error {
	return e.exclusive(ctx, fn)
}

// Queued is how many requests wait for the writer.
func Queued(e *Engine) int { return e.queued() }

// CacheLen is how many committed states the writer caches.
func CacheLen(e *Engine) int { return len(e.cache) }

// Cached reports whether the writer caches sid's state.
func Cached(e *Engine, sid events.StreamID) bool {
	_, ok := e.cache[sid]
	return ok
}
