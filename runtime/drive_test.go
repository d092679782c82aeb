package runtime

// dropAll closes a test rig's tasks without committing, behind the core's
// back: only where no step follows (a rig's end).
func (th *thread) dropAll() {
	th.closeTasks(th.heldTasks(), false)
}
