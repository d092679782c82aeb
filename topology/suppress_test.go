package topology_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// The updates a suppression holds live in its store: a task built again
// over the same stores (a restart, or a failover after restoration) emits
// them when their time comes, neither losing one nor emitting one twice.
// Stream time starts over with the new task, as in Kafka Streams, unless
// the suppression persists it too.
func TestSuppressionSurvivesRestart(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("PersistStreamTime=%v", keep), func(t *testing.T) {
			s := topology.UntilTimeLimit(10*time.Millisecond, topology.Unbounded())
			if keep {
				s = s.PersistStreamTime()
			}
			b := topology.NewBuilder()
			topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String).Count("counts").
				Suppress(s, "held").
				ToStream().To("out", serde.String, serde.Int64)
			topo, err := b.Build()
			require.NoError(t, err)
			env := newFakeEnv(0)
			run := func(ins ...string) []string {
				g, err := graph.Of(topo).NewTaskGraph(0, env)
				require.NoError(t, err)
				env.sent = nil
				for _, in := range ins {
					var k string
					var ts int64
					_, err := fmt.Sscanf(in, "%s %d", &k, &ts)
					require.NoError(t, err)
					require.NoError(t, g.Process(graph.InputRecord{Topic: "in", Key: []byte(k), Value: []byte("v"), Timestamp: time.UnixMilli(ts)}))
				}
				var got []string
				for _, rec := range env.sent {
					n, err := serde.Int64.Decode(rec.Value)
					require.NoError(t, err)
					got = append(got, fmt.Sprintf("%s %d @%d", rec.Key, n, rec.Timestamp.UnixMilli()))
				}
				require.NoError(t, g.Close())
				return got
			}
			require.Equal(t, []string{"a 2 @6", "b 1 @5"}, run("a 0", "b 5", "a 6", "c 20"))
			if keep {
				// The restarted task knows stream time is 20, so d at 3
				// is due at once, and c, held before, is still held.
				require.Equal(t, []string{"d 1 @3"}, run("d 3"))
				require.Equal(t, []string{"c 1 @20"}, run("e 31"))
			} else {
				// The restarted task's stream time starts at d's 3: d is
				// held, and released with c, in their order, once stream
				// time passes them.
				require.Empty(t, run("d 3"))
				require.Equal(t, []string{"d 1 @3", "c 1 @20"}, run("e 31"))
			}
			require.Equal(t, []string{"e 1 @31"}, run("f 50"))
		})
	}
}

func TestSuppressionBufferBounds(t *testing.T) {
	b := topology.NewBuilder()
	topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String).Count("counts").
		Suppress(topology.UntilTimeLimit(time.Hour, topology.MaxRecords(2).ShutDownWhenFull()), "held").
		ToStream().To("out", serde.String, serde.Int64)
	d, _ := start(t, b)
	in := strIn(d, "in")
	require.NoError(t, in.PipeAt("a", "v", time.UnixMilli(1)))
	require.NoError(t, in.PipeAt("b", "v", time.UnixMilli(2)))
	require.NoError(t, in.PipeAt("a", "v", time.UnixMilli(3)), "a key held again takes no more room")
	require.ErrorContains(t, in.PipeAt("c", "v", time.UnixMilli(4)), "suppression buffer full")
}

func TestSuppressionRefusals(t *testing.T) {
	b := topology.NewBuilder()
	topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String).Count("counts").
		Suppress(topology.UntilWindowCloses(topology.Unbounded()), "held")
	_, err := b.Build()
	require.ErrorContains(t, err, "UntilWindowCloses needs a windowed table")

	b = topology.NewBuilder()
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	topology.WindowedBy(g, topology.TumblingWindows(time.Second)).Count("counts").
		Suppress(topology.UntilWindowCloses(topology.MaxRecords(10)), "held")
	_, err = b.Build()
	require.ErrorContains(t, err, "Unbounded or ShutDownWhenFull")
}

// A held key is emitted with its latest update's timestamp and headers.
func TestSuppressionEmitsLatestHeaders(t *testing.T) {
	b := topology.NewBuilder()
	topology.Table(b, "in", serde.String, serde.String, "in-store").
		Suppress(topology.UntilTimeLimit(5*time.Millisecond, topology.Unbounded()), "held").
		ToStream().To("out", serde.String, serde.String)
	d, _ := start(t, b)
	pipe := func(k, v string, ms int64, hs ...topology.Header) {
		require.NoError(t, d.Pipe("in", []byte(k), []byte(v), time.UnixMilli(ms), hs...))
	}
	pipe("k", "v1", 0, topology.Header{Key: "h", Value: []byte("1")})
	pipe("k", "v2", 1, topology.Header{Key: "h", Value: []byte("2")}, topology.Header{Key: "n"})
	require.Empty(t, d.ReadOutput("out"))
	pipe("tick", "t", 10)
	out := d.ReadOutput("out")
	require.Len(t, out, 1)
	require.Equal(t, "v2", string(out[0].Value))
	require.Equal(t, int64(1), out[0].Timestamp.UnixMilli())
	require.Equal(t, []topology.Header{{Key: "h", Value: []byte("2")}, {Key: "n"}}, out[0].Headers)
}
