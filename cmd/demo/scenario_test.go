package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/topology"
)

// syncBuffer is a buffer the demo writes from its goroutines while a test
// reads it.
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

// TestDefaultDemo runs the no-argument demo, shortened: the cluster
// settles, an instance is killed and its partitions fail over while the
// queries go on, it comes back caught up, and every count is exact.
func TestDefaultDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for 20 seconds")
	}
	// The feed runs about 20s: started in the last 8s of a minute, it
	// carries that minute past its close (end plus minuteGrace), so that
	// word-counts-per-minute has final counts to check.
	if s := time.Now().Second(); s < 52 {
		time.Sleep(time.Duration(52-s) * time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb syncBuffer
	start := time.Now()
	err := run(ctx, []string{"--duration", "20s", "--rate", "300"}, stdio{in: strings.NewReader(""), out: &out, err: &errb})
	t.Logf("demo took %s; output:\n%s", time.Since(start).Round(time.Millisecond), out.String())
	require.NoError(t, err, "stderr:\n%s", errb.String())
	stdout := out.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`\*\*\* cluster settled after [0-9.]+s: 6 partitions, each with a running active and a caught-up standby`),
		regexp.MustCompile(`\*\*\* killing #\d hard \(network cut: no commit, no leave-group\)`),
		regexp.MustCompile(`query "[^"]+" = [0-9,]+  from #\d \(127\.0\.0\.1:\d+\) partition \d, standby, lag \d+`),
		regexp.MustCompile(`\*\*\* partition \d: active again on #\d [0-9.]+s after the kill; (its standby was promoted|it had no standby there)`),
		regexp.MustCompile(`\*\*\* failover complete [0-9.]+s after the kill`),
		regexp.MustCompile(`\*\*\* restarting #\d with its old state directory`),
		regexp.MustCompile(`\*\*\* #\d is back on 127\.0\.0\.1:\d+ with its old process ID`),
		regexp.MustCompile(`\*\*\* #\d caught up [0-9.]+s after restarting`),
		regexp.MustCompile(`\*\*\* scenario complete`),
		regexp.MustCompile(`\*\*\* all [0-9,]+ word counts are exact, in total and per minute`),
		regexp.MustCompile(`(?m)^summary$`),
		regexp.MustCompile(`(?m)^  failover +[0-9.]+s: #\d killed at`),
		regexp.MustCompile(`(?m)^  restart +#\d caught up`),
		regexp.MustCompile(`(?m)^  counts +all [0-9,]+ word counts are exact`),
		regexp.MustCompile(`(?m)^ +and so are their counts per minute since \d\d:\d\d UTC in counts-per-minute`),
		regexp.MustCompile(`(?m)^  final +[1-9][0-9,]* word-minutes closed \(1 minute\); word-counts-per-minute, read committed, has one record`),
		regexp.MustCompile(`(?m)^\[ *[0-9.]+s\] fed [0-9,]+ lines · queries [0-9,]+ answered, [0-9,]+ refused · #1 `),
	} {
		require.Regexp(t, want, stdout)
	}
	require.NotContains(t, stdout, "\x1b[", "no escape sequences when the output is not a terminal")
}

