package runtime

import (
	"testing"

	"github.com/eddystreams/eddy/internal/instancecore"
)

// Every OnStreamThreadError policy reaches the instance core as the policy
// of the same meaning; an unknown one (Config.Validate refuses it) stops.
func TestThreadPolicyForTheCore(t *testing.T) {
	for p, want := range map[StreamThreadErrorPolicy]instancecore.ThreadPolicy{
		ShutdownInstance:    instancecore.StopThread,
		ReplaceThread:       instancecore.ReplaceThread,
		ShutdownApplication: instancecore.ShutdownApplication,
		42:                  instancecore.StopThread,
	} {
		if got := threadPolicy(p); got != want {
			t.Errorf("%s: %s, want %s", p, got, want)
		}
	}
}
