package fsm

import (
	"github.com/cbth-dev/cbth/events"
)

// BatchState is the state of a delivery batch (spec/fsm.md).
type BatchState string

// The states of a delivery batch.
const (
	BatchQueued       BatchState = "queued"
	BatchMaterialized BatchState = "materialized"
	BatchCooldown     BatchState = "cooldown"
	BatchClosed       BatchState = "closed"
)

// batchOpen are the states of an open batch.
var batchOpen = []BatchState{BatchQueued, BatchMaterialized, BatchCooldown}

// Open reports whether a batch in state s is still open.
func (s BatchState) Open() bool { return s != BatchClosed }

var batchTable = table[BatchState]{
	Kind:   events.KindBatch,
	States: []BatchState{BatchQueued, BatchMaterialized, BatchCooldown, BatchClosed},
	Moves: []move[BatchState]{
		{events.TypeBatchOpened, []BatchState{None}, BatchQueued},
		{events.TypeBatchMaterialized, []BatchState{BatchQueued, BatchCooldown}, BatchMaterialized},
		{events.TypeBatchDeliveryAccepted, []BatchState{BatchMaterialized}, BatchCooldown},
		{events.TypeBatchClosed, batchOpen, BatchClosed},
		{events.TypeBatchHandoffRecorded, []BatchState{BatchCooldown}, BatchClosed},
		// A Codex CLI result handed to Codex's own queue (spec/codex-cli.md).
		{events.TypeBatchQueuedToCodex, []BatchState{BatchCooldown}, BatchClosed},
		// An operator's supersede of the head: close_reason superseded.
		{events.TypeBatchSuperseded, batchOpen, BatchClosed},
	},
	Updates: []update[BatchState]{
		{events.TypeBatchJobsAdded, []BatchState{BatchQueued}},
		// A fresh attempt after an abandoned one re-materializes in place.
		{events.TypeBatchMaterialized, []BatchState{BatchMaterialized}},
		{events.TypeBatchReplayPolicyChanged, batchOpen},
		{events.TypeBatchEligibleAfterSet, batchOpen},
		{events.TypeBatchRecoveryPinned, []BatchState{BatchClosed}},
		{events.TypeBatchRecoveryCollected, []BatchState{BatchClosed}},
		{events.TypeBatchPromoted, []BatchState{BatchQueued}},
		{events.TypeBatchParkNotified, []BatchState{BatchQueued, BatchMaterialized, BatchCooldown, BatchClosed}},
	},
}.Table()
