package runtime

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/serde"
)

func TestIsUnreachable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, err := range []error{
		refused,
		fmt.Errorf("unable to dial: %w", refused),
		errors.Join(errors.New("describe"), fmt.Errorf("create topics: %w", refused)),
		&net.DNSError{Err: "no such host", Name: "kafka-0", IsNotFound: true},
		&net.OpError{Op: "dial", Net: "tcp", Err: &timeoutErr{}},
		kerr.BrokerNotAvailable,
	} {
		require.True(t, IsUnreachable(err), "%v", err)
	}
	for _, err := range []error{
		nil,
		errors.New("runtime: source topic \"in\" does not exist"),
		kerr.TopicAuthorizationFailed,
		kerr.SaslAuthenticationFailed,
		tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"},
		context.Canceled,
	} {
		require.False(t, IsUnreachable(err), "%v", err)
	}
}

type timeoutErr struct{}

func (*timeoutErr) Error() string { return "i/o timeout" }
func (*timeoutErr) Timeout() bool { return true }

// freeAddr returns a loopback address nothing listens on (for now).
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// An instance started before its broker waits for it, saying so in its
// log, and runs once the broker is up; Close while it waits ends the wait.
func TestStartWaitsForUnreachableBroker(t *testing.T) {
	t.Run("broker comes up", func(t *testing.T) {
		addr := freeAddr(t)
		logs := &logSink{}
		app, err := New(countTopology(t), Config{ApplicationID: "late", Brokers: []string{addr}, StateDir: t.TempDir(),
			CommitInterval: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
		require.NoError(t, err)
		started := make(chan error, 1)
		go func() { started <- app.Start(context.Background()) }()
		waitFor(t, 10*time.Second, "two attempts logged", func() bool {
			return strings.Count(logs.String(), "no broker reachable") >= 2
		})
		select {
		case err := <-started:
			t.Fatalf("Start returned before the broker was up: %v", err)
		default:
		}
		require.Contains(t, logs.String(), "connection refused")

		b, err := broker.Start(broker.Config{Listen: addr, Partitions: 2})
		require.NoError(t, err)
		t.Cleanup(b.Close)
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("in"), kgo.AllowAutoTopicCreation())
		require.NoError(t, err)
		defer cl.Close()
		// The source topic must exist for Start to get past its checks.
		require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte("k"), Value: []byte("v")}).FirstErr())
		select {
		case err := <-started:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("Start did not return within 30 s of the broker coming up")
		}
		defer app.Close(context.Background())
		waitFor(t, 20*time.Second, "the record counted", func() bool {
			v, found, _, err := activeGet(app, "counts", []byte("k"))
			if err != nil || !found {
				return false
			}
			n, _ := serde.Int64.Decode(v)
			return n == 1
		})
	})

	t.Run("close while waiting", func(t *testing.T) {
		app, err := New(countTopology(t), Config{ApplicationID: "never", Brokers: []string{freeAddr(t)}, StateDir: t.TempDir(),
			Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		started := make(chan error, 1)
		go func() { started <- app.Start(context.Background()) }()
		waitFor(t, 10*time.Second, "Start under way", func() bool { return app.State() == StateRebalancing })
		closed := make(chan error, 1)
		go func() { closed <- app.Close(context.Background()) }()
		select {
		case err := <-started:
			require.Error(t, err)
			require.True(t, IsUnreachable(err), "%v", err)
			require.ErrorContains(t, err, "closed")
		case <-time.After(10 * time.Second):
			t.Fatal("Start still waiting 10 s after Close")
		}
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not return")
		}
		require.Equal(t, StateFailed, app.State())
	})

	t.Run("context ends the wait", func(t *testing.T) {
		app, err := New(countTopology(t), Config{ApplicationID: "deadline", Brokers: []string{freeAddr(t)}, StateDir: t.TempDir(),
			Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err = app.Start(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.True(t, IsUnreachable(err), "%v", err)
		require.ErrorContains(t, err, "no broker of ["+app.cfg.Brokers[0]+"] reachable")
	})
}
