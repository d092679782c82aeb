package topology_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

// TestAbortRewindsTime: an exactly-once abort processes the input since the
// last commit again, so every clock must return to where it stood at that
// commit. The aborted input here first pushes stream time far past the
// windows the committed input opened and then adds a record to one of them;
// processed again after the abort, that record must count as it does in an
// uninterrupted run, not be dropped as late by a clock left at the aborted
// input's time.
func TestAbortRewindsTime(t *testing.T) {
	rec := func(topic, key string, ts int64) graph.InputRecord {
		return graph.InputRecord{Topic: topic, Key: []byte(key), Value: []byte("x"), Timestamp: time.UnixMilli(ts)}
	}
	countIn := func(b *topology.Builder) topology.KGroupedStream[string, string] {
		return topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	}
	tumbling := topology.TumblingWindows(10 * time.Second).Grace(2 * time.Second)
	sessions := topology.NewSessionWindows(time.Second).Grace(2 * time.Second)
	sliding := topology.NewSlidingWindows(time.Second).Grace(2 * time.Second)
	// Committed: windows around 1 s. Aborted: a record at 1.5 s, in time,
	// then a jump to 100 s that closes every window before it.
	committed := []graph.InputRecord{rec("in", "a", 1_000), rec("in", "b", 1_000)}
	aborted := []graph.InputRecord{rec("in", "a", 1_500), rec("in", "a", 100_000)}
	for _, tc := range []struct {
		name  string
		build func(b *topology.Builder)
		// in maps the test's records to the topology's input topics.
		in func(graph.InputRecord) graph.InputRecord
	}{
		{"tumbling", func(b *topology.Builder) {
			topology.WindowedBy(countIn(b), tumbling).Count("counts").ToStream().
				To("out", topology.TimeWindowedSerde(serde.String, tumbling.Size()), serde.Int64)
		}, nil},
		{"tumbling-final", func(b *topology.Builder) {
			topology.WindowedBy(countIn(b), tumbling).EmitFinal().Count("counts").ToStream().
				To("out", topology.TimeWindowedSerde(serde.String, tumbling.Size()), serde.Int64)
		}, nil},
		{"session", func(b *topology.Builder) {
			topology.SessionWindowedBy(countIn(b), sessions).Count("counts").ToStream().
				To("out", topology.SessionWindowedSerde(serde.String), serde.Int64)
		}, nil},
		{"sliding", func(b *topology.Builder) {
			topology.SlidingWindowedBy(countIn(b), sliding).Count("counts").ToStream().
				To("out", topology.TimeWindowedSerde(serde.String, sliding.MaxDiff()), serde.Int64)
		}, nil},
		{"sliding-fold", func(b *topology.Builder) {
			topology.SlidingWindowedBy(countIn(b), sliding).FoldKeptRecords().Count("counts").ToStream().
				To("out", topology.TimeWindowedSerde(serde.String, sliding.MaxDiff()), serde.Int64)
		}, nil},
		{"cogroup-tumbling", func(b *topology.Builder) {
			cogroupIn(b).WindowedBy(tumbling).Aggregate(emptyString, "counts", serde.String).ToStream().
				To("out", topology.TimeWindowedSerde(serde.String, tumbling.Size()), serde.String)
		}, aToRight},
		{"cogroup-session", func(b *topology.Builder) {
			cogroupIn(b).SessionWindowedBy(sessions).Aggregate(emptyString, func(_, x, y string) string { return x + y }, "counts", serde.String).
				ToStream().To("out", topology.SessionWindowedSerde(serde.String), serde.String)
		}, aToRight},
		{"cogroup-sliding", func(b *topology.Builder) {
			cogroupIn(b).SlidingWindowedBy(sliding).Aggregate(emptyString, "counts", serde.String).ToStream().
				To("out", topology.TimeWindowedSerde(serde.String, sliding.MaxDiff()), serde.String)
		}, aToRight},
		{"join", func(b *topology.Builder) {
			l := topology.Stream(b, "in", serde.String, serde.String)
			r := topology.Stream(b, "right", serde.String, serde.String)
			topology.JoinStreams(l, r, func(a, b string) string { return a + "|" + b },
				topology.JoinTimeDifference(time.Second).Grace(2*time.Second), "j", serde.String, serde.String, serde.String).
				To("out", serde.String, serde.String)
		}, func(r graph.InputRecord) graph.InputRecord {
			// b's records are the right side.
			if string(r.Key) == "b" {
				r.Topic, r.Key = "right", []byte("a")
			}
			return r
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := topology.NewBuilder()
			tc.build(b)
			topo, err := b.Build()
			require.NoError(t, err)
			type task struct {
				env cachedEnv
				g   graph.TaskGraph
			}
			newTask := func() task {
				env := cachedEnv{newFakeEnv(0), map[string]*cache.Store{}}
				g, err := graph.Of(topo).NewTaskGraph(0, env)
				require.NoError(t, err)
				return task{env, g}
			}
			process := func(tk task, recs []graph.InputRecord) {
				for _, r := range recs {
					if tc.in != nil {
						r = tc.in(r)
					}
					require.NoError(t, tk.g.Process(r))
				}
			}
			commit := func(tk task) {
				require.NoError(t, tk.g.Flush())
				for _, c := range tk.env.caches {
					require.NoError(t, c.Commit(statestore.NoPosition))
				}
				tk.g.(graph.Discarder).Committed()
			}

			want := newTask()
			process(want, committed)
			commit(want)
			process(want, aborted)
			commit(want)

			got := newTask()
			process(got, committed)
			commit(got)
			sent := len(got.env.sent)
			process(got, aborted)
			// The transaction aborts: its records never reach the output,
			// its store writes are dropped, and its input comes again.
			got.env.sent = got.env.sent[:sent]
			got.g.(graph.Discarder).Discard()
			for _, c := range got.env.caches {
				c.Discard()
			}
			process(got, aborted)
			commit(got)

			require.Zero(t, want.g.(graph.LateCounter).DroppedLate(), "the uninterrupted run drops nothing")
			require.Equal(t, outputs(want.env.sent), outputs(got.env.sent))
			require.Zero(t, got.g.(graph.LateCounter).DroppedLate(), "no record processed again was late")
		})
	}
}

