package fsm

import (
	"github.com/cbth-dev/cbth/events"
)

// SessionState is the state of a CLI managed session (spec/fsm.md).
type SessionState string

// The states of a CLI managed session.
const (
	SessionLive     SessionState = "live"
	SessionDetached SessionState = "detached"
	SessionParked   SessionState = "parked"
	SessionStale    SessionState = "stale"
	SessionRetired  SessionState = "retired"
)

// SessionModeCodexDaemon is the mode of a session bound through the
// user's Codex daemon: it has no foreground, so it starts detached.
const SessionModeCodexDaemon = "codex_daemon"

// sessionCreatedDetached is the machine event of a session.created of
// mode codex_daemon: the state it starts in is data (EventName).
const sessionCreatedDetached = events.TypeSessionCreated + "/" + string(SessionDetached)

// A CLI managed session: live while a foreground `cbth cli run` is
// attached (or, bound through the user's Codex daemon, created detached), detached once it left, parked while a manual batch of its
// thread is unresolved, stale when the thread can no longer be reached,
// retired for good. Its epoch advances in place while it is live,
// detached or parked; a stale session's epoch advances only when a
// foreground reattaches it (attached, then epoch_advanced). The move
// stale -> live by epoch_advanced and retired from parked are legal but
// no command emits them: logs written before the session commands
// existed use them (fixtures/logs).
var sessionTable = table[SessionState]{
	Kind:   events.KindSession,
	States: []SessionState{SessionLive, SessionDetached, SessionParked, SessionStale, SessionRetired},
	Moves: []move[SessionState]{
		{events.TypeSessionCreated, []SessionState{None}, SessionLive},
		{sessionCreatedDetached, []SessionState{None}, SessionDetached},
		{events.TypeSessionDetached, []SessionState{SessionLive}, SessionDetached},
		{events.TypeSessionAttached, []SessionState{SessionDetached, SessionStale}, SessionLive},
		{events.TypeSessionParked, []SessionState{SessionLive, SessionDetached, SessionStale}, SessionParked},
		{events.TypeSessionUnparked, []SessionState{SessionParked}, SessionDetached},
		{events.TypeSessionStale, []SessionState{SessionLive, SessionDetached}, SessionStale},
		{events.TypeSessionRetired, []SessionState{SessionLive, SessionDetached, SessionParked, SessionStale}, SessionRetired},
		{events.TypeSessionEpochAdvanced, []SessionState{SessionStale}, SessionLive},
	},
	Updates: []update[SessionState]{
		{events.TypeSessionEpochAdvanced, []SessionState{SessionLive, SessionDetached, SessionParked}},
		{events.TypeSessionPermissionObserved, []SessionState{SessionLive, SessionDetached}},
		{events.TypeSessionPermissionDrifted, []SessionState{SessionLive, SessionDetached}},
	},
}.Table()
