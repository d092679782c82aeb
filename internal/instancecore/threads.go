package instancecore

import "github.com/eddystreams/eddy/task"

// threadEvent reports whether an event comes from a thread, and so names
// its index and incarnation.
func threadEvent(k EventKind) bool {
	switch k {
	case EvShare, EvReceived, EvRevoked, EvClaim, EvStarted, EvClaimFailed, EvRelease, EvCloseActive, EvThreadExit, EvAhead,
		EvThreadFailed:
		return true
	}
	return false
}

// checkThread refuses an event of a thread the core no longer hears: one
// gone for good, an incarnation that exited, or a next incarnation's event
// that presumes a claim of it, which waits for its predecessor's exit.
func (c *Core) checkThread(e Event) error {
	if !threadEvent(e.Kind) {
		return nil
	}
	if e.Thread < 0 || e.Thread >= c.cfg.Threads {
		return c.refuse(e, "no such thread")
	}
	if c.gone[e.Thread] {
		return c.refuse(e, "the thread exited for good")
	}
	switch cur := c.incarnation[e.Thread]; {
	case e.Incarnation == cur:
	case e.Incarnation < cur:
		return c.refuse(e, "that incarnation of the thread exited")
	case e.Incarnation > cur+1:
		return c.refuse(e, "an incarnation whose predecessor has not started")
	default:
		switch e.Kind {
		case EvShare, EvReceived, EvRevoked, EvClaim, EvAhead:
		default:
			return c.refuse(e, "the thread's predecessor has not exited")
		}
	}
	return nil
}

// early reports whether an event is one of a thread's next incarnation
// that waits for its predecessor's exit: its share of the assignment, as
// taken or received, and its revocation, which the predecessor's exit
// would otherwise forget.
func (c *Core) early(e Event) bool {
	if e.Incarnation != c.incarnation[e.Thread]+1 || !threadEvent(e.Kind) {
		return false
	}
	switch e.Kind {
	case EvShare, EvReceived, EvRevoked:
		return true
	}
	return false
}

// exit lets go what an exited thread still owns, and forgets its share
// and the assignment it received. A replaced thread's index is then its
// next incarnation's, and what that reported early is applied; it reports
// whether that included a share.
func (c *Core) exit(th int, replaced bool) (shared bool) {
	for _, id := range c.Tasks() {
		r := c.reps[id]
		if r.Owner != th {
			continue
		}
		if r.State == task.Created {
			// Claimed, not started: no store of it is the registry's.
			c.move(id, r, task.Closed)
			delete(c.reps, id)
			continue
		}
		c.closeActive(th, id, r, false)
	}
	delete(c.shares, th)
	delete(c.current, th)
	delete(c.received, th)
	c.want = nil
	held := c.held[th]
	delete(c.held, th)
	if !replaced {
		c.gone[th] = true
		return false
	}
	c.incarnation[th]++
	for _, e := range held {
		shared = c.apply(e) || shared
	}
	return shared
}

// live is the number of threads not gone for good.
func (c *Core) live() int { return c.cfg.Threads - len(c.gone) }
