//go:build unix

package runtime

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// raiseFileLimit lifts a lowered soft limit back to the hard limit.
func TestRaiseFileLimit(t *testing.T) {
	var orig syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig))
	if orig.Max < 2048 {
		t.Skipf("hard limit %d leaves no room to lower the soft one", orig.Max)
	}
	t.Cleanup(func() { require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig)) })
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 1024, Max: orig.Max}))

	got, err := raiseFileLimit()
	require.NoError(t, err)
	require.Equal(t, orig.Max, got)
	var now syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now))
	require.Equal(t, orig.Max, now.Cur)
}
