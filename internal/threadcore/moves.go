package threadcore

// Moves of the mode, the phase and the slots, each checked against its
// table, and the lists and counts of slots kept as they move.

import (
	"fmt"
	"slices"

	"github.com/eddystreams/eddy/task"
)

func (c *Core) setMode(m Mode) {
	if !allowed(modeMoves, c.mode, m) {
		panic(fmt.Sprintf("threadcore: mode %s → %s is not in the table", c.mode, m))
	}
	if c.moved != nil && c.mode != m {
		c.moved("mode", uint8(c.mode), uint8(m))
	}
	c.mode = m
}

func (c *Core) setPhase(p Phase) {
	if !allowed(phaseMoves, c.phase, p) {
		panic(fmt.Sprintf("threadcore: phase %s → %s is not in the table", c.phase, p))
	}
	if c.moved != nil && c.phase != p {
		c.moved("phase", uint8(c.phase), uint8(p))
	}
	c.phase = p
}

func (c *Core) setSlot(id task.ID, s *slot, st Slot) {
	if !allowed(slotMoves, s.state, st) {
		panic(fmt.Sprintf("threadcore: task %s slot %s → %s is not in the table", id, s.state, st))
	}
	if c.moved != nil && s.state != st {
		c.moved("slot", uint8(s.state), uint8(st))
	}
	c.count(id, s.state, -1)
	s.state = st
	c.count(id, st, +1)
}

// addSlot makes a task's slot, Claiming.
func (c *Core) addSlot(id task.ID) {
	c.slots[id] = &slot{state: Claiming}
	c.count(id, Claiming, +1)
}

// dropSlot lets go of a task's slot, if the thread has one.
func (c *Core) dropSlot(id task.ID) {
	if s, ok := c.slots[id]; ok {
		c.count(id, s.state, -1)
		delete(c.slots, id)
	}
}

// count moves a task into (by +1) or out of (by -1) the lists and counts
// of a slot state.
func (c *Core) count(id task.ID, st Slot, by int) {
	switch st {
	case Claiming:
		c.claiming += by
	case Waiting:
		c.waiting += by
	case Restoring:
		c.heldIDs = listed(c.heldIDs, id, by)
	case Running:
		c.heldIDs = listed(c.heldIDs, id, by)
		c.runningIDs = listed(c.runningIDs, id, by)
	}
}

// listed adds id to (by +1) or removes it from (by -1) the sorted list ids.
func listed(ids []task.ID, id task.ID, by int) []task.ID {
	i, found := slices.BinarySearchFunc(ids, id, task.ID.Compare)
	switch {
	case by > 0 && !found:
		return slices.Insert(ids, i, id)
	case by < 0 && found:
		return slices.Delete(ids, i, i+1)
	}
	return ids
}

// rest is the mode the thread returns to once nothing is in flight.
func (c *Core) rest() Mode {
	if c.halted {
		return Halted
	}
	return Processing
}

// held lists the tasks the thread holds stores for (restoring or
// running), sorted: a copy, for the actions that carry it, as heldIDs
// changes while the slots it names are let go.
func (c *Core) held() []task.ID { return slices.Clone(c.heldIDs) }

// running lists the running tasks, sorted: a copy of runningIDs.
func (c *Core) running() []task.ID { return slices.Clone(c.runningIDs) }
