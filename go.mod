module github.com/cbth-dev/cbth

go 1.26.8

require (
	github.com/google/uuid v1.6.0
	github.com/looplab/fsm v1.0.3
)

require (
	github.com/BurntSushi/toml v1.6.0 // indirect
	go.etcd.io/bbolt v1.5.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
)