// TestDefaultDemoInterrupted cancels a --forever run once the cluster has
// settled: it stops cleanly, checks the counts and succeeds.
func TestDefaultDemoInterrupted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	var out, errb syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, []string{"--forever", "--duration", "1m", "--rate", "200", "--instances", "2"}, stdio{in: strings.NewReader(""), out: &out, err: &errb})
	}()
	deadline := time.After(time.Minute)
	for !strings.Contains(out.String(), "cluster settled") {
		select {
		case err := <-done:
			t.Fatalf("demo ended before settling: %v\n%s", err, out.String())
		case <-deadline:
			t.Fatalf("demo did not settle:\n%s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	interrupt()
	select {
	case err := <-done:
		require.NoError(t, err, "an interrupted --forever run with exact counts succeeds\n%s\n%s", out.String(), errb.String())
	case <-ctx.Done():
		t.Fatalf("demo did not stop after the interrupt:\n%s", out.String())
	}
	stdout := out.String()
	require.Contains(t, stdout, "interrupted: stopping the feed and checking the counts")
	require.Regexp(t, `(?m)^  counts +all [0-9,]+ word counts are exact`, stdout)
}

func TestParseDemoFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string // substring of the usage error; "" for success
	}{
		{args: nil},
		{args: []string{"--duration", "0s"}, want: "--duration must be positive"},
		{args: []string{"--rate", "0"}, want: "--rate must be positive"},
		{args: []string{"--instances", "0"}, want: "--instances must be between 1 and 9"},
		{args: []string{"--standbys", "-1"}, want: "--standbys must not be negative"},
		{args: []string{"--no-chaos", "extra"}, want: `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		var errb bytes.Buffer
		cfg, err := parseDemoFlags(tt.args, stdio{out: &bytes.Buffer{}, err: &errb})
		if tt.want == "" {
			require.NoError(t, err)
			require.Equal(t, demoConfig{duration: time.Minute, rate: 500, instances: 3, standbys: 1, chaos: true, seed: 1, logs: logFlags{level: "warn", format: "text"}}, cfg)
			continue
		}
		require.ErrorIs(t, err, errUsage, "%v", tt.args)
		require.Contains(t, errb.String(), tt.want)
		require.Contains(t, errb.String(), "usage: demo [--duration D]")
	}
	cfg, err := parseDemoFlags([]string{"--no-chaos", "--forever", "--state-dir", "/x", "--seed", "9", "--standbys", "2"}, stdio{out: &bytes.Buffer{}, err: &bytes.Buffer{}})
	require.NoError(t, err)
	require.Equal(t, demoConfig{duration: time.Minute, rate: 500, instances: 3, standbys: 2, forever: true, stateDir: "/x", seed: 9, logs: logFlags{level: "warn", format: "text"}}, cfg)
}

func TestQuerySampleCoversEveryPartition(t *testing.T) {
	vocab := newCorpus(1).vocab
	for _, parts := range []int32{1, 3, 6} {
		sample := querySample(vocab, parts)
		require.Len(t, sample, samplePerPartition*int(parts))
		require.Equal(t, possessive, sample[0], "the possessive is one of the most frequent words")
		per := make(map[int32]int)
		for _, w := range sample {
			per[topology.Partition([]byte(w), parts)]++
		}
		for p := range parts {
			require.Equal(t, samplePerPartition, per[p], "partition %d of %d", p, parts)
		}
	}
}

func TestQueryStats(t *testing.T) {
	q := newQueryStats()
	t0 := time.Now()
	q.watchFailover("h1:1", []int32{0, 1}, t0)
	q.record(answer{word: "a", count: 5, host: "h2:1", partition: 0, role: "standby", lag: 3}, t0.Add(time.Second))
	q.record(answer{word: "a", count: 4, host: "h2:1", partition: 0, role: "standby", lag: 9}, t0.Add(2*time.Second))
	q.record(answer{word: "b", refusal: "no replica", reasons: "unreachable"}, t0.Add(2*time.Second))
	q.record(answer{word: "a", count: 7, host: "h2:1", partition: 0, role: "active"}, t0.Add(3*time.Second))
	_, _, all := q.failoverAnswers()
	require.False(t, all, "partition 1 has not been answered by a new active")
	q.record(answer{word: "c", count: 2, host: "h1:1", partition: 1, role: "active"}, t0.Add(4*time.Second))
	_, _, all = q.failoverAnswers()
	require.False(t, all, "the killed instance's own answers do not count")
	q.record(answer{word: "c", count: 2, host: "h3:1", partition: 1, role: "active"}, t0.Add(5*time.Second))
	first, last, all := q.failoverAnswers()
	require.True(t, all)
	require.Equal(t, 3*time.Second, first)
	require.Equal(t, 5*time.Second, last)

	tot := q.totals()
	require.Equal(t, int64(5), tot.answered)
	require.Equal(t, int64(1), tot.refused)
	require.Equal(t, int64(9), tot.maxLag)
	require.Equal(t, int64(1), tot.regressions, "5 then 4 went backwards")
	require.Equal(t, map[string]int64{"standby": 2, "active": 3}, tot.byRole)
	require.Equal(t, map[string]int64{"unreachable": 1}, tot.reasons)
	require.Equal(t, []topWord{{"a", 7}, {"c", 2}}, q.top(5))
	last2 := q.lastAnswers(2)
	require.Len(t, last2, 2)
	require.Equal(t, int64(6), last2[1].seq)
}

func TestRefusalReasons(t *testing.T) {
	ue := &iq.UnavailableError{Store: countsStore, Partition: 2, Tried: []iq.Attempt{
		{Host: "a", Err: errors.New("connection refused")},
		{Host: "b", Err: &iq.StaleError{}},
		{Host: "c", Err: errors.New("connection refused")},
	}}
	require.Equal(t, "unreachable, too stale", refusalReasons(ue))
	require.Equal(t, "no replica of partition 2 could answer (unreachable, too stale)", shortRefusal(ue))
	require.Equal(t, "rebalancing", refusalReasons(iq.ErrRebalancing))
	require.Equal(t, "timed out", refusalReasons(context.DeadlineExceeded))
}

func TestFeederCountsPerMinute(t *testing.T) {
	f := &feeder{want: map[string]int64{}, minutes: map[string]map[int64]int64{}, latest: map[string]int64{}}
	at := func(s string) *kgo.Record {
		ts, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		return &kgo.Record{Timestamp: ts}
	}
	f.acked(at("2026-01-02T10:00:59.999Z"), []string{"fox", "dog", "fox"}, nil)
	f.acked(at("2026-01-02T10:01:00Z"), []string{"fox"}, nil)
	f.acked(at("2026-01-02T10:03:30Z"), []string{"dog"}, nil)
	f.acked(at("2026-01-02T10:03:31Z"), []string{"cat"}, errors.New("not acknowledged"))
	m := func(s string) int64 { return at(s).Timestamp.UnixMilli() }
	require.Equal(t, map[string]map[int64]int64{
		"fox": {m("2026-01-02T10:00:00Z"): 2, m("2026-01-02T10:01:00Z"): 1},
		"dog": {m("2026-01-02T10:00:00Z"): 1, m("2026-01-02T10:03:00Z"): 1},
	}, f.minuteReference(0))
	require.Equal(t, map[string]map[int64]int64{
		"fox": {m("2026-01-02T10:01:00Z"): 1},
		"dog": {m("2026-01-02T10:03:00Z"): 1},
	}, f.minuteReference(m("2026-01-02T10:01:00Z")))
	require.Equal(t, map[string]int64{"fox": 3, "dog": 2}, f.reference())
	require.Equal(t, "[10:00 2, 10:01 1]", minuteList(f.minuteReference(0)["fox"]))
}
