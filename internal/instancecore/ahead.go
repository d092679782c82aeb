package instancecore

import (
	"fmt"

	"github.com/eddystreams/eddy/task"
)

// AheadStore is one persistent store of a task, as the driver describes
// it for opening ahead of the task's claim.
type AheadStore struct {
	Task task.ID
	Name string
	// Windowed: a window store, whose opening may delete it first when
	// its layout changed; it is left for its task to open.
	Windowed bool
}

func (s AheadStore) String() string {
	if s.Windowed {
		return fmt.Sprintf("%s/%s(windowed)", s.Task, s.Name)
	}
	return fmt.Sprintf("%s/%s", s.Task, s.Name)
}

// ahead decides which stores of a thread's new tasks are opened ahead of
// their claims: a thread given thousands of tasks would otherwise open
// their stores one at a time as it builds each. Only stores of tasks this
// instance holds no state of (no replica, no directory left on disk) are
// opened: a held task's stores are open already, or are read for their
// positions first. Window stores are left to their tasks. Nothing new is
// opened while the instance is paused or closing.
func (c *Core) ahead(th int, stores []AheadStore) {
	if c.mode != ModeOpen {
		return
	}
	var open []AheadStore
	for _, s := range stores {
		if !s.Windowed && !c.Holds(s.Task) {
			open = append(open, s)
		}
	}
	if len(open) > 0 {
		c.emit(Action{Kind: ActOpenAhead, Thread: th, Stores: open})
	}
}
