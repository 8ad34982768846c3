package command_test

import (
	"encoding/json"
	"testing"

	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/events"
)

func b(v bool) *bool { return &v }

func TestNormalizePolicy(t *testing.T) {
	all := events.DeliveryPolicy{ReadOnly: true}
	tests := []struct {
		name  string
		flags command.PolicyFlags
		meta  string
		want  events.DeliveryPolicy
	}{
		{"nothing given: fail-closed defaults", command.PolicyFlags{}, ``, events.FailClosedPolicy},
		{"metadata without a policy", command.PolicyFlags{}, `{"x":1}`, events.FailClosedPolicy},
		{"metadata gives everything", command.PolicyFlags{}, `{"delivery_policy":{"read_only":true,"requires_approval":false,"requires_network":false,"requires_write_access":false}}`, all},
		{"flags give everything", command.PolicyFlags{b(true), b(false), b(false), b(false)}, ``, all},
		{"flags win over metadata", command.PolicyFlags{ReadOnly: b(false)}, `{"delivery_policy":{"read_only":true,"requires_approval":false,"requires_network":false,"requires_write_access":false}}`,
			events.DeliveryPolicy{ReadOnly: false}},
		{"partial metadata, rest fail-closed", command.PolicyFlags{}, `{"delivery_policy":{"read_only":true}}`,
			events.DeliveryPolicy{ReadOnly: true, RequiresApproval: true, RequiresNetwork: true, RequiresWriteAccess: true}},
		{"partial flag, rest fail-closed", command.PolicyFlags{RequiresNetwork: b(false)}, ``,
			events.DeliveryPolicy{RequiresApproval: true, RequiresWriteAccess: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := command.NormalizePolicy(tt.flags, json.RawMessage(tt.meta))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	if _, err := command.NormalizePolicy(command.PolicyFlags{}, json.RawMessage(`{"delivery_policy":{"read_only":"yes"}}`)); err == nil {
		t.Fatal("a non-boolean policy field was accepted")
	}
}
