package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// twoPartitionWords returns two words of the feeder's kind that fall in
// different partitions of two.
func twoPartitionWords() (a, b string) {
	a = "fox"
	for _, w := range []string{"dog", "cat", "owl", "eel", "yak", "gnu"} {
		if topology.Partition([]byte(w), 2) != topology.Partition([]byte(a), 2) {
			return a, w
		}
	}
	panic("no word in the other partition")
}

func TestClosedMinutes(t *testing.T) {
	f := &feeder{want: map[string]int64{}, minutes: map[string]map[int64]int64{}, latest: map[string]int64{}}
	at := func(s string) *kgo.Record {
		ts, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		return &kgo.Record{Timestamp: ts}
	}
	m := func(s string) int64 { return at(s).Timestamp.UnixMilli() }
	a, b := twoPartitionWords()
	f.acked(at("2026-01-02T10:00:59.999Z"), []string{a, b, a}, nil)
	f.acked(at("2026-01-02T10:01:05Z"), []string{a}, nil)
	f.acked(at("2026-01-02T10:03:30Z"), []string{b}, nil)

	// One partition: its stream time is 10:03:30, past the close (end
	// plus minuteGrace) of the minutes 10:00 and 10:01, not of 10:03.
	require.Equal(t, map[minuteKey]int64{
		{a, m("2026-01-02T10:00:00Z")}: 2,
		{a, m("2026-01-02T10:01:00Z")}: 1,
		{b, m("2026-01-02T10:00:00Z")}: 1,
	}, f.closedMinutes(1))
	// Two partitions: a's stream time is its own latest, 10:01:05, short
	// of 10:00's close at 10:01:10.
	require.Equal(t, map[minuteKey]int64{
		{b, m("2026-01-02T10:00:00Z")}: 1,
	}, f.closedMinutes(2))
	f.acked(at("2026-01-02T10:01:10Z"), []string{a}, nil)
	require.Equal(t, map[minuteKey]int64{
		{a, m("2026-01-02T10:00:00Z")}: 2,
		{b, m("2026-01-02T10:00:00Z")}: 1,
	}, f.closedMinutes(2))
}

func TestCompareFinalMinutes(t *testing.T) {
	k1, k2 := minuteKey{"fox", 60_000}, minuteKey{"dog", 60_000}
	want := map[minuteKey]int64{k1: 2, k2: 1}
	rec := func(k minuteKey, n int64) finalRecord { return finalRecord{key: k, end: k.start + 60_000, count: n} }
	never := func(minuteKey) bool { return false }
	always := func(minuteKey) bool { return true }
	diffs, exact := compareFinalMinutes(want, []finalRecord{rec(k2, 1), rec(k1, 2)}, never)
	require.Empty(t, diffs)
	require.Equal(t, 2, exact)
	_, exact = compareFinalMinutes(want, []finalRecord{rec(k2, 1), rec(k1, 1)}, always)
	require.Equal(t, 1, exact)
	for name, tc := range map[string]struct {
		got    []finalRecord
		atRisk func(minuteKey) bool
		diff   string // "" for none
	}{
		"twice":                  {[]finalRecord{rec(k1, 2), rec(k2, 1), rec(k1, 2)}, never, `"fox" at 00:01: final count emitted twice (2, then 2)`},
		"twice, at risk":         {[]finalRecord{rec(k1, 2), rec(k2, 1), rec(k1, 1)}, always, `"fox" at 00:01: final count emitted twice (2, then 1)`},
		"short":                  {[]finalRecord{rec(k1, 1), rec(k2, 1)}, never, `"fox" at 00:01: final count 1, produced 2`},
		"short, at risk":         {[]finalRecord{rec(k1, 1), rec(k2, 1)}, always, ""},
		"over":                   {[]finalRecord{rec(k1, 3), rec(k2, 1)}, never, `"fox" at 00:01: final count 3, produced 2`},
		"over, at risk":          {[]finalRecord{rec(k1, 3), rec(k2, 1)}, always, `"fox" at 00:01: final count 3, produced 2`},
		"missing":                {[]finalRecord{rec(k1, 2)}, never, `"dog" at 00:01: no final count (produced 1)`},
		"missing, at risk":       {[]finalRecord{rec(k1, 2)}, always, ""},
		"not closed":             {[]finalRecord{rec(k1, 2), rec(k2, 1), rec(minuteKey{"fox", 120_000}, 1)}, never, `"fox" at 00:02: final count 1 for a minute that has not closed or had no such word`},
		"not closed, at risk":    {[]finalRecord{rec(k1, 2), rec(k2, 1), rec(minuteKey{"fox", 120_000}, 1)}, always, `"fox" at 00:02: final count 1 for a minute that has not closed or had no such word`},
		"window of another size": {[]finalRecord{rec(k1, 2), {key: k2, end: 90_000, count: 1}}, never, `"dog" at 00:01: window ends 30000ms after it starts`},
	} {
		var want2 []string
		if tc.diff != "" {
			want2 = []string{tc.diff}
		}
		diffs, _ := compareFinalMinutes(want, tc.got, tc.atRisk)
		require.Equal(t, want2, diffs, name)
	}
}

