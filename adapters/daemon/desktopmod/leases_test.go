package desktopmod_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/daemontest"
)

// An artifact too large to hand over inline is read in chunks under a
// recovery lease: issued once per artifact over the inline limit (none
// for a batch without one), kept while valid, rotated on request; a read
// needs the current, unexpired, unrevoked lease and a sane range; batch
// inspect shows the lease while it is valid. The refusals append nothing.
func TestRecoveryLeasesAndChunkedReads(t *testing.T) {
	r := start(t)
	limit := daemontest.Config().Delivery.InlinePayloadLimit
	big := bytes.Repeat([]byte("0123456789abcdef"), int(limit/16)+100)
	result := filepath.Join(t.TempDir(), "big.log")
	if err := os.WriteFile(result, big, 0o600); err != nil {
		t.Fatal(err)
	}
	batchOf := func(thread, file string) (batch, art string) {
		j := daemontest.Call(r.Daemon, api.JobSubmit, api.SubmitArgs{TargetKind: command.TargetDesktop, SourceThreadID: thread, TaskKind: "ci", TaskSummary: "x"})
		daemontest.Call(r.Daemon, api.JobComplete, api.CompleteArgs{JobID: j.JobID, ResultSummary: "done", ResultFile: file})
		v := daemontest.Call(r.Daemon, api.JobQuery, api.JobArgs{JobID: j.JobID})
		if v.Batch == nil {
			t.Fatalf("job %s joined no batch", j.JobID)
		}
		return v.Batch.BatchID, v.ArtifactID
	}
	small := filepath.Join(t.TempDir(), "small.log")
	os.WriteFile(small, []byte("short"), 0o600)
	smallBatch, _ := batchOf("small", small)
	if rep := daemontest.Call(r.Daemon, api.DesktopIssueLeases, api.IssueLeasesArgs{BatchID: smallBatch}); rep.Outcome != "none" || len(rep.Leases) != 0 {
		t.Fatalf("leases of a batch with nothing large: %+v", rep)
	}
	batch, art := batchOf("S", result)
	first := daemontest.Call(r.Daemon, api.DesktopIssueLeases, api.IssueLeasesArgs{BatchID: batch})
	if first.Outcome != "issued" || len(first.Leases) != 1 || first.Leases[0].ArtifactID != art {
		t.Fatalf("first issue: %+v", first)
	}
	lease := first.Leases[0].LeaseID
	if again := daemontest.Call(r.Daemon, api.DesktopIssueLeases, api.IssueLeasesArgs{BatchID: batch}); again.Outcome != "unchanged" || again.Leases[0].LeaseID != lease {
		t.Fatalf("issued again: %+v, want the same lease", again)
	}
	if in := daemontest.Call(r.Daemon, api.BatchInspect, api.BatchArgs{BatchID: batch}); len(in.RecoveryLeases) != 1 || in.RecoveryLeases[0].LeaseID != lease {
		t.Fatalf("batch inspect shows %+v, want the valid lease", in.RecoveryLeases)
	}

	// Read it whole, in chunks.
	var got []byte
	for off := int64(0); ; {
		c := daemontest.Call(r.Daemon, api.DesktopReadArtifact, api.ReadArtifactArgs{ArtifactID: art, LeaseID: lease, Offset: off, MaxBytes: 4096})
		if c.Offset != off || c.Bytes != len(c.Data) || c.Bytes > 4096 || c.SizeBytes != int64(len(big)) {
			t.Fatalf("chunk at %d: %+v", off, c)
		}
		got = append(got, c.Data...)
		off = c.NextOffset
		if c.EOF {
			sum := sha256.Sum256(big)
			if c.SHA256 != hex.EncodeToString(sum[:]) {
				t.Fatalf("sha256 %s", c.SHA256)
			}
			break
		}
	}
	if !bytes.Equal(got, big) {
		t.Fatalf("read %d bytes, not the artifact's %d", len(got), len(big))
	}
	read := func(lease string, off, max int64) func() error {
		return func() error {
			_, err := api.DesktopReadArtifact.Call(r.Client, api.ReadArtifactArgs{ArtifactID: art, LeaseID: lease, Offset: off, MaxBytes: max})
			return err
		}
	}
	r.refused("a negative offset", errs.EINVAL, "offset", read(lease, -1, 10))
	r.refused("no bytes asked", errs.EINVAL, "max bytes", read(lease, 0, 0))
	r.refused("another lease", errs.ESTALE, "artifact read lease", read("arl-not-it", 0, 10))

	// Rotated: the old lease no longer reads.
	rot := daemontest.Call(r.Daemon, api.DesktopIssueLeases, api.IssueLeasesArgs{BatchID: batch, Rotate: true})
	if rot.Outcome != "issued" || rot.Leases[0].LeaseID == lease {
		t.Fatalf("rotation: %+v", rot)
	}
	r.refused("the rotated-out lease", errs.ESTALE, "artifact read lease", read(lease, 0, 10))
	lease = rot.Leases[0].LeaseID
	daemontest.Call(r.Daemon, api.DesktopReadArtifact, api.ReadArtifactArgs{ArtifactID: art, LeaseID: lease, MaxBytes: 10})

	// Expired: past its deadline on the daemon's clock.
	r.Advance(rot.Leases[0].Deadline.Sub(r.Clock.Now()) + time.Second)
	r.refused("an expired lease", errs.ESTALE, "artifact read lease", read(lease, 0, 10))
	if in := daemontest.Call(r.Daemon, api.BatchInspect, api.BatchArgs{BatchID: batch}); len(in.RecoveryLeases) != 0 {
		t.Fatalf("batch inspect shows an expired lease: %+v", in.RecoveryLeases)
	}

	// Revoked: a fresh lease, then revoked.
	fresh := daemontest.Call(r.Daemon, api.DesktopIssueLeases, api.IssueLeasesArgs{BatchID: batch})
	if fresh.Outcome != "issued" {
		t.Fatalf("a lease after the last expired: %+v", fresh)
	}
	if rep := daemontest.Call(r.Daemon, api.DesktopRevokeLease, api.ArtifactLeaseArgs{ArtifactID: art}); rep.Outcome == "" {
		t.Fatalf("revoke: %+v", rep)
	}
	r.refused("a revoked lease", errs.ESTALE, "artifact read lease", read(fresh.Leases[0].LeaseID, 0, 10))
}
