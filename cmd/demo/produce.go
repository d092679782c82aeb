package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/runtime"
)

// maxLineBytes bounds one input line; Kafka's default message.max.bytes
// rejects larger records anyway.
const maxLineBytes = 1 << 20

// runProduce is `demo produce`: it sends each line of a file, or of
// standard input, as one record with a nil key, waits until the broker has
// acknowledged every record, and reports how many it sent.
func runProduce(ctx context.Context, args []string, s stdio) error {
	fs := newFlagSet("produce", produceSynopsis, s)
	brokers := fs.String("brokers", "", "comma-separated `HOST:PORT` list of brokers to bootstrap from (required)")
	topic := fs.String("topic", "text", "`TOPIC` to write to; created with the broker's default partition count if missing")
	file := fs.String("file", "", "`F` to read lines from; empty or - reads standard input")
	timeout := fs.Duration("timeout", 30*time.Second, "give up on a record the broker has not acknowledged within this long")
	sec := addSecurityFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	tlsCfg, mech, err := sec.resolve()
	if err != nil {
		return usageErrorf(fs, "%v", err)
	}
	seeds := splitBrokers(*brokers)
	if len(seeds) == 0 {
		return usageErrorf(fs, "--brokers is required")
	}
	if *topic == "" {
		return usageErrorf(fs, "--topic must not be empty")
	}
	if *timeout <= 0 {
		return usageErrorf(fs, "--timeout must be positive")
	}

	in := s.in
	if *file != "" && *file != "-" {
		f, err := os.Open(*file)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}

	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.DefaultProduceTopic(*topic),
		kgo.AllowAutoTopicCreation(),
		kgo.RecordDeliveryTimeout(*timeout),
	}, clientOpts(tlsCfg, mech)...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	// Without this a wrong address would only show up as records timing
	// out, long after the mistake.
	pingCtx, cancel := context.WithTimeout(ctx, *timeout)
	err = cl.Ping(pingCtx)
	cancel()
	if errors.Is(err, kerr.SaslAuthenticationFailed) {
		return runtime.AuthFailure(err, seeds, mech)
	}
	if err != nil {
		return fmt.Errorf("cannot reach brokers %v: %w", seeds, err)
	}

	sent, err := produceLines(ctx, cl, in)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.out, "sent %d records to topic %q\n", sent, *topic)
	return nil
}

// produceLines sends each line of in as a record and returns how many the
// broker acknowledged; any failure, or ctx ending first, is an error.
func produceLines(ctx context.Context, cl *kgo.Client, in io.Reader) (int64, error) {
	var (
		mu       sync.Mutex
		acked    int64
		failed   int64
		firstErr error
	)
	done := func(_ *kgo.Record, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		acked++
	}

	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	var total int64
	for sc.Scan() && ctx.Err() == nil {
		total++
		// Produce blocks while the client's buffer is full, which is the
		// back-pressure that keeps a large file from filling memory.
		cl.Produce(ctx, &kgo.Record{Value: []byte(sc.Text())}, done)
	}
	readErr := sc.Err()
	flushErr := cl.Flush(ctx)

	mu.Lock()
	defer mu.Unlock()
	switch {
	case readErr != nil:
		return acked, fmt.Errorf("reading input after %d lines: %w", total, readErr)
	case ctx.Err() != nil || flushErr != nil:
		return acked, fmt.Errorf("interrupted with %d of %d records acknowledged: %w",
			acked, total, errors.Join(ctx.Err(), flushErr))
	case failed > 0:
		return acked, fmt.Errorf("%d of %d records failed: %w", failed, total, firstErr)
	}
	return acked, nil
}
