package runtime

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/eddystreams/eddy/broker"
)

func TestTLSConflictingClientOptionsAreRefused(t *testing.T) {
	dial := func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("unused") }
	base := Config{ApplicationID: "g", Brokers: []string{"localhost:9092"}, TLS: &tls.Config{}}
	for name, tc := range map[string]struct {
		opts []kgo.Opt
		want string
	}{
		"DialTLSConfig": {[]kgo.Opt{kgo.DialTLSConfig(&tls.Config{})}, "set Config.TLS instead"},
		"Dialer":        {[]kgo.Opt{kgo.Dialer(dial)}, "replace the dialer Eddy gives every client"},
		"both":          {[]kgo.Opt{kgo.Dialer(dial), kgo.DialTLSConfig(&tls.Config{})}, "set Config.TLS for TLS"},
	} {
		cfg := base
		cfg.ClientOptions = tc.opts
		_, err := New(countTopology(t), cfg)
		require.ErrorContains(t, err, tc.want, name)
		require.ErrorContains(t, err, "ClientOptions", name)
	}
	cfg := base
	cfg.ClientOptions = []kgo.Opt{kgo.ClientID("x"), kgo.SASL(plain.Auth{User: "u", Pass: "p"}.AsMechanism())}
	_, err := New(countTopology(t), cfg)
	require.NoError(t, err, "options that leave the dialer alone are fine")
}

// securedBroker starts a broker that speaks only TLS and SASL, with a
// SCRAM-SHA-512 superuser "eddy" and a PLAIN superuser "plain", and the
// topic "in".
func securedBroker(t *testing.T) (*broker.Broker, *broker.Certs, *kadm.Client) {
	t.Helper()
	certs, err := broker.GenerateCerts()
	require.NoError(t, err)
	srv, err := certs.ServerTLS(false)
	require.NoError(t, err)
	b, err := broker.Start(broker.Config{Partitions: 2, TLS: srv, Users: []broker.User{
		{Mechanism: broker.MechanismSCRAMSHA512, Name: "eddy", Password: "eddy-pw", Superuser: true},
		{Mechanism: broker.MechanismPlain, Name: "plain", Password: "plain-pw", Superuser: true},
	}})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	tc, err := certs.ClientTLS(false)
	require.NoError(t, err)
	m, err := broker.ClientMechanism(broker.MechanismSCRAMSHA512, "eddy", "eddy-pw")
	require.NoError(t, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DialTLSConfig(tc), kgo.SASL(m))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	_, err = adm.CreateTopics(context.Background(), 2, -1, nil, "in")
	require.NoError(t, err)
	return b, certs, adm
}

// Kill severs TLS connections as it severs plain ones: the handshake runs
// over the connection Eddy's dialer tracks.
func TestKillSeversTLSConnections(t *testing.T) {
	t.Parallel()
	b, certs, adm := securedBroker(t)
	tc, err := certs.ClientTLS(false)
	require.NoError(t, err)
	m, err := broker.ClientMechanism(broker.MechanismSCRAMSHA512, "eddy", "eddy-pw")
	require.NoError(t, err)
	app, err := New(countTopology(t), Config{ApplicationID: "g", Brokers: b.Addrs(), StateDir: t.TempDir(),
		SessionTimeout: 20 * time.Second, TLS: tc, SASL: m})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	waitFor(t, 15*time.Second, "ready", app.Ready)
	require.Equal(t, DefaultNumStreamThreads, groupMembers(t, adm, "g"))

	app.net.mu.Lock()
	var open []*trackedConn
	for c := range app.net.conns {
		open = append(open, c.(*trackedConn))
	}
	app.net.mu.Unlock()
	require.NotEmpty(t, open)

	app.Kill()
	for _, c := range open {
		// The raw connection under each TLS session is closed.
		_, err := c.Conn.Write([]byte{0})
		require.ErrorIs(t, err, net.ErrClosed)
	}
	_, err = app.net.dial(context.Background(), "tcp", b.Addrs()[0])
	require.ErrorIs(t, err, errSevered)
	require.Equal(t, DefaultNumStreamThreads, groupMembers(t, adm, "g"), "a killed instance must not have left the group")
}

// SASL given through ClientOptions composes with Eddy's dialer and
// Config.TLS: the instance joins and counts.
func TestSASLThroughClientOptionsOverTLS(t *testing.T) {
	b, certs, adm := securedBroker(t)
	tc, err := certs.ClientTLS(false)
	require.NoError(t, err)
	app, err := New(countTopology(t), Config{ApplicationID: "p", Brokers: b.Addrs(), StateDir: t.TempDir(), TLS: tc,
		ClientOptions: []kgo.Opt{kgo.SASL(plain.Auth{User: "plain", Pass: "plain-pw"}.AsMechanism())}})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	defer app.Close(context.Background())
	waitFor(t, 15*time.Second, "ready", app.Ready)
	require.Equal(t, DefaultNumStreamThreads, groupMembers(t, adm, "p"))
}

// Without the broker's CA the handshake fails and the instance never
// joins: Config.TLS verifies the broker's certificate.
func TestTLSVerifiesTheBroker(t *testing.T) {
	b, _, _ := securedBroker(t)
	app, err := New(countTopology(t), Config{ApplicationID: "v", Brokers: b.Addrs(), StateDir: t.TempDir(), TLS: &tls.Config{}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = app.Start(ctx)
	require.Error(t, err)
	require.ErrorContains(t, err, "certificate")
}
