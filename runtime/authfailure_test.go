package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/eddystreams/eddy/broker"
)

// A wrong password stops Start at once, with an error that says
// authentication failed, for which mechanism and user, and what to check.
func TestStartFailsFastOnAuthenticationFailure(t *testing.T) {
	b, certs, _ := securedBroker(t)
	tc, err := certs.ClientTLS(false)
	require.NoError(t, err)
	for _, mech := range []string{broker.MechanismSCRAMSHA512, broker.MechanismPlain} {
		m, err := broker.ClientMechanism(mech, "eddy", "wrong")
		require.NoError(t, err)
		app, err := New(countTopology(t), Config{ApplicationID: "g", Brokers: b.Addrs(), StateDir: t.TempDir(), TLS: tc, SASL: m})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		began := time.Now()
		err = app.Start(ctx)
		took := time.Since(began)
		cancel()
		require.ErrorIs(t, err, kerr.SaslAuthenticationFailed, mech)
		require.ErrorContains(t, err, "authentication failed: brokers", mech)
		require.ErrorContains(t, err, "refused "+mech+` as user "eddy"`)
		require.ErrorContains(t, err, "check that the brokers have this user for "+mech+" and that its password is right")
		// Generous for a loaded machine; a failure retried as a
		// network error took over 30 s.
		require.Less(t, took, 10*time.Second, mech)
		t.Logf("%s: Start failed after %v: %v", mech, took, err)
		app.Close(context.Background())
	}
}

func TestSASLUser(t *testing.T) {
	for _, mech := range []string{broker.MechanismPlain, broker.MechanismSCRAMSHA256, broker.MechanismSCRAMSHA512} {
		m, err := broker.ClientMechanism(mech, "a,b=c", "pw")
		require.NoError(t, err)
		require.Equal(t, "a,b=c", saslUser(m), mech)
	}
}
