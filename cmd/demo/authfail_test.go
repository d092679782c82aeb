package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/broker"
)

// A wrong password stops `demo instance`, `produce` and `reset` at once,
// with an error that says authentication failed, for which mechanism and
// user, and what to check.
func TestCommandsFailFastOnWrongPassword(t *testing.T) {
	b, err := broker.Start(broker.Config{Partitions: 2, Users: []broker.User{
		{Mechanism: broker.MechanismSCRAMSHA512, Name: "alice", Password: "alice-pw", Superuser: true},
	}})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	brokers := strings.Join(b.Addrs(), ",")
	sasl := []string{"--brokers", brokers, "--sasl-user", "alice", "--sasl-password", "wrong"}
	for _, args := range [][]string{
		append([]string{"instance", "--state-dir", t.TempDir(), "--http", "127.0.0.1:0"}, sasl...),
		append([]string{"produce"}, sasl...),
		append([]string{"reset"}, sasl...),
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		began := time.Now()
		_, _, err := runCmd(ctx, "a line\n", args...)
		took := time.Since(began)
		cancel()
		require.Error(t, err, args[0])
		msg := err.Error()
		require.Contains(t, msg, `authentication failed: brokers [`+b.Addrs()[0]+`] refused SCRAM-SHA-512 as user "alice"`, args[0])
		require.Contains(t, msg, "check that the brokers have this user for SCRAM-SHA-512 and that its password is right", args[0])
		require.NotContains(t, msg, "wrong", "the password stays secret")
		// Generous for a loaded machine; retried as a network error,
		// an instance gave up after 32 s.
		require.Less(t, took, 10*time.Second, args[0])
		t.Logf("%s failed after %v: %v", args[0], took, err)
	}
}
