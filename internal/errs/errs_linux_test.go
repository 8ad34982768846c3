package errs_test

import (
	"os"
	"testing"

	"github.com/cbth-dev/cbth/internal/errs"
)

// A real full device: every write to /dev/full fails with the kernel's
// ENOSPC, which IO reports as ENOSPC, exit 69, as cbth's own files would
// on a full disk, with no mount and no root.
func TestIOOfARealFullDevice(t *testing.T) {
	f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("open /dev/full: %v", err)
	}
	defer f.Close()
	_, werr := f.Write([]byte("a record"))
	if werr == nil {
		t.Fatal("a write to /dev/full succeeded")
	}
	err = errs.IO(werr, "append")
	if errs.CodeOf(err) != errs.ENOSPC || errs.CodeOf(err).ExitCode() != 69 {
		t.Fatalf("%v: code %q exit %d, want ENOSPC and 69", err, errs.CodeOf(err), errs.CodeOf(err).ExitCode())
	}
}
