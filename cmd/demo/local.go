package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/serde"
)

// runDefault is the no-argument demo: an embedded broker and a word-count
// instance in this process, fed generated text at a steady rate, printing
// the top words as the counts settle. It fails if any final count differs
// from the count of the words actually produced.
func runDefault(ctx context.Context, args []string, s stdio) error {
	fs := newFlagSet("", "[--duration D] [--rate N] [--state-dir DIR]", s)
	duration := fs.Duration("duration", 20*time.Second, "how long to feed text")
	rate := fs.Int("rate", 500, "lines of text per second")
	stateDir := fs.String("state-dir", "", "`DIR` for the instance's state (default: a temporary folder, removed at exit)")
	seed := fs.Uint64("seed", 1, "seed of the generated text")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *duration <= 0 || *rate <= 0 {
		return usageErrorf(fs, "--duration and --rate must be positive")
	}
	dir := *stateDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "eddy-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	logger := slog.New(slog.NewTextHandler(s.err, &slog.HandlerOptions{Level: slog.LevelWarn}))

	b, err := broker.Start(broker.Config{Logger: logger})
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Fprintf(s.out, "broker listening on %s\n", strings.Join(b.Addrs(), ","))

	in, err := startInstance(ctx, instanceOptions{brokers: b.Addrs(), stateDir: dir, app: "wordcount", logger: logger})
	if err != nil {
		return err
	}
	defer in.close()
	fmt.Fprintf(s.out, "word-count instance %s started (state in %s)\n", in.app.ProcessID(), dir)

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic(inputTopic))
	if err != nil {
		return err
	}
	defer cl.Close()

	want := make(map[string]int64)
	corpus := newCorpus(*seed)
	tick := time.NewTicker(time.Second / time.Duration(min(*rate, 100)))
	defer tick.Stop()
	perTick := max(1, *rate/100)
	report := time.NewTicker(time.Second)
	defer report.Stop()
	start := time.Now()
	feedEnd := start.Add(*duration)
	var lines int64
	for time.Now().Before(feedEnd) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-in.app.Done():
			return fmt.Errorf("instance stopped: %w", in.app.Err())
		case <-report.C:
			printTop(s, in, want, lines, time.Since(start))
		case <-tick.C:
			for range perTick {
				line := corpus.line()
				for _, w := range words(line) {
					want[w]++
				}
				cl.Produce(ctx, &kgo.Record{Value: []byte(line)}, nil)
				lines++
			}
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "fed %d lines (%d distinct words); waiting for the counts to settle\n", lines, len(want))
	deadline := time.Now().Add(60 * time.Second)
	for {
		diffs := compareCounts(in, want)
		if len(diffs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d words have wrong counts, e.g. %s", len(diffs), strings.Join(diffs[:min(5, len(diffs))], "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-in.app.Done():
			return fmt.Errorf("instance stopped: %w", in.app.Err())
		case <-report.C:
			printTop(s, in, want, lines, time.Since(start))
		}
	}
	printTop(s, in, want, lines, time.Since(start))
	fmt.Fprintf(s.out, "all %d word counts are exact\n", len(want))
	return nil
}

// lookup reads a word's count from the instance; -1 when it is not there.
func lookup(in *instance, word string) (int64, error) {
	k, _ := serde.String.Encode(word)
	v, found, _, err := in.app.LocalGet(countsStore, k)
	if err != nil || !found {
		return -1, err
	}
	return serde.Int64.Decode(v)
}

func printTop(s stdio, in *instance, want map[string]int64, lines int64, elapsed time.Duration) {
	type wc struct {
		w string
		n int64
	}
	var got []wc
	for w := range want {
		if n, err := lookup(in, w); err == nil && n > 0 {
			got = append(got, wc{w, n})
		}
	}
	slices.SortFunc(got, func(a, b wc) int {
		return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.w, b.w))
	})
	var top []string
	for _, e := range got[:min(8, len(got))] {
		top = append(top, fmt.Sprintf("%s=%d", e.w, e.n))
	}
	fmt.Fprintf(s.out, "[%5.1fs] lines fed %d, words counted %d; top: %s\n", elapsed.Seconds(), lines, len(got), strings.Join(top, " "))
}

// compareCounts lists words whose stored count differs from want.
func compareCounts(in *instance, want map[string]int64) []string {
	var diffs []string
	for w, n := range want {
		got, err := lookup(in, w)
		if err != nil && !errors.Is(err, context.Canceled) {
			diffs = append(diffs, fmt.Sprintf("%s: %v", w, err))
			continue
		}
		if got != n {
			diffs = append(diffs, fmt.Sprintf("%s: got %d, want %d", w, got, n))
		}
	}
	slices.Sort(diffs)
	return diffs
}
