package cortexmod

import (
	"testing"

	"github.com/cbth-dev/cbth/adapters/ipc"
)

// A saved tree is loaded back whole in one reply (ctx.tree.load), so
// what a tree may hold fits in one.
func TestATreeFitsInAReply(t *testing.T) {
	if maxTreeBytes > ipc.MaxResult {
		t.Errorf("a tree may hold %d bytes, more than a reply carries (%d)", maxTreeBytes, ipc.MaxResult)
	}
}
