package topology_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
	"github.com/eddystreams/eddy/topology/topologytest"
)

// rekeyedCount counts "in" by value after GroupBy, with opts, and returns
// what a processor downstream of the count receives, one line per update
// ("key=count@ms" and the headers of the update and of the record it came
// from), and, in "all-out", every update of a regrouping of the counts
// into one trace of the values added and retracted, which shows the old
// values the count sends.
func rekeyedCount(b *topology.Builder, seen *[]string, opts ...topology.Option) {
	s := topology.Stream(b, "in", serde.String, serde.String)
	counts := topology.GroupBy(s, func(_, v string) string { return v }, "words", serde.String, serde.String).
		Count("counts", opts...)
	topology.Process(counts.ToStream(), "watch", func() topology.Processor[string, int64, string, int64] {
		return &funcProc[string, int64, string, int64]{
			process: func(ctx topology.ProcessorContext[string, int64], rec topology.Record[string, int64]) error {
				md, _ := ctx.RecordMetadata()
				*seen = append(*seen, fmt.Sprintf("%s=%d@%d %v %v", rec.Key, rec.Value, rec.Timestamp.UnixMilli(), rec.Headers, md.Headers))
				return nil
			},
		}
	})
	all := topology.GroupTableBy(counts, func(_ string, n int64) (string, string) { return "all", fmt.Sprint(n) },
		"all", serde.String, serde.String)
	topology.TableAggregate(all, func() string { return "" },
		func(_, v, agg string) string { return agg + "+" + v },
		func(_, v, agg string) string { return agg + "-" + v }, "trace", serde.String).
		ToStream().To("all-out", serde.String, serde.String)
}

// TestRekeyedCountIsKafkaStreamsByDefault checks that without
// WithCombining an aggregation after GroupBy is Kafka Streams' (its
// KStreamAggregate): every record crosses the repartition topic as it is,
// and without the record cache each one makes one update downstream,
// stamped with the latest time of the key's records and carrying the
// count before it as old value (the initializer's 0 for a new key), out of
// order records included.
func TestRekeyedCountIsKafkaStreamsByDefault(t *testing.T) {
	var seen []string
	b := topology.NewBuilder()
	rekeyedCount(b, &seen)
	require.NotContains(t, describe(t, b), "combine")
	d, _ := start(t, b)
	hdr := []topology.Header{{Key: "trace", Value: []byte("1")}}
	in := []struct {
		word string
		ms   int64
	}{{"a", 10}, {"b", 5}, {"a", 3}, {"b", 20}, {"a", 7}}
	for _, r := range in {
		require.NoError(t, d.Pipe("in", nil, []byte(r.word), time.UnixMilli(r.ms), hdr...))
	}

	rep := d.ReadOutput(app + "-words-repartition")
	require.Len(t, rep, len(in), "one repartition record per input record")
	for i, r := range rep {
		require.Equal(t, in[i].word, string(r.Key))
		require.Equal(t, in[i].word, string(r.Value), "the raw value, not a partial count")
		require.Equal(t, in[i].ms, r.Timestamp.UnixMilli())
		require.Equal(t, hdr, r.Headers, "no partial marker")
	}
	require.Equal(t, []string{
		"a=1@10 [{trace [49]}] [{trace [49]}]",
		"b=1@5 [{trace [49]}] [{trace [49]}]",
		"a=2@10 [{trace [49]}] [{trace [49]}]",
		"b=2@20 [{trace [49]}] [{trace [49]}]",
		"a=3@10 [{trace [49]}] [{trace [49]}]",
	}, seen)
	var trace []string
	for _, kv := range readKVs(t, d, "all-out", serde.String, serde.String) {
		trace = append(trace, kv.Value)
	}
	require.Equal(t, []string{
		"+1",
		"+1-0+1",
		"+1-0+1-1+2",
		"+1-0+1-1+2-1+2",
		"+1-0+1-1+2-1+2-2+3",
	}, trace, "each update retracts the count before it, 0 for a new key")
}

