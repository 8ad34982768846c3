package desktopsim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The trace check flags every way out of a heartbeat sandbox and nothing
// a pure reader does.
func TestCheck(t *testing.T) {
	home := "/h/.cbth"
	lines := map[string]bool{ // line -> a violation
		`100 execve("/bin/cbth", ["cbth"], 0x0 /* 3 vars */) = 0`:                                                       false,
		`100 openat(AT_FDCWD, "/h/.cbth/inbox/current-snapshot.json", O_RDONLY|O_CLOEXEC|O_NONBLOCK) = 3`:               false,
		`100 openat2(3, "snapshots/1/ready-threads.json", {flags=O_RDONLY|O_CLOEXEC, resolve=RESOLVE_BENEATH}, 24) = 4`: false,
		`101 clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM}, 88) = 102`:          false,
		`100 fcntl(1, F_GETFL) = 0x8001 (flags O_WRONLY|O_LARGEFILE)`:                                                   false,
		`100 openat(AT_FDCWD, "/h/.cbth/cbth.db", O_RDONLY|O_CLOEXEC) = 3`:                                              true,
		`100 openat(AT_FDCWD, "/h/.cbth/run/daemon.lock", O_RDWR|O_CREAT|O_CLOEXEC, 0600) = -1 EROFS`:                   true,
		`100 openat(AT_FDCWD, "/tmp/x", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0666) = 3`:                                  true,
		`[pid   103] connect(3, {sa_family=AF_UNIX, sun_path="/h/.cbth/run/cbth.sock"}, 27) = -1 ENOENT`:                true,
		`100 socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC|SOCK_NONBLOCK, 0) = 3`:                                            true,
		`100 flock(3, LOCK_EX|LOCK_NB) = 0`:                                                                             true,
		`100 fcntl(3, F_SETLK, {l_type=F_WRLCK}) = 0`:                                                                   true,
		`100 fchmodat(AT_FDCWD, "/h/.cbth", 0700) = -1 EPERM`:                                                           true,
		`100 mkdirat(AT_FDCWD, "/h/.cbth/inbox", 0700) = -1 EROFS`:                                                      true,
		`100 renameat(AT_FDCWD, "a", AT_FDCWD, "b") = 0`:                                                                true,
		`100 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD) = 104`:                      true,
		`100 execve("/bin/cbth", ["cbth", "daemon", "run"], 0x0 /* 3 vars */) = 0`:                                      true,
	}
	var text []string
	want := 0
	for l, bad := range lines {
		text = append(text, l)
		if bad {
			want++
		}
	}
	// The first exec is the command's own; put it first.
	for i, l := range text {
		if strings.Contains(l, `["cbth"]`) {
			text[0], text[i] = text[i], text[0]
		}
	}
	path := filepath.Join(t.TempDir(), "trace")
	if err := os.WriteFile(path, []byte(strings.Join(text, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, calls, err := check(path, home, nil)
	if err != nil {
		t.Fatal(err)
	}
	if calls != len(lines) || len(v) != want {
		t.Fatalf("%d calls, %d violations, want %d and %d:\n%s", calls, len(v), len(lines), want, strings.Join(v, "\n"))
	}
	for _, l := range v {
		if !lines[l] {
			t.Errorf("flagged: %s", l)
		}
	}
}

// A call strace splits across two lines (another thread ran between) is
// judged whole: its result decides an Allow that reads "= -1".
func TestCheckJoinsInterruptedCalls(t *testing.T) {
	home := "/h/.cbth"
	trace := strings.Join([]string{
		`100 execve("/bin/cbth", ["cbth"], 0x0 /* 3 vars */) = 0`,
		`6870  connect(5, {sa_family=AF_UNIX, sun_path="/h/.cbth/run/cbth.sock"}, 83 <unfinished ...>`,
		`6871  openat(AT_FDCWD, "/h/.cbth/inbox/x", O_RDONLY|O_CLOEXEC) = 3`,
		`6870  <... connect resumed>) = -1 ENOENT (No such file or directory)`,
		`6872  flock(3, LOCK_EX <unfinished ...>`,
	}, "\n") + "\n"
	path := filepath.Join(t.TempDir(), "trace")
	if err := os.WriteFile(path, []byte(trace), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := func(name, line string) bool { return name == "connect" && strings.Contains(line, "= -1") }
	v, calls, err := check(path, home, refused)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 4 || len(v) != 1 || !strings.HasPrefix(v[0], "6872  flock(") {
		t.Fatalf("%d calls, violations %q; want 4 calls and only the never-resumed flock", calls, v)
	}
}
