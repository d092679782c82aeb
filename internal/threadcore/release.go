package threadcore

// Letting tasks go: parking and closing released tasks, and the thread's
// exit, each action carrying the handles the claims gave back to the
// driver.

import "github.com/eddystreams/eddy/task"

func (c *Core) park(ids []task.ID) {
	if len(ids) == 0 {
		return
	}
	hs := c.handles(ids)
	for _, id := range ids {
		c.dropSlot(id)
	}
	c.emit(Action{Kind: ActPark, Tasks: ids, Handles: hs})
}

func (c *Core) close(ids []task.ID, clean bool) {
	if len(ids) == 0 {
		return
	}
	hs := c.handles(ids)
	for _, id := range ids {
		c.dropSlot(id)
	}
	c.emit(Action{Kind: ActClose, Tasks: ids, Handles: hs, Clean: clean})
}

func (c *Core) closeAll() { c.close(c.held(), false) }

func (c *Core) exit(clean, killed bool) {
	held := c.held()
	hs := c.handles(held)
	clear(c.slots)
	c.heldIDs, c.runningIDs, c.worked = nil, nil, nil
	c.claiming, c.waiting = 0, 0
	c.committed, c.releasing = nil, nil
	c.setMode(Exited)
	c.emit(Action{Kind: ActExit, Tasks: held, Handles: hs, Clean: clean, Killed: killed})
}

// handles lists the handles of ids, which the core is about to let go of:
// the action that releases them carries them to the driver.
func (c *Core) handles(ids []task.ID) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		if s := c.slots[id]; s != nil {
			out[i] = s.handle
		}
	}
	return out
}
