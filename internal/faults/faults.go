// Package faults injects into an Eddy instance the failures that the
// integration tests, the demo and the benchmarks stage, and that no
// application should: they stay out of runtime.App's API, reachable only
// from inside this module.
package faults

// Kill stops app the way a crash would: its network connections are cut
// first, so the group is not told it left and nothing more is committed;
// then its clients and stores are closed without writing uncommitted work.
// The group moves its tasks after the session timeout.
//
// Kill is a variable set by package runtime in its init: runtime imports
// this package, so its App cannot be named here.
var Kill func(app App)

// App is a *runtime.App, or a value embedding one: the only types that
// embed a Target, which no package outside this module can name.
type App interface{ target() }

// Target is embedded in runtime.App (through an unexported alias, so that
// it does not show) to make it an App.
type Target struct{}

func (Target) target() {}
