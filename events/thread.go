package events

// KindThread is the stream of what the user decided for one Codex
// conversation thread, by the thread's id: how far its deliveries are
// trusted (spec/codex-cli.md, "Trust").
const KindThread Kind = "thread"

// threadEvents declares the thread events (see declarations).
func threadEvents() []declaration {
	return []declaration{
		decl[ThreadTrusted](KindThread),
		decl[ThreadUntrusted](KindThread),
	}
}

// The trusts a user gives a thread.
const (
	// TrustStrict delivers without a foreground only while every
	// effective permission of the thread is false (the default, pinned
	// for this thread whatever the home's setting).
	TrustStrict = "strict"
	// TrustOwnPermissions delivers with the thread's own permissions,
	// whatever they are, repeated exactly in the turn.
	TrustOwnPermissions = "own_permissions"
)

// Trusts lists the trusts, in the order help shows them.
var Trusts = []string{TrustStrict, TrustOwnPermissions}

// ThreadTrusted records the user trusting a thread's deliveries. It is
// given by the user (cbth thread trust), never by an agent.
type ThreadTrusted struct {
	Trust string `json:"trust"`
}

const TypeThreadTrusted = "thread.trusted"

func (ThreadTrusted) EventType() string { return TypeThreadTrusted }

// ThreadUntrusted takes the thread's own trust back: the home's setting
// applies to it again.
type ThreadUntrusted struct{}

const TypeThreadUntrusted = "thread.untrusted"

func (ThreadUntrusted) EventType() string { return TypeThreadUntrusted }
