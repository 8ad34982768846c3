package fsm

import (
	"github.com/cbth-dev/cbth/events"
)

// InstallationState is the state of the Desktop installation state (spec/fsm.md).
type InstallationState string

// The states of the Desktop installation state.
const (
	InstallationConfigured InstallationState = "configured"
)

var installationTable = table[InstallationState]{
	Kind:   events.KindInstallation,
	States: []InstallationState{InstallationConfigured},
	Moves: []move[InstallationState]{
		{events.TypeInstallationStateRepaired, []InstallationState{None}, InstallationConfigured},
	},
	Updates: []update[InstallationState]{
		{events.TypeInstallationStateRepaired, []InstallationState{InstallationConfigured}},
		{events.TypeInstallationBridgeSelected, []InstallationState{InstallationConfigured}},
		{events.TypeInstallationRelayScannerBound, []InstallationState{InstallationConfigured}},
		{events.TypeInstallationRelayScannerAdvanced, []InstallationState{InstallationConfigured}},
		{events.TypeInstallationRelayScannerDegraded, []InstallationState{InstallationConfigured}},
		{events.TypeInstallationMCPValidationRequested, []InstallationState{InstallationConfigured}},
		{events.TypeInstallationMCPWritebackValidated, []InstallationState{InstallationConfigured}},
		{events.TypeInstallationQueueValidationStarted, []InstallationState{InstallationConfigured}},
		{events.TypeInstallationQueueWritebackValidated, []InstallationState{InstallationConfigured}},
		{events.TypeInstallationQueueValidationFailed, []InstallationState{InstallationConfigured}},
		{events.TypeInstallationSnapshotRevisionsReserved, []InstallationState{InstallationConfigured}},
	},
}.Table()
