package broker

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kfake authenticates only clients that send SaslHandshake v1 followed by
// SaslAuthenticate requests, as franz-go does. Kafka also serves
// SaslHandshake v0, after which the client sends its SASL tokens as bare
// size-prefixed frames, and lists SaslHandshake from v0 in ApiVersions;
// librdkafka refuses to authenticate with a broker whose ApiVersions does
// not include v0, and kafka-python speaks v0. Kafka also answers a failed
// SaslAuthenticate with SASL_AUTHENTICATION_FAILED before closing the
// connection, where kfake closes it without a word, so that a client
// could not tell a wrong password from a broken connection.
//
// saslListener closes these gaps on the wire, between each client and
// kfake, until the connection has authenticated; from then on the
// connection's bytes pass through untouched.
type saslListener struct {
	net.Listener
	// closed is set when kfake shuts the listener down, before it drops
	// its connections: a SaslAuthenticate cut short then did not fail.
	closed *atomic.Bool
	logger *slog.Logger
}

func newSASLListener(l net.Listener, logger *slog.Logger) saslListener {
	return saslListener{Listener: l, closed: new(atomic.Bool), logger: logger}
}

func (l saslListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &saslConn{Conn: c, closing: l.closed, logger: l.logger, pending: make(map[int32]pendingReq)}, nil
}

func (l saslListener) Close() error {
	l.closed.Store(true)
	return l.Listener.Close()
}

// pendingReq is a request of the authentication exchange that kfake has
// not answered yet.
type pendingReq struct {
	key, version int16
	// raw marks a SaslAuthenticate made up from a bare SASL token, whose
	// answer goes back to the client as a bare token.
	raw bool
}

// maxUnauthenticatedFrame bounds what a client may send before it has
// authenticated, as Kafka's sasl.server.max.receive.size (its default)
// does: a stranger cannot make the broker allocate gigabytes.
const maxUnauthenticatedFrame = 512 << 10

// rawCorrelationID is the correlation ID of the SaslAuthenticate requests
// made up from bare tokens. The client never sees it.
const rawCorrelationID = -1

// saslFailedMessage is Kafka's message for a failed authentication.
func saslFailedMessage(mechanism string) string {
	if mechanism == MechanismPlain {
		return "Authentication failed: Invalid username or password"
	}
	return "Authentication failed during authentication due to invalid credentials with SASL mechanism " + mechanism
}

// saslConn is one client connection as kfake sees it. kfake reads each
// request with two reads (size, then body) from one goroutine and writes
// each response with one Write from another.
type saslConn struct {
	net.Conn
	closing *atomic.Bool
	logger  *slog.Logger

	// authed is set once the client has authenticated; Read and Write
	// then pass through.
	authed atomic.Bool

	// in holds what kfake reads next; only Read touches it.
	in []byte
	// out gathers kfake's partial response frames; only Write touches it.
	out []byte

	wmu sync.Mutex // serializes writes to the client

	mu        sync.Mutex
	pending   map[int32]pendingReq
	mechanism string // of the last successful handshake
	steps     int    // successful SaslAuthenticate rounds still to come
	raw       bool   // the client sends bare SASL tokens
	closeOnce sync.Once
}

// saslSteps is how many SaslAuthenticate rounds a mechanism takes.
func saslSteps(mechanism string) int {
	if mechanism == MechanismPlain {
		return 1
	}
	return 2 // SCRAM: client-first, then client-final
}

func (c *saslConn) Read(p []byte) (int, error) {
	for len(c.in) == 0 {
		if c.authed.Load() {
			return c.Conn.Read(p)
		}
		var size [4]byte
		if _, err := io.ReadFull(c.Conn, size[:]); err != nil {
			return 0, err
		}
		n := binary.BigEndian.Uint32(size[:])
		if n > maxUnauthenticatedFrame {
			return 0, fmt.Errorf("broker: %d bytes sent before authenticating, over the %d allowed", n, maxUnauthenticatedFrame)
		}
		frame := make([]byte, n)
		if _, err := io.ReadFull(c.Conn, frame); err != nil {
			return 0, err
		}
		c.in = c.fromClient(frame)
	}
	n := copy(p, c.in)
	c.in = c.in[n:]
	return n, nil
}

// fromClient notes the requests whose answers matter here and turns bare
// SASL tokens into SaslAuthenticate requests. It returns the size-prefixed
// frame kfake is to read.
func (c *saslConn) fromClient(frame []byte) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.raw {
		req := kmsg.NewSASLAuthenticateRequest()
		req.SASLAuthBytes = frame
		c.pending[rawCorrelationID] = pendingReq{key: req.Key(), raw: true}
		body := kbin.AppendInt16(nil, req.Key())
		body = kbin.AppendInt16(body, 0)
		body = kbin.AppendInt32(body, rawCorrelationID)
		body = kbin.AppendNullableString(body, nil)
		return sizePrefixed(req.AppendTo(body))
	}
	if len(frame) >= 8 {
		key := int16(binary.BigEndian.Uint16(frame))
		version := int16(binary.BigEndian.Uint16(frame[2:]))
		corr := int32(binary.BigEndian.Uint32(frame[4:]))
		switch kmsg.Key(key) {
		case kmsg.SASLHandshake:
			if version == 0 {
				// v0 and v1 requests and responses are the same;
				// what differs is what follows, which the
				// response decides (see toClient).
				binary.BigEndian.PutUint16(frame[2:], 1)
			}
			c.pending[corr] = pendingReq{key: key, version: version}
			c.mechanism = handshakeMechanism(frame)
		case kmsg.ApiVersions, kmsg.SASLAuthenticate:
			c.pending[corr] = pendingReq{key: key, version: version}
		}
	}
	return sizePrefixed(frame)
}

