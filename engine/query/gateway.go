package query

import (
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command/gateway"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
)

// RouteView is one gateway route as `cbth gateway route list` shows it.
type RouteView struct {
	WorkspaceID string    `json:"workspace_id"`
	AgentID     string    `json:"agent_id"`
	To          string    `json:"to"`
	Target      string    `json:"target"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// GatewayRoute returns the active route of a routing key, or nil.
func GatewayRoute(s engine.Reader, workspaceID, agentID string) (*RouteView, error) {
	r, err := engine.GatewayRoute(s, gateway.GatewayRouteID(workspaceID, agentID))
	if err != nil || r == nil || r.State != fsm.GatewayRouteActive {
		return nil, err
	}
	return routeView(r), nil
}

func routeView(r *aggregate.GatewayRoute) *RouteView {
	return &RouteView{WorkspaceID: r.WorkspaceID, AgentID: r.AgentID, To: r.To, Target: r.Target, UpdatedAt: r.UpdatedAt}
}

// MaxRoutes bounds one route listing; routes are set by hand, a few
// dozen at most.
const MaxRoutes = 500

// RoutePage is the route listing.
type RoutePage struct {
	Routes []RouteView `json:"routes"`
	// Omitted counts the routes past MaxRoutes.
	Omitted int `json:"omitted,omitempty"`
}

// GatewayRoutes lists the active routes in routing-key order.
func GatewayRoutes(s engine.Snapshot) (RoutePage, error) {
	p := RoutePage{Routes: []RouteView{}}
	err := s.ForEach(events.KindGatewayRoute, func(st aggregate.State) error {
		r := st.(*aggregate.GatewayRoute)
		if r.State != fsm.GatewayRouteActive {
			return nil
		}
		if len(p.Routes) == MaxRoutes {
			p.Omitted++
			return nil
		}
		p.Routes = append(p.Routes, *routeView(r))
		return nil
	})
	return p, err
}

// GatewayStream returns a channel stream's receiving state, or nil.
func GatewayStream(s engine.Reader, streamID string) (*aggregate.GatewayStream, error) {
	return engine.GatewayStream(s, streamID)
}
