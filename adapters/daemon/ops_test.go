package daemon

import (
	"testing"

	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/query"
)

// How each operation's reply is kept within one frame (ipc.MaxResult).
// An operation added to the table must say which, so that no reply grows
// with what the home holds.
var replyBounds = map[string]string{
	api.Ping.Name:         "small",
	api.DaemonStatus.Name: "small: the last sweep's ids capped (maxSweepIDs)",
	api.DaemonStop.Name:   "small",

	api.JobSubmit.Name:   "one job",
	api.JobComplete.Name: "one job",
	api.JobFail.Name:     "one job",
	api.JobCancel.Name:   "one job",
	api.JobQuery.Name:    "one job",
	api.JobList.Name:     "paged (query.PageBytes)",

	api.BatchCloseHead.Name:   "one batch",
	api.BatchInspectHead.Name: "one batch; its lists share query.PageBytes",
	api.BatchInspect.Name:     "one batch; its lists share query.PageBytes",
	api.BatchList.Name:        "paged (query.PageBytes)",
	api.BatchSupersede.Name:   "one batch",
	api.Wait.Name:             "paged (query.PageBytes)",

	api.ArtifactPin.Name:  "small",
	api.EventsVerify.Name: "small: at most 100 problems",
	api.EventsRead.Name:   "paged (query.PageBytes)",
	api.History.Name:      "paged (query.PageBytes)",
	api.WatchNext.Name:    "at most maxWatchItems of each list, the rest counted",

	api.ThreadHistory.Name: "paged (query.PageBytes)",

	api.DebugTargetSet.Name: "small",
	api.DebugTurn.Name:      "small",
	api.DebugClock.Name:     "small",

	api.CtxTreeLoad.Name: "one tree, bounded when saved (cortexmod: maxTreeBytes)",
	api.CtxTreeSave.Name: "small",

	api.CLIAttach.Name:         "one session and app-server, and the warnings of one attach",
	api.CLIDetach.Name:         "one session, and the warnings of one attach",
	api.CLISessionList.Name:    "paged (query.PageBytes)",
	api.CLISessionInspect.Name: "one session and app-server",
	api.ThreadTrust.Name:       "one thread's trust",
	api.ThreadUntrust.Name:     "one thread's trust",

	api.DesktopInstallation.Name:        "one installation and at most query.MaxRelayScanners scanners",
	api.DesktopInstallationRepair.Name:  "one installation (at most query.MaxRelayScanners scanners), and the ids of the bindings one repair degraded (36 bytes each)",
	api.DesktopBindingRepair.Name:       "one binding",
	api.DesktopBindingUnbind.Name:       "one binding",
	api.DesktopBindingList.Name:         "paged (query.PageBytes)",
	api.DesktopPreflight.Name:           "small",
	api.DesktopQueueValidate.Name:       "small",
	api.BatchSkipHead.Name:              "small",
	api.DesktopNoteArmPending.Name:      "small",
	api.DesktopNoteArm.Name:             "small",
	api.DesktopNotePaused.Name:          "small",
	api.DesktopNoteBoundaryCrossed.Name: "one batch's summary ([delivery] max_total_bytes) and ids",
	api.DesktopRelayMarkerIssue.Name:    "small",
	api.DesktopReadArtifact.Name:        "one chunk of at most api.MaxArtifactChunk bytes",
	api.DesktopRevokeLease.Name:         "small",
	api.DesktopIssueLeases.Name:         "one lease per artifact of one batch (a batch holds at most [delivery] max_jobs_per_batch jobs' artifacts)",
	api.DesktopRelayScannerBind.Name:    "small",
	api.DesktopRelayConsume.Name:        "the results of the envelopes carrying one marker: a marker is consumed once, later copies are its re-emissions (bounded by the file, maxTranscript), and the records skipped (at most maxTranscript / relay.MaxRecord)",

	api.TaskRun.Name:        "one task: its argv came in one request, its tail is at most [task] output_tail",
	api.TaskInspect.Name:    "one task",
	api.TaskList.Name:       "paged (query.PageBytes)",
	api.TaskCancel.Name:     "one task",
	api.TaskOutput.Name:     "at most MaxOutputRead (64 KiB) of output, at most 6 bytes each once encoded (a control byte's \\u escape)",
	api.DaemonHandover.Name: "small",
	api.CtxServe.Name:       "one object name and socket path",

	api.GatewayRouteAdd.Name:    "one route",
	api.GatewayRouteRemove.Name: "one route",
	api.GatewayRouteList.Name:   "at most query.MaxRoutes routes of bounded ids (about 1 KB each), the rest counted",

	api.PluginHandshake.Name: "small",
	api.AppServerEnsure.Name: "one lease",
	api.DeliveryEnqueue.Name: "one job",
	api.DeliveryInspect.Name: "one job without its metadata (job query shows it), one batch as batch.inspect bounds it, one lease",

	api.MCPJobSubmit.Name:  "one job id and a hint",
	api.MCPTaskRun.Name:    "one task's ids, its argv (which came in one request) and a hint",
	api.MCPJobStatus.Name:  "one job",
	api.MCPJobList.Name:    "one page (query.PageBytes): the tool answers with the first",
	api.MCPJobCancel.Name:  "one job",
	api.MCPWatchStart.Name: "one task's ids, its argv (which came in one request), its patterns (at most 16 of 1 KiB) and a hint",
	api.MCPWatchStop.Name:  "one task",
	api.MCPTaskOutput.Name: "as task.output",

	api.MCPDesktopPreflight.Name:           "small",
	api.MCPDesktopNoteArmPending.Name:      "small",
	api.MCPDesktopNoteArm.Name:             "small",
	api.MCPDesktopNotePaused.Name:          "small",
	api.MCPDesktopNoteBoundaryCrossed.Name: "as desktop.note_boundary_crossed: one batch's summary and ids",
	api.MCPDesktopReadArtifact.Name:        "as desktop.read_artifact: one chunk of at most api.MaxArtifactChunk bytes",
	api.MCPDesktopValidate.Name:            "small",
	api.DesktopMCPValidationRequest.Name:   "small: a token and a prompt",
}

func TestEveryReplyIsBounded(t *testing.T) {
	for _, name := range api.All {
		if replyBounds[name] == "" {
			t.Errorf("operation %s: say in replyBounds how its reply stays within a frame (page it if it lists)", name)
		}
	}
	// A page and the few keys around it fit in a reply.
	if query.PageBytes+64<<10 > ipc.MaxResult {
		t.Errorf("a page (%d bytes) leaves too little room in a reply (%d)", query.PageBytes, ipc.MaxResult)
	}
}
