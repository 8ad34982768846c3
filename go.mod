module github.com/cbth-dev/cbth

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/alecthomas/kong v1.17.0
	github.com/google/uuid v1.6.0
	github.com/looplab/fsm v1.0.3
	go.etcd.io/bbolt v1.5.0
	golang.org/x/sys v0.45.0
)
