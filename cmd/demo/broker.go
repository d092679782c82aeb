package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
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
	tlsDir := fs.String("tls-dir", "", "serve TLS only, with the test CA and certificates in `DIR` (made there if "+broker.CAFile+" is missing; clients use --tls-ca DIR/"+broker.CAFile+")")
	saslMech := fs.String("sasl-mechanism", broker.MechanismSCRAMSHA512, "SASL `MECHANISM` of --sasl-user: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	saslUser := fs.String("sasl-user", "", "require SASL, with this `USER` as a superuser (no ACLs are checked)")
	saslPass := fs.String("sasl-password", "", "password of --sasl-user (default: $"+saslPasswordEnv+")")
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

	cfg := broker.Config{
		Listen:     *listen,
		DataDir:    *dataDir,
		Partitions: int32(*partitions),
		Logger:     slog.New(slog.NewTextHandler(s.err, &slog.HandlerOptions{Level: level})),
	}
	if *tlsDir != "" {
		certs, err := brokerCerts(*tlsDir, *listen)
		if err != nil {
			return fmt.Errorf("--tls-dir: %w", err)
		}
		if cfg.TLS, err = certs.ServerTLS(false); err != nil {
			return fmt.Errorf("--tls-dir: %w", err)
		}
	}
	if *saslUser != "" {
		pass := *saslPass
		if pass == "" {
			pass = os.Getenv(saslPasswordEnv)
		}
		if pass == "" {
			return usageErrorf(fs, "--sasl-user needs a password: --sasl-password or $%s", saslPasswordEnv)
		}
		cfg.Users = []broker.User{{Mechanism: *saslMech, Name: *saslUser, Password: pass, Superuser: true}}
	}
	b, err := broker.Start(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.out, "listening on %s\n", strings.Join(b.Addrs(), ","))
	if *tlsDir != "" {
		fmt.Fprintf(s.out, "TLS: clients verify with --tls-ca %s\n", filepath.Join(*tlsDir, broker.CAFile))
	}
	<-ctx.Done()
	b.Close()
	fmt.Fprintln(s.out, "broker stopped")
	return nil
}

// brokerCerts reads the test certificates in dir, or makes them there
// (for the listen host, localhost and the loopback addresses) if dir holds
// no CA yet.
func brokerCerts(dir, listen string) (*broker.Certs, error) {
	if _, err := os.Stat(filepath.Join(dir, broker.CAFile)); err == nil {
		return broker.ReadCerts(dir)
	}
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if h, _, err := net.SplitHostPort(listen); err == nil && h != "" && !slices.Contains(hosts, h) {
		hosts = append(hosts, h)
	}
	certs, err := broker.GenerateCerts(hosts...)
	if err != nil {
		return nil, err
	}
	return certs, certs.WriteFiles(dir)
}
