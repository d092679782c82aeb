package runtime

import "github.com/eddystreams/eddy/internal/faults"

func init() {
	faults.Kill = func(app any) { app.(*App).Kill() }
}
