package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// rawConn speaks the Kafka protocol by hand, as clients other than
// franz-go do.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	corr int32
}

func dialRaw(t *testing.T, b *Broker) *rawConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", b.Addrs()[0], 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, conn.SetDeadline(time.Now().Add(20*time.Second)))
	t.Cleanup(func() { conn.Close() })
	return &rawConn{t: t, conn: conn}
}

func (c *rawConn) writeFrame(b []byte) {
	c.t.Helper()
	_, err := c.conn.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b))))
	require.NoError(c.t, err)
	_, err = c.conn.Write(b)
	require.NoError(c.t, err)
}

// readFrame returns the next frame, or an error if the broker closed the
// connection.
func (c *rawConn) readFrame() ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(c.conn, size[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(c.conn, b)
	return b, err
}

// request sends req and reads its response into resp.
func (c *rawConn) request(req kmsg.Request, resp kmsg.Response) {
	c.t.Helper()
	c.corr++
	b := kbin.AppendInt16(nil, req.Key())
	b = kbin.AppendInt16(b, req.GetVersion())
	b = kbin.AppendInt32(b, c.corr)
	b = kbin.AppendNullableString(b, kmsg.StringPtr("raw"))
	if req.IsFlexible() {
		b = append(b, 0)
	}
	c.writeFrame(req.AppendTo(b))
	frame, err := c.readFrame()
	require.NoError(c.t, err, "%s", kmsg.NameForKey(req.Key()))
	require.Equal(c.t, c.corr, int32(binary.BigEndian.Uint32(frame)))
	frame = frame[4:]
	resp.SetVersion(req.GetVersion())
	if resp.IsFlexible() && req.Key() != int16(kmsg.ApiVersions) {
		frame = frame[1:]
	}
	require.NoError(c.t, resp.ReadFrom(frame))
}

// handshakeV0 asks for mechanism with SaslHandshake v0, after which SASL
// tokens go bare.
func (c *rawConn) handshakeV0(mechanism string) {
	c.t.Helper()
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.Version = 0
	req.Mechanism = mechanism
	resp := kmsg.NewPtrSASLHandshakeResponse()
	c.request(req, resp)
	require.Zero(c.t, resp.ErrorCode)
	require.Contains(c.t, resp.SupportedMechanisms, mechanism, "Kafka lists its mechanisms on success too")
}

// metadataWorks checks that the connection is authenticated.
func (c *rawConn) metadataWorks() {
	c.t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 1
	resp := kmsg.NewPtrMetadataResponse()
	c.request(req, resp)
	require.Len(c.t, resp.Brokers, 1)
}

func saslBroker(t *testing.T) *Broker {
	return start(t, Config{Users: []User{
		{Mechanism: MechanismPlain, Name: "alice", Password: "alice-pw"},
		{Mechanism: MechanismSCRAMSHA256, Name: "bob", Password: "bob-pw"},
		{Mechanism: MechanismSCRAMSHA512, Name: "carol", Password: "carol-pw"},
	}})
}

// librdkafka authenticates only with a broker whose ApiVersions lists
// SaslHandshake v0; kafka-python sends v0 and then bare tokens.
func TestSASLHandshakeV0(t *testing.T) {
	b := saslBroker(t)

	c := dialRaw(t, b)
	versions := kmsg.NewPtrApiVersionsResponse()
	c.request(kmsg.NewPtrApiVersionsRequest(), versions)
	var found bool
	for _, k := range versions.ApiKeys {
		if k.ApiKey == int16(kmsg.SASLHandshake) {
			found = true
			require.Zero(t, k.MinVersion, "SaslHandshake is served from v0")
		}
	}
	require.True(t, found)

	// PLAIN: one bare token, answered by an empty one.
	c.handshakeV0(MechanismPlain)
	c.writeFrame([]byte("\x00alice\x00alice-pw"))
	token, err := c.readFrame()
	require.NoError(t, err)
	require.Empty(t, token)
	c.metadataWorks()

	// SCRAM: two rounds of bare tokens.
	for _, tc := range []struct {
		mech       string
		user, pass string
	}{
		{MechanismSCRAMSHA256, "bob", "bob-pw"},
		{MechanismSCRAMSHA512, "carol", "carol-pw"},
	} {
		c := dialRaw(t, b)
		c.handshakeV0(tc.mech)
		auth := scram.Auth{User: tc.user, Pass: tc.pass}
		m := auth.AsSha256Mechanism()
		if tc.mech == MechanismSCRAMSHA512 {
			m = auth.AsSha512Mechanism()
		}
		session, clientFirst, err := m.Authenticate(context.Background(), b.Addrs()[0])
		require.NoError(t, err)
		c.writeFrame(clientFirst)
		serverFirst, err := c.readFrame()
		require.NoError(t, err)
		done, clientFinal, err := session.Challenge(serverFirst)
		require.NoError(t, err)
		require.False(t, done)
		c.writeFrame(clientFinal)
		serverFinal, err := c.readFrame()
		require.NoError(t, err)
		done, _, err = session.Challenge(serverFinal)
		require.NoError(t, err, "the server proves it knows the password")
		require.True(t, done)
		c.metadataWorks()
	}

	// A wrong bare token ends the connection, as on Kafka: v0 has no
	// way to say why.
	c = dialRaw(t, b)
	c.handshakeV0(MechanismPlain)
	c.writeFrame([]byte("\x00alice\x00wrong"))
	_, err = c.readFrame()
	require.Error(t, err)
}

// A wrong password is answered with SASL_AUTHENTICATION_FAILED and Kafka's
// message, not a closed connection that clients retry as a network error.
func TestSASLWrongPasswordFailsAuthentication(t *testing.T) {
	b := saslBroker(t)
	for _, tc := range []struct {
		mech, user, msg string
	}{
		{MechanismPlain, "alice", "Authentication failed: Invalid username or password"},
		{MechanismSCRAMSHA256, "bob", "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"},
		{MechanismSCRAMSHA512, "nobody", "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"},
	} {
		t.Run(tc.mech, func(t *testing.T) {
			m, err := ClientMechanism(tc.mech, tc.user, "wrong")
			require.NoError(t, err)
			// Default retries: an authentication failure is final.
			cl := newClient(t, b, kgo.SASL(m))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			began := time.Now()
			err = cl.Ping(ctx)
			require.ErrorIs(t, err, kerr.SaslAuthenticationFailed)
			require.ErrorContains(t, err, tc.msg)
			require.False(t, errors.Is(err, context.DeadlineExceeded))
			require.Less(t, time.Since(began), 10*time.Second, "no retrying")
		})
	}
}

// Before authenticating, a client cannot make the broker read (and
// allocate) more than Kafka's sasl.server.max.receive.size.
func TestSASLBoundsUnauthenticatedFrames(t *testing.T) {
	c := dialRaw(t, saslBroker(t))
	_, err := c.conn.Write(binary.BigEndian.AppendUint32(nil, 1<<30))
	require.NoError(t, err)
	_, err = c.readFrame()
	var netErr net.Error
	require.False(t, errors.As(err, &netErr) && netErr.Timeout(), "the broker closes the connection rather than wait for the rest: %v", err)
	require.Error(t, err)
}

// A failed login is logged with the client and the mechanism, and never
// with what the client sent.
func TestSASLFailureIsLogged(t *testing.T) {
	var logs syncBuffer
	b := start(t, Config{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Users:  []User{{Mechanism: MechanismSCRAMSHA256, Name: "bob", Password: "bob-pw"}},
	})
	m, err := ClientMechanism(MechanismSCRAMSHA256, "bob", "s3cret-guess")
	require.NoError(t, err)
	require.ErrorIs(t, newClient(t, b, kgo.SASL(m)).Ping(testCtx(t)), kerr.SaslAuthenticationFailed)
	// The log line is written as the connection closes, maybe after
	// the client has its answer.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "failed authentication") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.Contains(t, logs.String(), `msg="failed authentication" client=127.0.0.1:`)
	require.Contains(t, logs.String(), "with SASL mechanism SCRAM-SHA-256")
	require.NotContains(t, logs.String(), "s3cret-guess")
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