func TestClosedDuring(t *testing.T) {
	kill := time.UnixMilli(10 * 60_000) // 00:10:00
	stalls := []stall{{kill, kill.Add(8 * time.Second)}}
	// A minute closes minuteGrace after its end: 00:08 closes at 00:09:10,
	// 00:09 at 00:10:10.
	for start, want := range map[int64]bool{
		7 * 60_000: false, // closed 00:08:10, long before the kill
		8 * 60_000: false, // closed 00:09:10, before the kill's margin
		9 * 60_000: true,  // closed 00:10:10, during the stall
		kill.Add(-time.Minute - minuteGrace - stallMargin).UnixMilli():                    true,
		kill.Add(-time.Minute - minuteGrace - stallMargin - time.Millisecond).UnixMilli(): false,
		kill.Add(8*time.Second - time.Minute - minuteGrace + stallMargin).UnixMilli():     true,
		kill.Add(9*time.Second - time.Minute - minuteGrace + stallMargin).UnixMilli():     false,
	} {
		require.Equal(t, want, closedDuring(stalls, start), "minute starting %s", time.UnixMilli(start).UTC().Format("15:04:05.000"))
	}
	require.False(t, closedDuring(nil, 9*60_000))
}

// TestReadFinalMinutes reads the topic as the check does: committed
// records only, to the end, even when the last records of a partition are
// transaction markers.
func TestReadFinalMinutes(t *testing.T) {
	b, err := broker.Start(broker.Config{Partitions: 2})
	require.NoError(t, err)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.TransactionalID("final-check-test"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, 2, -1, nil, minuteTopic)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	ks := topology.TimeWindowedSerde(serde.String, time.Minute.Milliseconds())
	produce := func(commit bool, p int32, word string, start, n int64) {
		require.NoError(t, cl.BeginTransaction())
		k, err := ks.Encode(topology.Windowed[string]{Key: word, Window: topology.Window{Start: start, End: start + 60_000}})
		require.NoError(t, err)
		v, _ := serde.Int64.Encode(n)
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: minuteTopic, Partition: p, Key: k, Value: v}).FirstErr())
		require.NoError(t, cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
	}
	produce(true, 0, "fox", 60_000, 2)
	produce(false, 0, "fox", 60_000, 5) // aborted: never read
	produce(true, 1, "dog", 0, 1)
	produce(false, 1, "dog", 60_000, 7)

	got, err := readFinalMinutes(ctx, b.Addrs())
	require.NoError(t, err)
	require.ElementsMatch(t, []finalRecord{
		{key: minuteKey{"fox", 60_000}, end: 120_000, count: 2},
		{key: minuteKey{"dog", 0}, end: 60_000, count: 1},
	}, got)
}
