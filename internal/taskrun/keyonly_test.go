package taskrun

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// An uncombined count whose repartition source leaves keys undecoded must
// send exactly what one with decoded keys sends, through the record cache,
// across commits and an abort, with empty and null keys among the words.
func TestUncombinedCountWithUndecodedKeys(t *testing.T) {
	run := func(t *testing.T, keySerde serde.Serde[string], budget int64) []string {
		bld := topology.NewBuilder()
		lines := topology.Stream(bld, "text", serde.String, serde.String)
		words := topology.FlatMapValues(lines, func(_, line string) []string { return strings.Split(line, " ") })
		topology.GroupBy(words, func(_, w string) string { return w }, "words", keySerde, serde.String).
			Count("counts").ToStream().To("out", serde.String, serde.Int64)
		topo, err := bld.Build()
		require.NoError(t, err)
		b := cache.NewBudget(budget)
		newTask := func(sub int, out Sender) *Active {
			a, err := NewActive(Config{
				ID: task.ID{SubTopology: sub}, AppID: "app", Topology: topo,
				Changelog: func(s string) string { return "app-" + s + "-changelog" },
				Open: func(task.ID, topology.StoreInfo) (statestore.Store, error) {
					return statestore.NewMemory(), nil
				},
				Budget: b, Sender: out,
			})
			require.NoError(t, err)
			a.Restored()
			return a
		}
		repart, output := &sink{}, &sink{}
		split, count := newTask(0, repart), newTask(1, output)
		var got []string
		var roff int64
		commit := func() {
			require.NoError(t, count.Flush())
			count.PendingChangelog()
			require.NoError(t, count.CompleteCommit(func(string, int32) (int64, bool) { return roff, true }))
			for _, r := range output.out {
				n, err := serde.Int64.Decode(r.Value)
				require.NoError(t, err)
				got = append(got, fmt.Sprintf("%q=%d", r.Key, n))
			}
			output.out = output.out[:0]
		}
		feed := func(recs ...graph.InputRecord) {
			for _, r := range recs {
				r.Topic, r.Offset, r.Timestamp = "app-words-repartition", roff, time.Unix(1, 0)
				require.NoError(t, count.Process(r))
				roff++
			}
		}
		for i, line := range []string{"a b a", "b  c", "a", "c c b a"} {
			require.NoError(t, split.Process(graph.InputRecord{Topic: "text", Offset: int64(i), Value: []byte(line), Timestamp: time.Unix(1, 0)}))
			for _, r := range repart.out {
				feed(graph.InputRecord{Key: r.Key, Value: r.Value})
			}
			repart.out = repart.out[:0]
			if i == 1 {
				commit()
			}
		}
		// Null keys and values are not counted.
		feed(graph.InputRecord{Value: []byte("x")}, graph.InputRecord{Key: []byte("x")})
		commit()
		// Aborted work is dropped and counted again.
		feed(graph.InputRecord{Key: []byte("a"), Value: []byte("a")})
		count.Abort()
		feed(graph.InputRecord{Key: []byte("b"), Value: []byte("b")}, graph.InputRecord{Key: []byte("b"), Value: []byte("b")})
		commit()
		return got
	}
	wrapped := serde.Funcs[string]{EncodeFn: serde.String.Encode, DecodeFn: serde.String.Decode}
	for _, budget := range []int64{1 << 20, 0} {
		t.Run(fmt.Sprint("budget ", budget), func(t *testing.T) {
			want := run(t, wrapped, budget)
			require.Equal(t, want, run(t, serde.String, budget))
			if budget > 0 {
				require.Equal(t, []string{`"a"=2`, `"b"=2`, `""=1`, `"c"=1`, `"a"=4`, `"c"=3`, `"b"=3`, `"b"=5`}, want)
			}
		})
	}
}
