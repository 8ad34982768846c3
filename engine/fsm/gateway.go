package fsm

import (
	"github.com/cbth-dev/cbth/events"
)

// GatewayRouteState is the state of a channel gateway route (spec/fsm.md).
type GatewayRouteState string

// The states of a channel gateway route.
const (
	GatewayRouteActive  GatewayRouteState = "active"
	GatewayRouteRemoved GatewayRouteState = "removed"
)

// A gateway route (spec/channels.md): a routing key pointed at a
// destination until the operator removes it; adding again replaces it.
var gatewayRouteTable = table[GatewayRouteState]{
	Kind:   events.KindGatewayRoute,
	States: []GatewayRouteState{GatewayRouteActive, GatewayRouteRemoved},
	Moves: []move[GatewayRouteState]{
		{events.TypeGatewayRouteAdded, []GatewayRouteState{None, GatewayRouteRemoved}, GatewayRouteActive},
		{events.TypeGatewayRouteRemoved, []GatewayRouteState{GatewayRouteActive}, GatewayRouteRemoved},
	},
	Updates: []update[GatewayRouteState]{
		{events.TypeGatewayRouteAdded, []GatewayRouteState{GatewayRouteActive}},
	},
}.Table()

// GatewayStreamState is the state of a channel stream through the gateway (spec/fsm.md).
type GatewayStreamState string

// The states of a channel stream through the gateway.
const (
	GatewayStreamOpen GatewayStreamState = "open"
)

// A channel stream as the gateway saw it: sequence, gaps and remote mode
// are data, so the stream stays open.
var gatewayStreamTable = table[GatewayStreamState]{
	Kind:   events.KindGatewayStream,
	States: []GatewayStreamState{GatewayStreamOpen},
	Moves: []move[GatewayStreamState]{
		{events.TypeGatewayEnvelopeRecorded, []GatewayStreamState{None}, GatewayStreamOpen},
	},
	Updates: []update[GatewayStreamState]{
		{events.TypeGatewayEnvelopeRecorded, []GatewayStreamState{GatewayStreamOpen}},
		{events.TypeGatewayGapReported, []GatewayStreamState{GatewayStreamOpen}},
		{events.TypeGatewayModeChanged, []GatewayStreamState{GatewayStreamOpen}},
	},
}.Table()
