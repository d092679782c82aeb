package runtime

import "github.com/eddystreams/eddy/internal/faults"

// killable is an App, or a test harness's type embedding one.
type killable interface{ kill() }

func init() {
	faults.Kill = func(app any) { app.(killable).kill() }
}