// TestRekeyedCountSendsEveryRecordUnderTheCache checks the same with the
// record cache (topologytest's Commits): the repartition topic gets every
// record at once, as Kafka Streams' sink sends it, while the count's
// updates wait for the commit.
func TestRekeyedCountSendsEveryRecordUnderTheCache(t *testing.T) {
	var seen []string
	b := topology.NewBuilder()
	rekeyedCount(b, &seen)
	topo, err := b.Build()
	require.NoError(t, err)
	d, err := topologytest.New(topo, topologytest.Config{AppID: app, Commits: true})
	require.NoError(t, err)
	defer d.Close()
	for i, w := range []string{"a", "b", "a"} {
		require.NoError(t, d.Pipe("in", nil, []byte(w), time.UnixMilli(int64(10-i))))
	}
	rep := d.ReadOutput(app + "-words-repartition")
	require.Len(t, rep, 3, "every record before the commit")
	require.Empty(t, seen)
	require.NoError(t, d.Commit())
	require.Equal(t, []string{"a=2@10 [] []", "b=1@9 [] []"}, seen)
}

// storesOf reads the named stores of d, value bytes by key.
func storesOf(t *testing.T, d *topologytest.Driver, names ...string) map[string]map[string]string {
	t.Helper()
	stores := map[string]map[string]string{}
	for _, name := range names {
		rw, err := d.Store(name)
		require.NoError(t, err)
		it, err := rw.All()
		require.NoError(t, err)
		m := map[string]string{}
		for it.Next() {
			m[string(it.Key())] = string(it.Value())
		}
		require.NoError(t, it.Err())
		it.Close()
		stores[name] = m
	}
	return stores
}

// TestCombiningSwitchedOverAFullTopic is the upgrade in both directions:
// the repartition topics of combinable's aggregations are written by a
// build with combining on (partials) or off (raw records) and then read
// by a build with it the other way, which goes on with the rest of the
// input. Its stores end as those of one uncombined run over all the input.
func TestCombiningSwitchedOverAFullTopic(t *testing.T) {
	type rec struct {
		key, value string
		ms         int64
	}
	var first, rest []rec
	for i := range 40 {
		r := rec{key: fmt.Sprintf("k%d", i%3), value: "abcdef"[i*7%5 : i*7%5+1+i%2], ms: int64(1000 + i*10 - (i%4)*25)}
		if i < 25 {
			first = append(first, r)
		} else {
			rest = append(rest, r)
		}
	}
	newDriver := func(b *topology.Builder) *topologytest.Driver {
		topo, err := b.Build()
		require.NoError(t, err)
		d, err := topologytest.New(topo, topologytest.Config{AppID: app, Commits: true})
		require.NoError(t, err)
		t.Cleanup(func() { d.Close() })
		return d
	}
	pipe := func(d *topologytest.Driver, rs []rec) {
		for i, r := range rs {
			require.NoError(t, d.Pipe("in", []byte(r.key), []byte(r.value), time.UnixMilli(r.ms)))
			if i%7 == 6 {
				require.NoError(t, d.Commit())
			}
		}
		require.NoError(t, d.Commit())
	}
	stores := []string{"count", "list", "lengths"}
	topics := []string{"by-first", "by-key", "by-first-len"}

	whole := newDriver(combinable())
	pipe(whole, append(append([]rec(nil), first...), rest...))
	want := storesOf(t, whole, stores...)

	on := []topology.Option{topology.WithCombining()}
	for _, c := range []struct {
		name           string
		writer, reader []topology.Option
		marked         bool
	}{
		{"turned off", on, nil, true},
		{"turned on", nil, on, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			writer := newDriver(combinable(c.writer...))
			pipe(writer, first)
			reader := newDriver(combinable(c.reader...))
			for _, topic := range topics {
				rep := app + "-" + topic + "-repartition"
				written := writer.ReadOutput(rep)
				require.NotEmpty(t, written)
				for _, r := range written {
					var marked []topology.Header
					if c.marked {
						marked = []topology.Header{{Key: topology.CombinedHeader, Value: []byte(topology.CombinedVersion)}}
					}
					require.Equal(t, marked, r.Headers, rep)
					require.NoError(t, reader.Pipe(rep, r.Key, r.Value, r.Timestamp, r.Headers...))
				}
			}
			require.NoError(t, reader.Commit())
			pipe(reader, rest)
			require.Equal(t, want, storesOf(t, reader, stores...))
		})
	}
}
