package runtime

import (
	"maps"
	"slices"
)

// Every test of the package checks, at every step of every thread's core,
// that the core and the thread agree on the tasks the thread holds.
func init() { coreChecked.Store(true) }

// dropAll closes a test rig's tasks without committing, behind the core's
// back: only where no step follows (a rig's end).
func (th *thread) dropAll() {
	th.closeTasks(slices.Collect(maps.Values(th.tasks)), false)
}
