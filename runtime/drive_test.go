package runtime

// Every test of the package checks, at every step of every thread's core,
// that the core and the thread agree on the tasks the thread holds.
func init() { coreChecked.Store(true) }
