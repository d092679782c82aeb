package runtime

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/threadcore"
)

// A record in flight on a connection the thread reset itself (the session
// bound passed, or its partitions were lost) fails with the connection's
// error, not the record's: under at-least-once the commit it fails is a
// lost session, after which the thread rejoins, not a fatal error that
// stops the instance.
func TestCommitFailedByAResetConnectionRejoins(t *testing.T) {
	app, err := New(countTopology(t), Config{ApplicationID: "cause", Brokers: []string{"127.0.0.1:1"}, StateDir: t.TempDir()})
	require.NoError(t, err)
	th := &thread{app: app}
	closed := fmt.Errorf("runtime: commit: runtime: produce to out/3: %w",
		&net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed})
	reset := fmt.Errorf("runtime: commit: %w", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)})
	for _, err := range []error{closed, reset} {
		require.True(t, sessionLost(err), "%v dooms the uncommitted work", err)
		require.Equal(t, threadcore.CauseRefused, th.cause(err), "%v", err)
	}
	require.Equal(t, threadcore.CauseFatal, th.cause(errors.New("runtime: commit: something else")))
}
