package runtime

import "github.com/eddystreams/eddy/internal/faults"

// faultsTarget, embedded in App, makes an App (and a test harness's value
// embedding one) a faults.App; the alias keeps the field unexported.
type faultsTarget = faults.Target

// killable is an App, or a test harness's type embedding one.
type killable interface{ kill() }

func init() {
	faults.Kill = func(app faults.App) { app.(killable).kill() }
}
