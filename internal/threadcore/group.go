package threadcore

// The group's callbacks: assignments, syncs and revocations, cooperative
// and eager, and the phases they move the thread through.

import (
	"slices"

	"github.com/eddystreams/eddy/task"
)

// assigned takes an assignment: the stores of the tasks new to the thread
// are opened ahead, several at once, then each is claimed; the registry
// then takes the thread's share of standbys and warmups. While the thread
// reconnects, the assignment is the closing client's last: its tasks no
// longer concern the thread, but its share still concerns the registry.
func (c *Core) assigned(ids []task.ID) {
	if c.mode == Reconnecting {
		c.emit(Action{Kind: ActTakeShare})
		return
	}
	c.setPhase(c.assignedPhase())
	var fresh []task.ID
	for _, id := range ids {
		if _, ok := c.slots[id]; !ok && !slices.Contains(fresh, id) {
			fresh = append(fresh, id)
		}
	}
	if len(fresh) > 0 {
		c.emit(Action{Kind: ActOpenAhead, Tasks: fresh})
	}
	for _, id := range fresh {
		c.addSlot(id)
		c.emit(Action{Kind: ActClaim, Task: id})
	}
	c.emit(Action{Kind: ActTakeShare})
}

// synced is the balancer's sync: the join is over. A cooperative member
// losing tasks it ran is asked to commit before it lets the revocation
// run, so that the revocation usually finds nothing uncommitted (under
// exactly-once this spares the kept tasks an aborted transaction).
func (c *Core) synced(active []task.ID) {
	if c.phase == Rejoining {
		c.setPhase(Assigned)
	} else if c.phase != Assigned {
		c.setPhase(Unassigned)
	}
	if c.cfg.Cooperative && c.active != nil && slices.ContainsFunc(c.active, func(id task.ID) bool { return !slices.Contains(active, id) }) {
		c.rebalance = true
	}
	c.active = append(make([]task.ID, 0, len(active)), active...)
}

// rejoinOwed reports whether a cooperative revocation's rejoin is still
// owed: the phase is one of those after a revocation.
func (c *Core) rejoinOwed() bool {
	return c.phase == Revoked || c.phase == Rejoining || c.phase == RejoinJoining
}

// assignedPhase is the phase an assignment callback leads to.
func (c *Core) assignedPhase() Phase {
	switch c.phase {
	case Revoked, Rejoining:
		return Rejoining
	case Joining, RejoinJoining:
		// An assignment needs a sync first; the table refuses this.
		return Assigned
	}
	return Assigned
}

// revoked is a cooperative revocation of some tasks. At-least-once
// commits the thread's work first (a task's partitions go to their next
// owner only once its work is committed), then parks the revoked tasks.
// Exactly-once cannot end the transaction from the callback: if it holds
// work, it is discarded for every task (the kept ones process their share
// again); either way the group client aborts the next transaction to end,
// so the thread aborts it before processing more.
func (c *Core) revoked(ids []task.ID) {
	if c.phase == Joining || c.phase == RejoinJoining {
		c.setPhase(RejoinJoining)
	} else {
		c.setPhase(Revoked)
	}
	c.emit(Action{Kind: ActUnsettle})
	var release []task.ID
	for _, id := range ids {
		s := c.slots[id]
		switch {
		case s == nil:
		case s.state == Waiting || s.state == Claiming:
			c.dropSlot(id)
		default:
			if !slices.Contains(release, id) {
				release = append(release, id)
			}
		}
	}
	slices.SortFunc(release, task.ID.Compare)
	c.emit(Action{Kind: ActRegistryRevoked})
	switch {
	case c.halted:
		c.close(release, false)
	case c.cfg.Guarantee == ExactlyOnce:
		c.discardIfDirty()
		if c.mode == Processing {
			c.setMode(AbortPending)
		}
		c.park(release)
	case len(release) == 0 && len(c.runningIDs) == 0:
		// Nothing to commit and nothing to release.
	default:
		c.commit(forRevoke, release)
	}
}

// revokedAll is an eager revocation: everything goes, after a commit
// (at-least-once) or with the transaction's work discarded and its abort
// owed (exactly-once). The stores stay open in the registry.
func (c *Core) revokedAll() {
	c.setPhase(Unassigned)
	c.emit(Action{Kind: ActUnsettle})
	c.forgetWaiting()
	c.emit(Action{Kind: ActRegistryRevoked})
	switch {
	case c.halted:
		c.closeAll()
	case c.cfg.Guarantee == ExactlyOnce:
		if len(c.runningIDs) > 0 {
			c.discard(c.running())
		}
		if c.mode == Processing {
			c.setMode(AbortPending)
		}
		c.park(c.held())
	case len(c.runningIDs) == 0:
		c.park(c.held())
	default:
		c.commit(forRevokeAll, c.held())
	}
}

// forgetWaiting drops the tasks waiting for another thread: the next
// assignment says again what the thread runs.
func (c *Core) forgetWaiting() {
	if c.claiming+c.waiting == 0 {
		return
	}
	for id, s := range c.slots {
		if s.state == Waiting || s.state == Claiming {
			c.dropSlot(id)
		}
	}
}
