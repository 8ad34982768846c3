package engine

// The log: appends, the hash chain that links each record to the one
// before it, and the records stored under their seqs (spec/engine.md,
// "Stored record", "Appends").

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	bolt "go.etcd.io/bbolt"
)

// Log buckets. Unlike the projection buckets these are the source of truth.
var (
	bucketLog = []byte("log") // seq -> record
)

// Append appends payloads to one stream if its current version equals
// expected (AnyVersion skips the check). A mismatch returns an ECONFLICT
// error and appends nothing.
func (e *Engine) Append(ctx context.Context, meta Meta, stream events.StreamID, expected uint64, payloads ...events.Payload) (Result, error) {
	emits := make([]Emit, len(payloads))
	enc := make([]encoded, len(payloads))
	for i, p := range payloads {
		emits[i] = Emit{Stream: stream, Payload: p}
		// Encoding needs no state, so the caller does it, on its own
		// core, before queueing; the writer only decides and stores.
		var err error
		if enc[i], err = encode(emits[i]); err != nil {
			return Result{}, err
		}
	}
	return e.submit(ctx, &request{meta: meta, emits: emits, enc: enc, stream: stream, expected: expected})
}

// encoded is an event payload in its stored form, and decoded back from
// that form: the value replay will see.
type encoded struct {
	raw     []byte
	schema  uint16
	payload events.Payload
}

func encode(em Emit) (encoded, error) {
	typ := em.Payload.EventType()
	if k, ok := events.KindOf(typ); !ok || k != em.Stream.Kind {
		return encoded{}, errs.New(errs.EINTERNAL, "event %s does not belong to stream %s", typ, em.Stream)
	}
	raw, err := events.MarshalPayload(em.Payload)
	if err != nil {
		return encoded{}, errs.Wrap(errs.EINTERNAL, err, "encode %s", typ)
	}
	enc := encoded{raw: raw, schema: events.SchemaOf(typ)}
	// Apply what replay will see: the decoded payload, not the value the
	// command built.
	if enc.payload, err = events.DecodePayload(&events.Envelope{Type: typ, Schema: enc.schema, Payload: raw}); err != nil {
		return encoded{}, errs.Wrap(errs.EINTERNAL, err, "re-decode %s", typ)
	}
	return enc, nil
}

// acknowledge records the head just committed in the acknowledged-head
// file. Failing to is logged, not returned: the commit is durable, and
// the file may lag.
func (e *Engine) acknowledge() {
	if e.lastSeq == e.ack.seq {
		return
	}
	if err := e.ack.write(Ack{Seq: e.lastSeq, Hash: e.lastHash}); err != nil {
		e.log.Error("record the acknowledged head", "path", AckPath(e.path), "err", err)
	}
}

func (w *txWriter) put(env *events.Envelope, rec []byte) error {
	if err := w.putRecord(env, rec); err != nil {
		return err
	}
	if err := w.ptx.PutStreamSeq(env.Stream, env.Seq); err != nil {
		return err
	}
	if env.CommandID != "" {
		return w.ptx.PutCommand(env.CommandID, env.Seq)
	}
	return nil
}

// readRange decodes log records first..last, keeping those of commandID.
func readRange(tx *bolt.Tx, first, last uint64, commandID string) ([]events.Envelope, error) {
	var out []events.Envelope
	c := tx.Bucket(bucketLog).Cursor()
	for k, v := c.Seek(binary.BigEndian.AppendUint64(nil, first)); k != nil && binary.BigEndian.Uint64(k) <= last; k, v = c.Next() {
		env, err := events.Decode(v)
		if err != nil {
			return nil, errs.Wrap(errs.ECORRUPT, err, "seq %d", binary.BigEndian.Uint64(k))
		}
		if env.CommandID == commandID {
			out = append(out, env)
		}
	}
	return out, nil
}

// chain links envs to the head of the log (each one's prev_hash is the
// hash before it), encodes each record, which sets its hash, and stores
// it; the head moves with each.
func (w *txWriter) chain(envs []events.Envelope) error {
	for i := range envs {
		env := &envs[i]
		env.PrevHash = w.e.lastHash
		rec := events.Encode(env) // also sets env.Hash
		if err := w.put(env, rec); err != nil {
			return err
		}
		w.e.lastSeq, w.e.lastHash = env.Seq, env.Hash
	}
	return nil
}

// putRaw stores an imported envelope whose hash must survive re-encoding.
func (w *txWriter) putRaw(env *events.Envelope) error {
	want := env.Hash
	rec := events.Encode(env)
	if env.Hash != want {
		return fmt.Errorf("seq %d: re-encoded hash differs", env.Seq)
	}
	return w.putRecord(env, rec)
}

// putRecord stores a record under its seq.
func (w *txWriter) putRecord(env *events.Envelope, rec []byte) error {
	b := w.tx.Bucket(bucketLog)
	b.FillPercent = 1.0 // seqs only grow: fill each leaf before splitting
	return b.Put(binary.BigEndian.AppendUint64(nil, env.Seq), rec)
}
