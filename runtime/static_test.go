package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// With static membership an instance restarted after kill -9 takes its
// place back at once instead of waiting out its dead self's session (20 s
// here), keeps exactly-once counts exact, and a clean Close still leaves
// the group at once.
func TestStaticMembershipRestartAfterKill(t *testing.T) {
	t.Parallel()
	c := newEOSCluster(t)
	dir := t.TempDir()
	start := func() *App {
		app, err := New(countTopology(t), Config{
			ApplicationID: "static", Brokers: c.b.Addrs(), StateDir: dir,
			ProcessingGuarantee: ExactlyOnce, SessionTimeout: 20 * time.Second,
			StaticMembership: true, NumStreamThreads: testThreads(t),
		})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		return app
	}
	app := start()
	want := map[string]int64{}
	c.produce(t, 300, want)
	waitCounts(t, app, want)
	app.Kill()

	restarted := time.Now()
	app = start()
	// Well under the 20 s session timeout the dead members would hold
	// their places for without static membership.
	waitFor(t, 10*time.Second, "the restarted instance ready", app.Ready)
	t.Logf("ready %s after the restart", time.Since(restarted).Round(time.Millisecond))
	c.produce(t, 300, want)
	waitCounts(t, app, want)

	require.NoError(t, app.Close(context.Background()))
	require.Equal(t, 0, groupMembers(t, c.adm, "static"), "a closed static instance leaves the group")
}
