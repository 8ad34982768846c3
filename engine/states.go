package engine

import (
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The typed getters: one per aggregate, each answering its own state type
// (nil when the aggregate does not exist). They sit beside Reader, below
// the commands and engine/query alike, so deciders, read queries,
// projections and adapters all read a state as its type without
// asserting it themselves; a stored state of another type is ECORRUPT,
// never a panic or a silent nil. TestNoStateAssertionsOutsideTheGetters
// keeps assertions on aggregate states here and in engine/query.

func get[T aggregate.State](r Reader, k events.Kind, id string) (T, error) {
	var zero T
	st, err := r.State(k, id)
	if err != nil || st == nil {
		return zero, err
	}
	t, ok := st.(T)
	if !ok {
		return zero, errs.New(errs.ECORRUPT, "%s %s holds a %T state", k, id, st)
	}
	return t, nil
}

// Job returns job id, nil if there is none.
func Job(r Reader, id string) (*aggregate.Job, error) {
	return get[*aggregate.Job](r, events.KindJob, id)
}

// Batch returns batch id, nil if there is none.
func Batch(r Reader, id string) (*aggregate.Batch, error) {
	return get[*aggregate.Batch](r, events.KindBatch, id)
}

// Attempt returns attempt id, nil if there is none.
func Attempt(r Reader, id string) (*aggregate.Attempt, error) {
	return get[*aggregate.Attempt](r, events.KindAttempt, id)
}

// Artifact returns artifact id, nil if there is none.
func Artifact(r Reader, id string) (*aggregate.Artifact, error) {
	return get[*aggregate.Artifact](r, events.KindArtifact, id)
}

// Binding returns Desktop binding id, nil if there is none.
func Binding(r Reader, id string) (*aggregate.Binding, error) {
	return get[*aggregate.Binding](r, events.KindBinding, id)
}

// Installation returns the Desktop installation state of id, nil if
// there is none.
func Installation(r Reader, id string) (*aggregate.Installation, error) {
	return get[*aggregate.Installation](r, events.KindInstallation, id)
}

// Session returns managed session id, nil if there is none.
func Session(r Reader, id string) (*aggregate.Session, error) {
	return get[*aggregate.Session](r, events.KindSession, id)
}

// CtxSession returns CortexFS session id, nil if there is none.
func CtxSession(r Reader, id string) (*aggregate.CtxSession, error) {
	return get[*aggregate.CtxSession](r, events.KindCtxSession, id)
}

// Cursor returns the fair-order cursor of scope id, nil if there is none.
func Cursor(r Reader, id string) (*aggregate.Cursor, error) {
	return get[*aggregate.Cursor](r, events.KindCursor, id)
}

// CtxTree returns the ctx tree rooted at id, nil if there is none.
func CtxTree(r Reader, id string) (*aggregate.CtxTree, error) {
	return get[*aggregate.CtxTree](r, events.KindCtxTree, id)
}

// AppServer returns app-server instance id, nil if there is none.
func AppServer(r Reader, id string) (*aggregate.AppServer, error) {
	return get[*aggregate.AppServer](r, events.KindAppServer, id)
}

// Task returns task id, nil if there is none.
func Task(r Reader, id string) (*aggregate.Task, error) {
	return get[*aggregate.Task](r, events.KindTask, id)
}

// GatewayRoute returns gateway route id, nil if there is none.
func GatewayRoute(r Reader, id string) (*aggregate.GatewayRoute, error) {
	return get[*aggregate.GatewayRoute](r, events.KindGatewayRoute, id)
}

// GatewayStream returns gateway stream id, nil if there is none.
func GatewayStream(r Reader, id string) (*aggregate.GatewayStream, error) {
	return get[*aggregate.GatewayStream](r, events.KindGatewayStream, id)
}

// MCPThread returns the MCP call record of thread id, nil if there is
// none.
func MCPThread(r Reader, id string) (*aggregate.MCPThread, error) {
	return get[*aggregate.MCPThread](r, events.KindMCP, id)
}

// Thread returns what the user decided for Codex thread id (its trust),
// nil if nothing.
func Thread(r Reader, id string) (*aggregate.Thread, error) {
	return get[*aggregate.Thread](r, events.KindThread, id)
}
