package main

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/serde"
)

// An instance started before its broker (containers started in the wrong
// order) waits for it, saying so in its log, and counts once it is up,
// instead of exiting with "connection refused".
func TestInstanceWaitsForItsBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	logs := &syncBuffer{}
	type started struct {
		in  *instance
		err error
	}
	done := make(chan started, 1)
	go func() {
		in, err := startInstance(ctx, instanceOptions{brokers: []string{addr}, stateDir: t.TempDir(), app: "wordcount",
			logger: slog.New(slog.NewTextHandler(logs, nil))})
		done <- started{in, err}
	}()
	require.Eventually(t, func() bool { return strings.Count(logs.String(), "no broker reachable") >= 2 },
		20*time.Second, 20*time.Millisecond, "the instance logs that it waits:\n%s", logs.String())
	select {
	case s := <-done:
		t.Fatalf("the instance stopped waiting before the broker was up: %v", s.err)
	default:
	}

	b, err := broker.Start(broker.Config{Listen: addr, Partitions: 3})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	var in *instance
	select {
	case s := <-done:
		require.NoError(t, s.err)
		in = s.in
	case <-ctx.Done():
		t.Fatalf("the instance did not start once the broker was up:\n%s", logs.String())
	}
	defer in.close()

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(inputTopic))
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Value: []byte("late broker late")}).FirstErr())
	require.Eventually(t, func() bool {
		v, found, _, err := activeGet(in.app, countsStore, []byte("late"))
		if err != nil || !found {
			return false
		}
		n, _ := serde.Int64.Decode(v)
		return n == 2
	}, 60*time.Second, 50*time.Millisecond, "the line is counted")
}
