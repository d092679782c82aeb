package instancecore

import (
	"fmt"
	"maps"
	"slices"

	"github.com/eddystreams/eddy/task"
)

// Mode is what the instance is doing with the replicas no thread owns.
type Mode uint8

const (
	// ModeOpen: they follow the threads' shares (reconcile).
	ModeOpen Mode = iota
	// ModePaused: the instance's clients are being replaced (the broker
	// lost its topics): once nothing is in flight every replica no thread
	// owns is closed, nothing is opened, and directories whose changelogs
	// were recreated may be wiped (EvWipe) until EvResume.
	ModePaused
	// ModeClosing: as paused, for good.
	ModeClosing
)

var modeNames = [...]string{"open", "paused", "closing"}

func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", m)
}

// Mode returns the instance's mode.
func (c *Core) Mode() Mode { return c.mode }

// Share returns a thread's latest share of the assignment.
func (c *Core) Share(th int) (Share, bool) {
	s, ok := c.shares[th]
	return s, ok
}

// Holds reports whether the instance holds a task's state: a replica, or
// its directory left on disk.
func (c *Core) Holds(id task.ID) bool { return c.reps[id] != nil || c.OnDisk(id) }

// Visible reports whether a task's replica has stores open to read: it is
// not being opened, closed or deleted (a parked replica being adopted
// stays readable until it follows its changelogs).
func (c *Core) Visible(id task.ID) bool {
	r := c.reps[id]
	return r != nil && (r.Work == Idle || r.Work == Adopting)
}

// Servable reports whether queries may read a task's replica. One no
// thread's latest received assignment names is no longer one: the group
// has given its role away, and it only waits to be closed or parked. A
// running active is the exception: it stays its partition's one writer
// until its thread has committed and revoked it, and answers as such
// until then.
func (c *Core) Servable(id task.ID) bool {
	if !c.Visible(id) {
		return false
	}
	if c.reps[id].State == task.Running || len(c.received) < c.live() {
		return true
	}
	for _, named := range c.received {
		if named[id] {
			return true
		}
	}
	return false
}

// Quiet reports whether nothing is in flight and, unless the instance is
// open, no replica is left that no thread owns: what a pause or a close
// waits for.
func (c *Core) Quiet() bool {
	for _, r := range c.reps {
		if r.Work != Idle || (c.mode != ModeOpen && r.Owner < 0) {
			return false
		}
	}
	return true
}

// named lists the tasks a share names, in any role.
func named(s Share) map[task.ID]bool {
	out := make(map[task.ID]bool, len(s.Active)+len(s.Standby)+len(s.Warmup))
	for _, ids := range [][]task.ID{s.Active, s.Standby, s.Warmup} {
		for _, id := range ids {
			out[id] = true
		}
	}
	return out
}

// releaseAhead lets the stores opened ahead of claims go once every
// thread's share is current (until then a thread still to hear may be
// given any task), but those some share names.
func (c *Core) releaseAhead() {
	if !c.settled() || c.mode != ModeOpen {
		return
	}
	keep := make(map[task.ID]bool)
	for _, s := range c.shares {
		maps.Copy(keep, named(s))
	}
	c.emit(Action{Kind: ActReleaseAhead, Keep: slices.SortedFunc(maps.Keys(keep), task.ID.Compare)})
}
