// Package index names the secondary indexes and deadline kinds that the
// aggregate states derive, and is the one place their keys are encoded
// and parsed. States build keys with it; readers (commands, queries) find
// and take keys apart with it, never by byte offset.
//
// A key that holds a time or a sequence number holds it as 8 big-endian
// bytes, so keys sort in time or log order.
package index

import (
	"encoding/binary"
	"strconv"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/events"
)

// Ref names one aggregate found through an index: the entry's key and
// the aggregate that holds it.
type Ref struct {
	Key  string
	Kind events.Kind
	ID   string
}

// Due is one entry of the deadline index: when, whose, and which kind of
// work (one of the Due* kinds below).
type Due struct {
	At   time.Time
	Kind events.Kind
	ID   string
	Name string
}

// Secondary indexes.
const (
	Dedupe        = "job.dedupe"     // dedupe key -> job
	JobThread     = "job.thread"     // source thread -> its jobs
	ThreadOpen    = "thread.open"    // thread \0 opened seq -> open batch (the thread's FIFO)
	ThreadLive    = "thread.attempt" // thread -> its non-terminal attempt
	ThreadSends   = "thread.sends"   // thread \0 accepted at -> attempt
	Head          = "batch.head"     // target \0 first ready at, thread -> open head batch
	Parked        = "batch.parked"   // "" -> open batches waiting for manual resolution
	BatchAttempts = "batch.attempts" // batch -> its attempts
	// BatchThread holds every batch, open or closed, under its thread
	// and opening seq (ThreadOpenKey): a thread's whole history in FIFO
	// order, and the batches a past moment's FIFO is found among.
	BatchThread      = "batch.thread"
	Tracking         = "attempt.tracking"
	BindingByThread  = "binding.thread"    // source thread -> binding
	SessionByThread  = "session.thread"    // bound thread -> non-retired session
	AppServerRunning = "appserver.running" // "" -> the running app-server instance
	CtxSession       = "ctxsession.dir"    // root \0 object \0 scope \0 uid \0 name -> ctx session
	// Desktop: a bound or degraded binding by its caller automation, and
	// one armed for a generation not yet quiesced by its pause_not_before.
	BindingByAutomation = "binding.automation"
	BindingUnquiesced   = "binding.unquiesced"
	// RelayMarker finds the attempt a transcript-relay marker was issued for.
	RelayMarker = "attempt.relay_marker"
	// BindingRelayMarker finds the binding a pause-proof marker was
	// issued for.
	BindingRelayMarker = "binding.relay_marker"

	TaskJob  = "task.job"  // job -> the task that runs it
	TaskLive = "task.live" // "" -> tasks queued, running or stopping
)

// Deadline kinds: the work the overdue sweep does when one falls due.
// Every kind a state can emit is listed here and handled by the sweep.
const (
	DueRedeliveryWindow = "batch.redelivery_window" // close the batch (window exhausted or manual expired)
	DueMaxAttempts      = "batch.cooldown"          // close the batch once the last counted attempt cooled down
	DueParkHook         = "batch.park_hook"         // run the operator's park hook
	DueRecoveryGC       = "batch.recovery_gc"       // Desktop boundary recovery envelope retention
	DueObservation      = "attempt.observation"     // the accepted turn was not seen completing: park
	DueArmPending       = "attempt.arm_pending"     // Desktop arm barrier deadline
	DueAttemptPause     = "attempt.pause"           // Desktop caller heartbeat pause deadline
	DueBindingPause     = "binding.pause"           // Desktop binding pause deadline
	DueArtifactGC       = "artifact.gc"             // collect the artifact's files
	DueJobTimeout       = "job.timeout"             // a job never reported: fail it
	// DueQueueValidation: a live validation of Desktop's queue transport
	// saw no drain by its deadline: it fails.
	DueQueueValidation = "installation.queue_validation"
)

// DueKinds lists every deadline kind, for tests that check the sweep
// handles each one.
var DueKinds = []string{
	DueRedeliveryWindow, DueMaxAttempts, DueParkHook, DueRecoveryGC, DueObservation,
	DueArmPending, DueAttemptPause, DueBindingPause, DueArtifactGC, DueJobTimeout, DueQueueValidation,
}

// Time renders t as 8 bytes that sort in time order.
func Time(t time.Time) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t.UnixNano()))
	return string(b[:])
}

// ParseTime reads a time rendered by Time.
func ParseTime(k string) (time.Time, bool) {
	if len(k) != 8 {
		return time.Time{}, false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64([]byte(k)))).UTC(), true
}

