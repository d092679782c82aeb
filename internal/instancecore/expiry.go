package instancecore

import (
	"slices"
	"time"

	"github.com/eddystreams/eddy/task"
)

// Config is what the core is told of its instance when it is made.
type Config struct {
	// Threads is the number of stream threads.
	Threads int
	// CleanupDelay is how long a task directory stays on disk, open
	// nowhere, before it is deleted.
	CleanupDelay time.Duration
	// OnDisk are the task directories found on disk.
	OnDisk []Dir
	// OnThreadFailure is what becomes of a thread that fails
	// (EvThreadFailed).
	OnThreadFailure ThreadPolicy
	// MaxReplacements is how many times in a row ReplaceThread replaces
	// a thread for the same failure; the next time it stops the thread.
	MaxReplacements int
	// ReplacementWindow is how far apart two failures may be to count as
	// in a row.
	ReplacementWindow time.Duration
}

// Dir is a task directory left on disk.
type Dir struct {
	Task task.ID
	// Left is when it was last written: its cleanup delay runs from then.
	Left time.Time
}

// advance moves the core's clock to at, never back.
func (c *Core) advance(at time.Time) {
	if at.After(c.now) {
		c.now = at
	}
}

// leave records a task's directory as left on disk, open nowhere, as of
// the core's now: it expires a cleanup delay later.
func (c *Core) leave(id task.ID) { c.onDisk[id] = c.now.Add(c.cfg.CleanupDelay) }

// Expiry returns when a directory left on disk is to be deleted.
func (c *Core) Expiry(id task.ID) (time.Time, bool) {
	at, ok := c.onDisk[id]
	return at, ok
}

// expire deletes, while the instance is open, every directory left on
// disk whose cleanup delay has passed by now. A paused or closing
// instance deletes none: the next tick once it is open again does.
func (c *Core) expire() {
	if c.mode != ModeOpen {
		return
	}
	var due []task.ID
	for id, at := range c.onDisk {
		if !at.After(c.now) {
			due = append(due, id)
		}
	}
	slices.SortFunc(due, task.ID.Compare)
	for _, id := range due {
		c.delete(id)
	}
}
