package fsm

import (
	"github.com/cbth-dev/cbth/events"
)

// ArtifactState is the state of an artifact (spec/fsm.md).
type ArtifactState string

// The states of an artifact.
const (
	ArtifactStored    ArtifactState = "stored"
	ArtifactCollected ArtifactState = "collected"
)

var artifactTable = table[ArtifactState]{
	Kind:   events.KindArtifact,
	States: []ArtifactState{ArtifactStored, ArtifactCollected},
	Moves: []move[ArtifactState]{
		{events.TypeArtifactIngested, []ArtifactState{None}, ArtifactStored},
		{events.TypeArtifactCollected, []ArtifactState{ArtifactStored}, ArtifactCollected},
	},
	Updates: []update[ArtifactState]{
		{events.TypeArtifactReferenced, []ArtifactState{ArtifactStored}},
		{events.TypeArtifactReleased, []ArtifactState{ArtifactStored}},
		{events.TypeArtifactPinned, []ArtifactState{ArtifactStored}},
		{events.TypeArtifactRecoveryLeaseIssued, []ArtifactState{ArtifactStored}},
		{events.TypeArtifactRecoveryLeaseRevoked, []ArtifactState{ArtifactStored}},
	},
}.Table()
