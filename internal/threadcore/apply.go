package threadcore

// What each event does to the core, by family: the group's, the tasks'
// outcomes, the commits' and aborts' outcomes, and the thread's control
// (failures, halts, rewires, stops and kills).

// apply takes an admitted event that the current mode accepts. An exited
// thread takes nothing more.
func (c *Core) apply(e Event) {
	if c.mode == Exited {
		return
	}
	switch e.Kind {
	case EvSynced, EvAssigned, EvSessionEnded, EvRevoked, EvRevokedAll, EvLost, EvRebalanceRequested:
		c.applyGroup(e)
	case EvClaimed, EvHeld, EvClaimFailed, EvRestored, EvPolled, EvProcessed, EvPollDone:
		c.applyTask(e)
	case EvTick, EvCommitted, EvCommitAborted, EvCommitFailed, EvAborted, EvAbortFailed, EvReconnected:
		c.applyCommit(e)
	case EvFailed, EvReplace, EvHalt, EvRewire, EvStop, EvKill:
		c.applyControl(e)
	}
}

// applyGroup takes what the group client reports: a sync, an assignment,
// a revocation, a loss, the end of a session, a rebalance asked for.
func (c *Core) applyGroup(e Event) {
	switch e.Kind {
	case EvSynced:
		c.synced(e.Tasks)
	case EvAssigned:
		c.assigned(e.Tasks)
	case EvSessionEnded:
		if c.rejoinOwed() {
			c.setPhase(RejoinJoining)
		} else {
			c.setPhase(Joining)
		}
		c.emit(Action{Kind: ActUnsettle})
	case EvRevoked:
		c.revoked(e.Tasks)
	case EvRevokedAll:
		c.revokedAll()
	case EvLost:
		c.setPhase(Unassigned)
		c.emit(Action{Kind: ActUnsettle})
		c.closeAll()
		c.forgetWaiting()
		c.emit(Action{Kind: ActRegistryRevoked})
		if c.cfg.Guarantee == ExactlyOnce && c.mode == Processing {
			c.setMode(AbortPending)
		}
	case EvRebalanceRequested:
		c.rebalance = true
	}
}

// applyTask takes the outcomes of claims and restorations and the loop's
// passes: a poll to process, what a task took of it, the poll's end.
func (c *Core) applyTask(e Event) {
	switch e.Kind {
	case EvClaimed:
		s := c.slots[e.Task]
		c.setSlot(e.Task, s, Restoring)
		s.handle = e.Handle
	case EvHeld:
		s := c.slots[e.Task]
		c.setSlot(e.Task, s, Waiting)
		if !s.paused {
			s.paused = true
			c.emit(Action{Kind: ActPause, Task: e.Task})
		}
	case EvClaimFailed:
		c.dropSlot(e.Task)
	case EvRestored:
		if s := c.slots[e.Task]; s != nil && s.state == Restoring {
			c.setSlot(e.Task, s, Running)
			c.emit(Action{Kind: ActResume, Task: e.Task})
		}
	case EvPolled:
		switch c.mode {
		case Processing:
			c.emit(Action{Kind: ActProcess})
		case AbortPending:
			c.abort()
		}
	case EvProcessed:
		if e.N > 0 {
			s := c.slots[e.Task]
			if !s.work {
				c.worked = append(c.worked, e.Task)
			}
			s.work, s.unflushed = true, true
			c.dirty, c.consumed = true, true
		}
	case EvPollDone:
		if c.waiting == 0 {
			return
		}
		for _, id := range c.Tasks(Waiting) {
			c.setSlot(id, c.slots[id], Claiming)
			c.emit(Action{Kind: ActClaim, Task: id})
		}
	}
}

// applyCommit takes a tick, which may begin a commit, and the outcomes of
// commits, aborts and reconnections.
func (c *Core) applyCommit(e Event) {
	switch e.Kind {
	case EvTick:
		c.tick(e.Clock)
	case EvCommitted, EvCommitAborted:
		c.commitEnded(e.Kind == EvCommitAborted)
	case EvCommitFailed:
		c.commitFailed(e.Cause)
	case EvAborted:
		for _, s := range c.slots {
			s.work, s.unflushed = false, false
		}
		c.worked = c.worked[:0]
		c.dirty = false
		c.emit(Action{Kind: ActBegin})
		c.setMode(c.back)
	case EvAbortFailed:
		c.abortFailed(e.Cause)
	case EvReconnected:
		// The new client has a transaction of its own, empty.
		c.dirty, c.consumed = false, false
		c.setMode(c.back)
	}
}

// abortFailed takes an abort that failed: a fenced producer is replaced
// by a reconnection; otherwise the thread fails, or, halted, stays so.
func (c *Core) abortFailed(cause Cause) {
	switch {
	case cause == CauseFenced:
		c.closeAll()
		c.reconnect(CauseFenced, c.back)
	case c.halted:
		// A halted thread only logs it: it processes nothing more.
		c.setMode(Halted)
	default:
		c.setMode(Failed)
	}
}

// applyControl takes what the App or the thread's own loop decides about
// the thread as a whole: a failure, a replacement, a halt, a rewire, a
// stop, a kill.
func (c *Core) applyControl(e Event) {
	switch e.Kind {
	case EvFailed:
		c.setMode(Failed)
	case EvReplace:
		c.closeAll()
		c.reconnect(CauseReplace, c.rest())
	case EvHalt:
		c.halted = true
		c.closeAll()
		c.setMode(Halted)
		if c.cfg.Guarantee == ExactlyOnce {
			c.abort()
		}
	case EvRewire:
		c.closeAll()
		c.setPhase(Unassigned)
		c.emit(Action{Kind: ActUnsettle})
		c.forgetWaiting()
		c.emit(Action{Kind: ActRegistryRevoked})
		c.reconnect(CauseRewire, c.rest())
	case EvStop:
		c.stop(e.Clean)
	case EvKill:
		c.closeAll()
		c.exit(false, true)
	}
}

// stop takes a stop: a clean one commits the running tasks first, unless
// there are none or the thread is between clients; any other exits at
// once.
func (c *Core) stop(clean bool) {
	switch {
	case !clean || c.mode == Reconnecting:
		c.closeAll()
		c.exit(false, false)
	case len(c.runningIDs) == 0:
		c.exit(true, false)
	default:
		c.commit(forStop, nil)
	}
}
