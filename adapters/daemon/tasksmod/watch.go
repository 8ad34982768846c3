package tasksmod

import (
	"context"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/task"
	"github.com/cbth-dev/cbth/engine"
	taskcmd "github.com/cbth-dev/cbth/engine/command/task"
	"github.com/cbth-dev/cbth/events"
)

// A watcher's matches on their way to the log (spec/tasks.md,
// "Watchers"). The task's output goroutine hands each matching line to
// match, which never blocks; the watcher's own goroutine records what
// gathered since its last record (task.MatchTask), at once: a line that
// wakes the thread is in the log, with its update ready, one append after
// it was read. While the hour's bound folds lines, a record is made at
// most every foldEvery, so a flood costs at most one event a second; the
// daemon's tick (and its sweep, on a manual clock) asks the watcher to
// wake once the bound allows it again. Nothing here decides: the log's
// times do (MatchTask).
type watcher struct {
	m  *Module
	id string

	mu       sync.Mutex
	pending  events.TaskMatches // seen, not yet recorded
	waits    bool               // folded lines wait in the log for a wake...
	nextWake time.Time          // ...the earliest at this engine time

	record  sync.Mutex // one record at a time
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	started bool // run was started (once the task's start is recorded)
}

// foldEvery spaces the records of lines the bound folds.
const foldEvery = time.Second

func (m *Module) newWatcher(id string) *watcher {
	return &watcher{m: m, id: id, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// lineWatch is the matcher the task's output goes through; nil for a
// watcher without patterns (only its end wakes).
func (w *watcher) lineWatch(tw *events.TaskWatch) (*task.LineWatch, error) {
	if len(tw.Patterns) == 0 {
		return nil, nil
	}
	res, err := taskcmd.Compile(tw.Patterns)
	if err != nil {
		return nil, err
	}
	return &task.LineWatch{Patterns: res, LineMax: tw.LineMax, Match: w.match}, nil
}

// match takes a matching line, on the task's output goroutine.
func (w *watcher) match(l events.TaskLine) {
	w.mu.Lock()
	w.pending = w.pending.Add(events.TaskMatches{Count: 1, Lines: []events.TaskLine{l}})
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// start records matches from now on: the task's start is recorded.
func (w *watcher) start(ctx context.Context) {
	w.started = true
	go w.run(ctx)
}

// run records matches as they come until close.
func (w *watcher) run(ctx context.Context) {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			return
		case <-w.kick:
		}
		if w.flush(ctx, false) != taskcmd.OutcomeFolded {
			continue
		}
		select {
		case <-w.stop:
			return
		case <-time.After(foldEvery):
		}
	}
}

// close records what is left, once the task's output is read to its end.
func (w *watcher) close(ctx context.Context) {
	close(w.stop)
	if !w.started {
		// The task's start was not recorded: the log can take no match.
		return
	}
	<-w.done
	w.flush(ctx, false)
}

// due reports whether folded lines may wake the thread at now.
func (w *watcher) due(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waits && !now.Before(w.nextWake)
}

// flush records the matches gathered; slot also asks for the update of
// the folded ones when no new line came. A wake asks for a scheduling
// pass once the record is made.
func (w *watcher) flush(ctx context.Context, slot bool) engine.Outcome {
	out := w.record1(ctx, slot)
	if out == taskcmd.OutcomeWoke {
		// Outside the record's lock: a pass on a manual clock sweeps,
		// and the sweep asks the watchers again (wakeDue).
		w.m.h.Poke(ctx)
	}
	return out
}

// record1 makes one record, if there is anything to record.
func (w *watcher) record1(ctx context.Context, slot bool) engine.Outcome {
	w.record.Lock()
	defer w.record.Unlock()
	w.mu.Lock()
	got, waits := w.pending, w.waits
	w.pending = events.TaskMatches{}
	w.mu.Unlock()
	if got.Count == 0 && !(slot && waits) {
		return ""
	}
	st, res, err := engine.Exec[taskcmd.WatchState](ctx, w.m.h.Eng, w.m.taskMeta(w.id),
		taskcmd.MatchTask{Config: w.m.h.DeliveryConfig(), TaskID: w.id, Matches: got})
	if err != nil {
		w.m.h.Log.Error("record a watcher's matches", "task", w.id, "lines", got.Count, "err", err)
		return ""
	}
	w.mu.Lock()
	w.waits, w.nextWake = st.Waits, st.NextWake
	w.mu.Unlock()
	return res.Outcome
}

// wakeDue lets every watcher whose folded lines the hour's bound allows
// again make its update. The daemon calls it at each tick and after each
// sweep (a manual clock moves only then).
func (m *Module) wakeDue(ctx context.Context) {
	now := m.h.Clock.Now()
	m.mu.Lock()
	var due []*watcher
	for _, r := range m.running {
		if r.w != nil && r.w.due(now) {
			due = append(due, r.w)
		}
	}
	m.mu.Unlock()
	for _, w := range due {
		w.flush(ctx, true)
	}
}

// Tick implements daemon.Ticker.
func (m *Module) Tick(ctx context.Context) { m.wakeDue(ctx) }

// Swept implements daemon.Swept.
func (m *Module) Swept(ctx context.Context) { m.wakeDue(ctx) }
