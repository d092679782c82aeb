package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"

	"github.com/eddystreams/eddy/broker"
)

// defaultBrokerListen is Kafka's customary port, so that other Kafka tools
// find the demo broker without being told where it is.
const defaultBrokerListen = "127.0.0.1:9092"

// runBroker is `demo broker`: the embedded broker as a process of its own,
// until ctx is cancelled. It prints "listening on HOST:PORT" to s.out once
// clients can connect, which is how a caller that asked for port 0 learns
// the port.
func runBroker(ctx context.Context, args []string, s stdio) error {
	fs := newFlagSet("broker", brokerSynopsis, s)
	listen := fs.String("listen", defaultBrokerListen, "`HOST:PORT` to listen on (port 0 picks a free port)")
	dataDir := fs.String("data-dir", "", "`DIR` to keep topics, records and offsets in across restarts (default: memory only)")
	partitions := fs.Int("partitions", int(broker.DefaultPartitions), "partition count of automatically created topics")
	logLevel := fs.String("log-level", "warn", "broker log level: debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *listen == "" {
		return usageErrorf(fs, "--listen must not be empty")
	}
	if *partitions < 1 || *partitions > math.MaxInt32 {
		return usageErrorf(fs, "--partitions must be at least 1, got %d", *partitions)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageErrorf(fs, "--log-level: %v", err)
	}

	b, err := broker.Start(broker.Config{
		Listen:     *listen,
		DataDir:    *dataDir,
		Partitions: int32(*partitions),
		Logger:     slog.New(slog.NewTextHandler(s.err, &slog.HandlerOptions{Level: level})),
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(s.out, "listening on %s\n", strings.Join(b.Addrs(), ","))
	<-ctx.Done()
	b.Close()
	fmt.Fprintln(s.out, "broker stopped")
	return nil
}
