package events

// ---- watchers: tasks whose output lines wake their thread (spec/tasks.md, "Watchers") ----

// TaskWatch makes a task a watcher: each line of its output that matches
// one of Patterns becomes an update for the job's thread, at most
// WakesPerHour of them in any hour of the engine clock; the command's end
// is a final update, whatever its status. No pattern: only the end wakes.
type TaskWatch struct {
	// Patterns are regular expressions (Go's RE2 syntax), matched
	// against each line without its end.
	Patterns     []string `json:"wake_on,omitempty"`
	WakesPerHour int      `json:"wakes_per_hour"`
	// LineMax bounds a line: a longer one is matched and recorded on its
	// first LineMax bytes.
	LineMax int `json:"line_max"`
}

// TaskLine is one matching line of a watcher's output.
type TaskLine struct {
	// Line is its number in the output, from 1.
	Line int64 `json:"line"`
	// Pattern is the index in wake_on of the first pattern it matched.
	Pattern int    `json:"pattern"`
	Text    string `json:"text"`
	// Cut: the line was longer than line_max.
	Cut bool `json:"cut,omitempty"`
}

// ShownLines is how many of the last lines a TaskMatches keeps beside
// its first: the "last few" of matches folded together.
const ShownLines = 3

// TaskMatches are matching lines taken together: how many, the first and
// the last few (Lines holds the first, then up to ShownLines of the last
// ones, in output order; all of them when there are no more).
type TaskMatches struct {
	Count int64      `json:"count"`
	Lines []TaskLine `json:"lines"`
}

// Add returns m followed by o: the counts added, the first line of both
// first, then the last ShownLines other lines. m and o are left as they
// were. It takes any value a log may hold (a count without lines too).
func (m TaskMatches) Add(o TaskMatches) TaskMatches {
	all := append(append([]TaskLine(nil), m.Lines...), o.Lines...)
	out := TaskMatches{Count: m.Count + o.Count}
	if len(all) > 0 {
		rest := all[1:]
		if len(rest) > ShownLines {
			rest = rest[len(rest)-ShownLines:]
		}
		out.Lines = append([]TaskLine{all[0]}, rest...)
	}
	return out
}

// TaskMatched records matching lines a watcher saw when the hour's bound
// let it wake no more: they are folded into its next update (the next
// wake the bound allows, or the final one).
type TaskMatched struct {
	TaskMatches
}

const TypeTaskMatched = "task.matched"

func (TaskMatched) EventType() string { return TypeTaskMatched }

// TaskWoke records an update of a watcher: the matching lines it carries
// (those just seen and every one folded before), and the update's job,
// submitted and made ready in the same append, so the thread's FIFO takes
// it as any other result.
type TaskWoke struct {
	// Update is the wake's number, from 1.
	Update int    `json:"update"`
	JobID  string `json:"job_id"`
	// Cause is "match" (a line just seen) or "slot" (an hour after an
	// earlier wake, the bound let matches folded since go).
	Cause string `json:"cause"`
	TaskMatches
}

const TypeTaskWoke = "task.woke"

func (TaskWoke) EventType() string { return TypeTaskWoke }

// The causes of a wake.
const (
	WakeMatch = "match"
	WakeSlot  = "slot"
)