// handshakeMechanism reads the mechanism a SaslHandshake request frame
// asks for.
func handshakeMechanism(frame []byte) string {
	r := kbin.Reader{Src: frame[8:]}
	r.NullableString() // client ID
	req := kmsg.NewSASLHandshakeRequest()
	req.Version = 1
	if req.ReadFrom(r.Src) != nil {
		return ""
	}
	return req.Mechanism
}

func sizePrefixed(b []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

func (c *saslConn) Write(p []byte) (int, error) {
	if c.authed.Load() && len(c.out) == 0 {
		return c.write(p)
	}
	c.out = append(c.out, p...)
	for len(c.out) >= 4 {
		n := int(binary.BigEndian.Uint32(c.out))
		if len(c.out) < 4+n {
			break
		}
		frame := c.out[4 : 4+n]
		c.out = c.out[4+n:]
		send, closeAfter := c.toClient(frame)
		if send != nil {
			if _, err := c.write(send); err != nil {
				return 0, err
			}
		}
		if closeAfter {
			c.Conn.Close()
			return 0, net.ErrClosed
		}
	}
	if len(c.out) == 0 {
		c.out = nil
	}
	return len(p), nil
}

func (c *saslConn) write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.Conn.Write(b)
}

// toClient returns what to send the client for kfake's response frame
// (size prefix stripped), and whether to close the connection after.
func (c *saslConn) toClient(frame []byte) (send []byte, closeAfter bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(frame) < 4 {
		return sizePrefixed(frame), false
	}
	corr := int32(binary.BigEndian.Uint32(frame))
	req, ok := c.pending[corr]
	if !ok {
		return sizePrefixed(frame), false
	}
	delete(c.pending, corr)
	switch kmsg.Key(req.key) {
	case kmsg.ApiVersions:
		return sizePrefixed(advertiseHandshakeV0(frame, req.version)), false
	case kmsg.SASLHandshake:
		if errCode(frame[4:]) == 0 {
			c.raw = req.version == 0
			c.steps = saslSteps(c.mechanism)
		}
		return sizePrefixed(listMechanisms(frame)), false
	}
	// SaslAuthenticate.
	resp := kmsg.NewSASLAuthenticateResponse()
	resp.Version = req.version
	body := frame[4:]
	if resp.IsFlexible() {
		body = body[1:] // the response header's empty tag section
	}
	if err := resp.ReadFrom(body); err != nil || resp.ErrorCode != 0 {
		if req.raw {
			c.logFailure(c.mechanism)
			return nil, true // v0 has no way to say why
		}
		return sizePrefixed(frame), false
	}
	if c.steps--; c.steps <= 0 {
		c.raw = false
		c.authed.Store(true)
	}
	if req.raw {
		return sizePrefixed(resp.SASLAuthBytes), false
	}
	return sizePrefixed(frame), false
}

func errCode(body []byte) int16 {
	if len(body) < 2 {
		return -1
	}
	return int16(binary.BigEndian.Uint16(body))
}

// listMechanisms rewrites a SaslHandshake response frame to list the
// enabled mechanisms whatever its outcome, as Kafka does: kafka-python
// gives up on a broker whose successful handshake lists none.
func listMechanisms(frame []byte) []byte {
	resp := kmsg.NewSASLHandshakeResponse()
	resp.Version = 1
	if resp.ReadFrom(frame[4:]) != nil || len(resp.SupportedMechanisms) > 0 {
		return frame
	}
	resp.SupportedMechanisms = []string{MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512}
	return resp.AppendTo(frame[:4:4])
}

// advertiseHandshakeV0 rewrites an ApiVersions response frame to list
// SaslHandshake from v0, as Kafka does.
func advertiseHandshakeV0(frame []byte, version int16) []byte {
	if errCode(frame[4:]) != 0 {
		return frame // a version downgrade: kfake answered v0
	}
	resp := kmsg.NewApiVersionsResponse()
	resp.Version = version
	// ApiVersions responses never carry a tag section in their header.
	if resp.ReadFrom(frame[4:]) != nil {
		return frame
	}
	for i := range resp.ApiKeys {
		if resp.ApiKeys[i].ApiKey == int16(kmsg.SASLHandshake) {
			resp.ApiKeys[i].MinVersion = 0
		}
	}
	return resp.AppendTo(frame[:4:4])
}

// Close answers a SaslAuthenticate that kfake closed the connection on,
// instead of answering it, with Kafka's SASL_AUTHENTICATION_FAILED.
func (c *saslConn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		var failed []byte
		mechanism := c.mechanism
		for corr, req := range c.pending {
			if req.key == int16(kmsg.SASLAuthenticate) && !req.raw && !c.closing.Load() {
				failed = authFailedFrame(corr, req.version, c.mechanism)
			}
		}
		c.mu.Unlock()
		if failed != nil {
			c.logFailure(mechanism)
			// A client that reads nothing must not hold the close
			// up for long.
			_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = c.write(failed)
		}
	})
	return c.Conn.Close()
}

// logFailure logs a failed authentication as Kafka does, naming the
// client and the mechanism (never what the client sent).
func (c *saslConn) logFailure(mechanism string) {
	c.logger.Info("failed authentication", "client", c.RemoteAddr().String(), "err", saslFailedMessage(mechanism))
}

func authFailedFrame(corr int32, version int16, mechanism string) []byte {
	resp := kmsg.NewSASLAuthenticateResponse()
	resp.Version = version
	resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
	msg := saslFailedMessage(mechanism)
	resp.ErrorMessage = &msg
	b := kbin.AppendInt32(nil, corr)
	if resp.IsFlexible() {
		b = append(b, 0)
	}
	return sizePrefixed(resp.AppendTo(b))
}
