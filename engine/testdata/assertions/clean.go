package fixture

import (
	"io"
	"os"

	"github.com/cbth-dev/cbth/engine/aggregate"
)

// Assertions to other types, and to the state interface's capabilities,
// are not reads of a state as its aggregate type.
func clean(x io.Reader, st aggregate.State) bool {
	_, file := x.(*os.File)
	_, due := st.(aggregate.Deadliner)
	return file && due
}