// cogroupIn co-groups "in" and "right", each record appending its topic's
// letter, so that TestAbortRewindsTime's records of key "a", sent to
// "right" (aToRight), take the clock of the co-grouping's second stream.
func cogroupIn(b *topology.Builder) topology.CogroupedKStream[string, string] {
	in := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	right := topology.Stream(b, "right", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	c := topology.Cogroup(in, func(_, _, agg string) string { return agg + "i" })
	return topology.CogroupWith(c, right, func(_, _, agg string) string { return agg + "r" })
}

func aToRight(r graph.InputRecord) graph.InputRecord {
	if string(r.Key) == "a" {
		r.Topic = "right"
	}
	return r
}

func emptyString() string { return "" }

// outputs are the records sent, as comparable strings.
func outputs(sent []graph.OutputRecord) []string {
	out := make([]string, len(sent))
	for i, r := range sent {
		out[i] = r.Topic + " " + string(r.Key) + "=" + string(r.Value) + "@" + r.Timestamp.String()
	}
	return out
}

// TestAbortRewindsStreamTimePunctuation: a stream-time punctuator that fired
// on aborted input fires again when that input is processed again.
func TestAbortRewindsStreamTimePunctuation(t *testing.T) {
	var fired []int64
	b := topology.NewBuilder()
	topology.Process(topology.Stream(b, "in", serde.String, serde.String), "p", func() topology.Processor[string, string, string, string] {
		return &funcProc[string, string, string, string]{init: func(ctx strCtx) error {
			_, err := ctx.Schedule(10*time.Second, topology.StreamTime, func(ts time.Time) error {
				fired = append(fired, ts.Unix())
				return nil
			})
			return err
		}}
	})
	topo, err := b.Build()
	require.NoError(t, err)
	g, err := graph.Of(topo).NewTaskGraph(0, newFakeEnv(0))
	require.NoError(t, err)
	at := func(sec int64) {
		require.NoError(t, g.Process(graph.InputRecord{Topic: "in", Key: []byte("k"), Value: []byte("v"), Timestamp: time.Unix(sec, 0)}))
		require.NoError(t, g.Punctuate(time.Unix(1000, 0)))
	}
	at(100)
	g.(graph.Discarder).Committed()
	at(115)
	g.(graph.Discarder).Discard()
	at(115)
	require.Equal(t, []int64{100, 115, 115}, fired)
}
