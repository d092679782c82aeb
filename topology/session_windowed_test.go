package topology_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
	"github.com/eddystreams/eddy/topology/topologytest"
)

type sessKey struct {
	key        string
	start, end int64
}

// referenceSessions merges each key's records into sessions directly: a
// record joins every session it lies within gap of that the store still
// keeps (Kafka Streams' session store keeps sessions ending at least gap +
// grace - 1 before the latest record it took), and they become one. It
// assumes no record is late (the input's disorder is within grace).
func referenceSessions(recs []timedRec, gap, grace int64) map[sessKey]int64 {
	type sess struct{ start, end, n int64 }
	byKey := make(map[string][]sess)
	st := int64(-1)
	for _, r := range recs {
		kept := st - gap - grace + 1
		st = max(st, r.ts)
		m := sess{start: r.ts, end: r.ts, n: 1}
		var keep []sess
		for _, s := range byKey[r.key] {
			if s.end >= r.ts-gap && s.start <= r.ts+gap && s.end >= kept {
				m.start, m.end, m.n = min(m.start, s.start), max(m.end, s.end), m.n+s.n
				continue
			}
			keep = append(keep, s)
		}
		byKey[r.key] = append(keep, m)
	}
	out := make(map[sessKey]int64)
	for k, ss := range byKey {
		for _, s := range ss {
			out[sessKey{k, s.start, s.end}] = s.n
		}
	}
	return out
}

func sessionCountTopology(t *testing.T, w topology.SessionWindows, final bool) (*topologytest.Driver, *topologytest.InputTopic[string, string], *topologytest.OutputTopic[topology.Windowed[string], int64]) {
	t.Helper()
	b := topology.NewBuilder()
	sw := topology.SessionWindowedBy(topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String), w)
	if final {
		sw = sw.EmitFinal()
	}
	ks := topology.SessionWindowedSerde(serde.String)
	sw.Count("sessions").ToStream().To("out", ks, serde.Int64)
	d, _ := start(t, b)
	return d, topologytest.NewInputTopic(d, "in", serde.String, serde.String), topologytest.NewOutputTopic(d, "out", ks, serde.Int64)
}

func TestSessionCountMatchesReference(t *testing.T) {
	const gap, grace = 5_000, 4_000
	recs := outOfOrder(11, 2000, []string{"a", "b", "c"}, 3_000, grace)
	want := referenceSessions(recs, gap, grace)
	for _, final := range []bool{false, true} {
		d, in, out := sessionCountTopology(t, topology.NewSessionWindows(gap*time.Millisecond).Grace(grace*time.Millisecond), final)
		st := int64(-1)
		for _, r := range recs {
			st = max(st, r.ts)
			require.NoError(t, in.PipeAt(r.key, "v", time.UnixMilli(r.ts)))
		}
		got, err := out.ReadRecords()
		require.NoError(t, err)
		require.Zero(t, d.DroppedLate())
		if !final {
			// The latest value of each session key, retractions applied.
			latest := make(map[sessKey]int64)
			for _, r := range got {
				k := sessKey{r.Key.Key, r.Key.Window.Start, r.Key.Window.End}
				if r.Value == 0 {
					delete(latest, k)
					continue
				}
				latest[k] = r.Value
			}
			require.Equal(t, want, latest)
			continue
		}
		seen := make(map[sessKey]int64)
		for _, r := range got {
			k := sessKey{r.Key.Key, r.Key.Window.Start, r.Key.Window.End}
			_, dup := seen[k]
			require.False(t, dup, "session %v emitted twice", k)
			seen[k] = r.Value
		}
		closed := make(map[sessKey]int64)
		for k, n := range want {
			if st >= k.end+gap+grace+1 {
				closed[k] = n
			}
		}
		require.NotEmpty(t, closed)
		require.Equal(t, closed, seen)
	}
}

func TestSessionMergeAndLate(t *testing.T) {
	d, in, out := sessionCountTopology(t, topology.NewSessionWindows(10*time.Second).Grace(20*time.Second), false)
	at := func(ms int64) time.Time { return time.UnixMilli(ms) }
	require.NoError(t, in.PipeAt("k", "", at(1_000)))
	require.NoError(t, in.PipeAt("k", "", at(19_000)))
	require.NoError(t, in.PipeAt("k", "", at(10_000))) // bridges both sessions
	require.NoError(t, in.PipeAt("k", "", at(60_000)))
	require.NoError(t, in.PipeAt("k", "", at(29_999))) // [29999,29999] closed at 60000: late
	require.Equal(t, int64(1), d.DroppedLate())
	recs, err := out.ReadRecords()
	require.NoError(t, err)
	type ev struct {
		start, end int64
		n          int64
	}
	var got []ev
	for _, r := range recs {
		got = append(got, ev{r.Key.Window.Start, r.Key.Window.End, r.Value})
	}
	require.Equal(t, []ev{
		{1_000, 1_000, 1},
		{19_000, 19_000, 1},
		{1_000, 1_000, 0}, // retracted
		{19_000, 19_000, 0},
		{1_000, 19_000, 3},
		{60_000, 60_000, 1},
	}, got)
}
