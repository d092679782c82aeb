package broker

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// securedBroker starts a broker speaking TLS and SASL with ACLs on, with a
// superuser "admin" (SCRAM-SHA-512) and a user "reader" (SCRAM-SHA-256)
// allowed to read and describe topic "t" only.
func securedBroker(t *testing.T) (*Broker, *Certs) {
	t.Helper()
	certs, err := GenerateCerts()
	require.NoError(t, err)
	srv, err := certs.ServerTLS(false)
	require.NoError(t, err)
	b := start(t, Config{
		TLS: srv,
		Users: []User{
			{Mechanism: MechanismSCRAMSHA512, Name: "admin", Password: "admin-pw", Superuser: true},
			{Mechanism: MechanismSCRAMSHA256, Name: "reader", Password: "reader-pw", ACLs: []ACL{
				{Resource: kmsg.ACLResourceTypeTopic, Name: "t", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationRead, Allow: true},
			}},
		},
		EnableACLs: true,
	})
	return b, certs
}

// secureClient connects to b over TLS as the given user.
func secureClient(t *testing.T, b *Broker, certs *Certs, mech, user, pass string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	tc, err := certs.ClientTLS(false)
	require.NoError(t, err)
	m, err := ClientMechanism(mech, user, pass)
	require.NoError(t, err)
	return newClient(t, b, append([]kgo.Opt{kgo.DialTLSConfig(tc), kgo.SASL(m), kgo.RequestRetries(0)}, opts...)...)
}

func TestSecurityTLSSASLAndACLs(t *testing.T) {
	ctx := testCtx(t)
	b, certs := securedBroker(t)

	admin := kadm.NewClient(secureClient(t, b, certs, MechanismSCRAMSHA512, "admin", "admin-pw"))
	_, err := admin.CreateTopic(ctx, 1, -1, nil, "t")
	require.NoError(t, err)

	// The reader may read "t" but not write it (nor, without Write on any
	// topic or IdempotentWrite on the cluster, get an idempotent producer
	// ID).
	reader := secureClient(t, b, certs, MechanismSCRAMSHA256, "reader", "reader-pw")
	err = reader.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("x")}).FirstErr()
	require.ErrorIs(t, err, kerr.ClusterAuthorizationFailed)
	plainProducer := secureClient(t, b, certs, MechanismSCRAMSHA256, "reader", "reader-pw", kgo.DisableIdempotentWrite())
	err = plainProducer.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("x")}).FirstErr()
	require.ErrorIs(t, err, kerr.TopicAuthorizationFailed)
	offs, err := kadm.NewClient(reader).ListEndOffsets(ctx, "t")
	require.NoError(t, err)
	require.NoError(t, offs.Error())

	// A wrong password, no SASL, or no TLS gets nowhere.
	bad := secureClient(t, b, certs, MechanismSCRAMSHA256, "reader", "wrong")
	require.Error(t, bad.Ping(ctx))
	short, cancel := context.WithTimeout(ctx, 2e9)
	defer cancel()
	tc, err := certs.ClientTLS(false)
	require.NoError(t, err)
	require.Error(t, newClient(t, b, kgo.DialTLSConfig(tc), kgo.RequestRetries(0)).Ping(short))
	short2, cancel2 := context.WithTimeout(ctx, 2e9)
	defer cancel2()
	require.Error(t, newClient(t, b, kgo.RequestRetries(0)).Ping(short2))
}

// The broker's own clients (the group guard's heartbeats for waiting
// members, the log start keeper's topic listing) work under TLS, SASL and
// ACLs: they authenticate as a superuser of their own.
func TestSecurityInternalClientsAreSuperusers(t *testing.T) {
	ctx := testCtx(t)
	b, certs := securedBroker(t)

	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation = "some-group", "m", 1
	resp, err := hb.RequestWith(ctx, b.groups.cl)
	require.NoError(t, err)
	require.NotEqual(t, kerr.GroupAuthorizationFailed.Code, resp.ErrorCode, "the guard's heartbeats are authorized")

	admin := kadm.NewClient(secureClient(t, b, certs, MechanismSCRAMSHA512, "admin", "admin-pw"))
	_, err = admin.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact")}, "c")
	require.NoError(t, err)
	require.NoError(t, b.compact(ctx))
	b.starts.mu.Lock()
	_, tracked := b.starts.topics["c"]
	b.starts.mu.Unlock()
	require.True(t, tracked, "the log start keeper saw the compacted topic")

	// The reader, who may not describe "c", does not see it.
	md, err := kadm.NewClient(secureClient(t, b, certs, MechanismSCRAMSHA256, "reader", "reader-pw")).Metadata(ctx, "c")
	if err == nil {
		err = md.Topics["c"].Err
	}
	require.ErrorIs(t, err, kerr.TopicAuthorizationFailed)
}

