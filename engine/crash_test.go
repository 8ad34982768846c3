package engine_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/projections"
	"github.com/google/uuid"
)

var crashRuns = flag.Int("crash.runs", 50, "SIGKILL rounds in TestCrashRecovery")

// The crash child: appends from several goroutines in a loop and prints
// "seq event-id" for every event whose Append returned, i.e. every event
// the log acknowledged as durable.
func init() {
	dir := os.Getenv("CBTH_CRASH_CHILD")
	if dir == "" {
		return
	}
	round, _ := strconv.Atoi(os.Getenv("CBTH_CRASH_ROUND"))
	e, err := engine.Open(filepath.Join(dir, "cbth.db"), engine.Options{Projections: projections.Store{}, LockTimeout: 10 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			g := enginetest.NewGenerator(uint64(round*10+w), fmt.Sprintf("r%d-w%d-", round, w))
			for {
				s := g.Next()
				res, err := e.Append(context.Background(), engine.Meta{Actor: events.ActorCLI}, s.Stream, s.Expected, s.Payload)
				if err != nil {
					fmt.Fprintln(os.Stderr, "child append:", err)
					os.Exit(4)
				}
				s.Commit()
				mu.Lock()
				for _, env := range res.Events {
					fmt.Fprintf(out, "%d %s\n", env.Seq, env.ID)
				}
				out.Flush()
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
}

// Crash test: a child appends in a loop and reports each acknowledged
// event over a pipe; the parent SIGKILLs it at seeded random moments. After
// each kill the log must reopen, verify clean, hold every acknowledged
// event, and have projections equal to a rebuild.
func TestCrashRecovery(t *testing.T) {
	s := seed(t)
	rnd := rand.New(rand.NewPCG(s, s))
	runs := *crashRuns
	if testing.Short() {
		runs = 5
	}
	dir := t.TempDir()
	acked := map[uint64]uuid.UUID{}
	for round := 0; round < runs; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "CBTH_CRASH_CHILD="+dir, fmt.Sprintf("CBTH_CRASH_ROUND=%d", round))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Kill after a random number of acknowledgements, or a random
		// time, whichever comes first: both land in the middle of writes.
		wantAcks := 1 + rnd.IntN(400)
		timer := time.NewTimer(time.Duration(20+rnd.IntN(200)) * time.Millisecond)
		n := 0
	collect:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					break collect
				}
				record(t, acked, l)
				if n++; n >= wantAcks {
					break collect
				}
			case <-timer.C:
				break collect
			}
		}
		timer.Stop()
		cmd.Process.Signal(syscall.SIGKILL)
		for l := range lines {
			record(t, acked, l)
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: child ended with %v before the kill", round, err)
		}

		e, err := engine.Open(filepath.Join(dir, "cbth.db"), engine.Options{Projections: projections.Store{}})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		rep, err := e.Verify(context.Background())
		if err != nil || !rep.OK() {
			e.Close()
			t.Fatalf("round %d: verify: %v %+v", round, err, rep.Problems)
		}
		found := map[uint64]uuid.UUID{}
		if err := e.ReadFrom(1, func(env events.Envelope) error { found[env.Seq] = uuid.UUID(env.ID); return nil }); err != nil {
			t.Fatal(err)
		}
		for seq, id := range acked {
			if found[seq] != id {
				e.Close()
				t.Fatalf("round %d: acknowledged seq %d (%s) is missing or different after the crash (got %s)", round, seq, id, found[seq])
			}
		}
		live := image(t, e)
		replayed, _, err := e.ReplayImage(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if d := engine.Diff(live, replayed, 5); len(d) > 0 {
			e.Close()
			t.Fatalf("round %d: projections differ from a rebuild: %v", round, d)
		}
		e.Close()
	}
	if len(acked) == 0 {
		t.Fatal("no append was ever acknowledged: the test exercised nothing")
	}
	t.Logf("%d rounds, %d acknowledged events survived", runs, len(acked))
}

func record(t *testing.T, acked map[uint64]uuid.UUID, line string) {
	seqStr, idStr, ok := strings.Cut(line, " ")
	if !ok {
		t.Fatalf("bad child line %q", line)
	}
	seq, err := strconv.ParseUint(seqStr, 10, 64)
	if err != nil {
		t.Fatalf("bad child line %q", line)
	}
	acked[seq] = uuid.MustParse(idStr)
}