func seq(n uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return string(b[:])
}

// ThreadPrefix is the prefix of every key of one thread in ThreadOpen and
// ThreadSends. A thread id never contains NUL, so no other thread's keys
// share it.
func ThreadPrefix(thread string) string { return thread + "\x00" }

// ThreadOpenKey is an open batch's key in ThreadOpen: its thread, then
// the seq it opened at, so a thread's batches sort in FIFO order.
func ThreadOpenKey(thread string, openedSeq uint64) string {
	return ThreadPrefix(thread) + seq(openedSeq)
}

// ThreadOpenSeq parses a ThreadOpen key of thread; ok is false for a key
// of any other thread.
func ThreadOpenSeq(key, thread string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, ThreadPrefix(thread))
	if !ok || len(rest) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64([]byte(rest)), true
}

// SendKey is an accepted attempt's key in ThreadSends.
func SendKey(thread string, acceptedAt time.Time) string {
	return ThreadPrefix(thread) + Time(acceptedAt)
}

// SendTime parses a ThreadSends key of thread.
func SendTime(key, thread string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(key, ThreadPrefix(thread))
	if !ok {
		return time.Time{}, false
	}
	return ParseTime(rest)
}

// HeadPrefix is the prefix of every head batch key of one target.
func HeadPrefix(target events.Target) string { return string(target) + "\x00" }

// HeadKey is a head batch's key in Head. Within a target the keys sort in
// the canonical fair-ready order: first ready time, then thread id.
func HeadKey(target events.Target, firstReadyAt time.Time, thread string) string {
	return HeadPrefix(target) + Time(firstReadyAt) + thread
}

// ParseHead parses a Head key of target.
func ParseHead(key string, target events.Target) (firstReadyAt time.Time, thread string, ok bool) {
	rest, ok := strings.CutPrefix(key, HeadPrefix(target))
	if !ok || len(rest) < 8 {
		return time.Time{}, "", false
	}
	at, _ := ParseTime(rest[:8])
	return at, rest[8:], true
}

// TrackingKey is a tracking attempt's key in Tracking: its observation
// deadline, so the latest sorts last.
func TrackingKey(deadline time.Time) string { return Time(deadline) }

// CtxSessionKey is a ctx session directory's key in CtxSession.
func CtxSessionKey(root, object, scope string, uid int, name string) string {
	return root + "\x00" + object + "\x00" + scope + "\x00" + strconv.Itoa(uid) + "\x00" + name
}

// EntryKey is how an index entry is stored: index \0 key \0 kind \0 id.
// Entries sort by index, then key, then aggregate, which is the order
// Lookup and Scan answer in.
func EntryKey(idx string, r Ref) string {
	return idx + "\x00" + r.Key + "\x00" + string(r.Kind) + "\x00" + r.ID
}

// EntryPrefix is what the stored keys of idx's entries whose key starts
// with keyPrefix begin with: a Scan's range; keyPrefix + "\x00" is a
// Lookup's (the key exactly).
func EntryPrefix(idx, keyPrefix string) string { return idx + "\x00" + keyPrefix }

// ParseEntryKey reads a stored index entry back. The key may itself
// hold NULs; the kind and id never do.
func ParseEntryKey(k string) (Ref, bool) {
	parts := strings.Split(k, "\x00")
	n := len(parts)
	if n < 4 {
		return Ref{}, false
	}
	return Ref{Key: strings.Join(parts[1:n-2], "\x00"), Kind: events.Kind(parts[n-2]), ID: parts[n-1]}, true
}

// DueKey is how a deadline is stored: when (8 bytes, big-endian unix
// nanoseconds), then kind \0 id \0 name, so deadlines sort in due order.
func DueKey(d Due) string {
	return string(binary.BigEndian.AppendUint64(nil, uint64(d.At.UnixNano()))) + string(d.Kind) + "\x00" + d.ID + "\x00" + d.Name
}

// ParseDueKey reads a stored deadline back.
func ParseDueKey(k string) (Due, bool) {
	if len(k) < 8 {
		return Due{}, false
	}
	parts := strings.SplitN(k[8:], "\x00", 3)
	if len(parts) != 3 {
		return Due{}, false
	}
	return Due{At: time.Unix(0, int64(binary.BigEndian.Uint64([]byte(k[:8])))).UTC(), Kind: events.Kind(parts[0]), ID: parts[1], Name: parts[2]}, true
}