func TestSecurityConfigErrors(t *testing.T) {
	for name, cfg := range map[string]Config{
		"acls without users": {EnableACLs: true},
		"unknown mechanism":  {Users: []User{{Mechanism: "GSSAPI", Name: "u", Password: "p"}}},
		"reserved name":      {Users: []User{{Mechanism: MechanismPlain, Name: internalUser, Password: "p"}}},
	} {
		_, err := Start(cfg)
		require.Error(t, err, name)
	}
}

func TestCertsRoundTripThroughFiles(t *testing.T) {
	certs, err := GenerateCerts("broker.example")
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "tls")
	require.NoError(t, certs.WriteFiles(dir))
	back, err := ReadCerts(dir)
	require.NoError(t, err)
	require.Equal(t, certs, back)
	_, err = back.ServerTLS(true)
	require.NoError(t, err)
	_, err = back.ClientTLS(true)
	require.NoError(t, err)
	_, err = ReadCerts(t.TempDir())
	require.ErrorIs(t, err, fs.ErrNotExist)
}

// Under mutual TLS the broker's own clients present its server
// certificate, which the CA signed for client use too.
func TestSecurityMutualTLS(t *testing.T) {
	ctx := testCtx(t)
	certs, err := GenerateCerts()
	require.NoError(t, err)
	srv, err := certs.ServerTLS(true)
	require.NoError(t, err)
	b := start(t, Config{TLS: srv})
	withCert, err := certs.ClientTLS(true)
	require.NoError(t, err)
	require.NoError(t, newClient(t, b, kgo.DialTLSConfig(withCert)).Ping(ctx))
	noCert, err := certs.ClientTLS(false)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 2e9)
	defer cancel()
	require.Error(t, newClient(t, b, kgo.DialTLSConfig(noCert), kgo.RequestRetries(0)).Ping(short))
	require.NoError(t, b.compact(ctx), "the log start keeper lists topics over mutual TLS")
}

// A broker restarted on its DataDir has the users and ACLs its
// configuration gives, not those it was stopped with: a password changed
// or a rule taken out is so, and the broker's own clients, whose password
// is new at each start, log in.
func TestACLsFollowTheConfigurationAcrossRestarts(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	cfg := func(topic, bobPass string) Config {
		return Config{DataDir: dir, EnableACLs: true, Users: []User{
			{Mechanism: MechanismSCRAMSHA512, Name: "admin", Password: "admin-pw", Superuser: true},
			{Mechanism: MechanismSCRAMSHA512, Name: "bob", Password: bobPass, ACLs: []ACL{
				{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationRead, Allow: true},
			}},
		}}
	}
	client := func(b *Broker, user, pass string) *kadm.Client {
		m, err := ClientMechanism(MechanismSCRAMSHA512, user, pass)
		require.NoError(t, err)
		return kadm.NewClient(newClient(t, b, kgo.SASL(m), kgo.RequestRetries(0)))
	}
	b, err := Start(cfg("t1", "old-pw"))
	require.NoError(t, err)
	_, err = client(b, "admin", "admin-pw").CreateTopics(ctx, 1, -1, nil, "t1", "t2")
	require.NoError(t, err)
	b.Close()

	b = start(t, cfg("t2", "new-pw"))
	_, err = client(b, "bob", "old-pw").ListEndOffsets(ctx, "t2")
	require.ErrorIs(t, err, kerr.SaslAuthenticationFailed, "the password was changed")
	bob := client(b, "bob", "new-pw")
	offs, err := bob.ListEndOffsets(ctx, "t2")
	require.NoError(t, err)
	require.NoError(t, offs.Error())
	offs, err = bob.ListEndOffsets(ctx, "t1")
	if err == nil {
		err = offs.Error()
	}
	require.ErrorIs(t, err, kerr.TopicAuthorizationFailed, "the rule for t1 was taken out")
}
