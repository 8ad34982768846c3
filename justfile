# cbth tasks. `just` is optional: every recipe is a plain command.

default: test

# Build cbth and its providers helper into ./bin, static (see README).
build:
    CGO_ENABLED=0 go build -o bin/cbth ./cmd/cbth
    CGO_ENABLED=0 go build -o bin/cbth-providers ./cmd/cbth-providers
    CGO_ENABLED=0 go build -o bin/cbth-providers-openai ./cmd/cbth-providers-openai
    CGO_ENABLED=0 go build -o bin/cbth-providers-anthropic ./cmd/cbth-providers-anthropic
    CGO_ENABLED=0 go build -o bin/cbth-providers-gemini ./cmd/cbth-providers-gemini

# Run every test (the README's command).
test:
    go test ./...

# Install the pinned Codex CLI the Codex adapter's tests run against (they
# do it themselves when it is missing; this only does it up front).
codex:
    cd fixtures/codex && npm ci --ignore-scripts --no-audit --no-fund

# The main job end to end in a private temporary home.
demo:
    go run ./cmd/cbth demo

# gofmt, go vet and staticcheck.
lint:
    test -z "$(gofmt -l $(git ls-files '*.go'))"
    go vet ./...
    staticcheck ./...

# Benchmarks with ratios against the physical limits measured in the same run.
bench:
    go test -run '^$' -bench . -benchtime 1x ./engine/ -args -bench.dur=2s
    go test -run '^$' -bench . -benchtime 1x ./engine/command/
    go test -run '^$' -bench . -benchtime 1x ./cmd/cbth/   # BenchmarkStartup: x_empty, x_sqlite; BenchmarkMCP; the submit floor
    go test -run '^$' -bench 'AgentSessionTurn' -benchtime 50x ./cmd/cbth/
    go test -run '^$' -bench 'BenchmarkWatch$' -benchtime 1x ./cmd/cbth/ -args -watch.secs=10   # a watcher: line to recorded update against grep --line-buffered; daemon CPU at 10,000 lines/s against cat > /dev/null
    go test -run '^$' -bench . -benchtime 100x ./adapters/cortexfs/runner/ ./adapters/cortexfs/socket/
    go test -run '^$' -bench HelperStart -benchtime 1x ./cmd/cbth-providers/
    go test -run '^$' -bench . -benchtime 20x ./adapters/codex/appserver/
    go test -run '^$' -bench . -benchtime 20x ./adapters/codex/sessions/
    go test -run '^$' -bench . -benchtime 20x ./adapters/desktop/relay/
    go test -run '^$' -bench . -benchtime 200x ./adapters/gateway/
    go test -run '^$' -bench GatewaySSHRoundTrip -benchtime 200x ./cmd/cbth/   # through a real sshd, against ssh HOST cat
    go test -run '^$' -bench StartSessions -benchtime 10x ./adapters/daemon/cortexmod/
    go test -run TestCLIDeliveryLatency -v ./cmd/cbth/ -args -cli.bench=100
    go test -run TestCodexDaemonLatency -v ./cmd/cbth/ -args -daemon.bench=50
    go test -run TestDesktopWakeMCPAgainstRelay -v ./cmd/cbth/ -args -desktop.bench=5

# Daemon start-up on a log of 1,000,000 events holding 100,000 open
# batches: time until it answers and peak RSS, against a bare bbolt scan.
bench-startup:
    go test -run 'StartupWithALargeLog' -v -timeout 60m ./cmd/cbth/ -args -startup.events=1000000 -startup.open=100000

# A batch inspection as of a past seq on a log of 1,000,000 events,
# against the same run's bare read of the events it folds (bound: 2x).
bench-asof:
    go test -run '^$' -bench 'AsOf' -benchtime 1x -timeout 60m ./engine/ -args -bench.asof=1000000

# Longer reliability runs: more kill -9 rounds (of the log, and of the real
# daemon under CLI load with deliveries, plus the storage-fault table), a
# bigger random replay, fuzzing.
soak:
    go test -count=1 -timeout 30m -v -run 'TestSoak' ./cmd/cbth/ -args -soak.rounds=30 -soak.procs=8 -soak.jobs=25 -soak.duration=15m
    go test -run 'CrashRecovery' ./engine/ -args -crash.runs=500
    go test -run 'ReplayEquality' ./engine/ -args -steps=1000000
    go test -run '^$' -fuzz FuzzDecode -fuzztime 2m ./events/
    go test -run '^$' -fuzz FuzzReadFrame -fuzztime 30s ./adapters/ipc/
    go test -run '^$' -fuzz FuzzParseRequest -fuzztime 30s ./adapters/cortexfs/socket/
    go test -run '^$' -fuzz FuzzDecode -fuzztime 30s ./adapters/codex/appserver/
    go test -run '^$' -fuzz FuzzLineReader -fuzztime 30s ./adapters/codex/appserver/
    go test -run '^$' -fuzz FuzzDecode -fuzztime 30s ./adapters/gateway/envelope/
    just desktop-random

# The seeded randomized Desktop writeback run at full length (go test runs
# 300 steps).
desktop-random seed="0":
    go test -count=1 -run 'TestDesktopWritebackRandomized' -v ./engine/command/desktop/ -args -desktop-steps=1000 -seed={{seed}}
