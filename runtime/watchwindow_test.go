package runtime

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

// windowChange is one committed change of a window of key "a".
type windowChange struct {
	pos, start, count int64
}

// committedWindowChanges reads the changelog records of key "a"'s windows
// starting at or after from (by the window store's changelog key layout:
// the key, 00 01, the start), every one after position after through
// position through.
func committedWindowChanges(t *testing.T, addrs []string, partition int32, from, after, through int64) []windowChange {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{changelog.TopicName("win", "wcounts"): {partition: kgo.NewOffset().AtStart()}}))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []windowChange
	for {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= through {
				done = true
			}
			rest, ok := strings.CutPrefix(string(r.Key), "a\x00\x01")
			if r.Offset <= after || r.Offset > through || !ok || len(rest) != 8 {
				return
			}
			start := int64(binary.BigEndian.Uint64([]byte(rest)))
			if start < from {
				return
			}
			v, _ := statestore.SplitTimestamped(r.Value)
			n, err := serde.Int64.Decode(v)
			require.NoError(t, err)
			out = append(out, windowChange{r.Offset, start, n})
		})
		if done {
			return out
		}
	}
}

// A window watch follows the windows of one key that start in a time
// range: from the start of the changelog it delivers what the changelog
// holds of them and then each commit's, and nothing of the key's earlier
// windows or of other keys; each update names its window. Over HTTP the
// same watch starts with the key's windows as they stand. A key watch of
// a window store, and a window watch of a key-value store, are refused
// with a 400 that says which watch fits.
func TestWatchWindowsOfAKey(t *testing.T) {
	b, _ := startBroker(t, "in")
	tb := topology.NewBuilder()
	g := topology.Stream(tb, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	topology.WindowedBy(g, topology.TumblingWindows(time.Second).Grace(time.Hour)).Count("wcounts")
	g.Count("counts")
	topo, err := tb.Build()
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	app, err := New(topo, Config{ApplicationID: "win", Brokers: b.Addrs(), StateDir: t.TempDir(), CommitInterval: 50 * time.Millisecond, Endpoint: ln.Addr().String()})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	defer app.Close(context.Background())
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	defer cl.Close()
	produce := func(key string, ms int64) {
		require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(key), Value: []byte("v"), Timestamp: time.UnixMilli(ms)}).FirstErr())
	}
	total := func(key string) int64 {
		v, found, _, err := activeGet(app, "counts", []byte(key))
		if err != nil || !found {
			return 0
		}
		n, _ := serde.Int64.Decode(v)
		return n
	}
	for _, ms := range []int64{300, 800, 1200} {
		produce("a", ms)
	}
	produce("b", 1300)
	waitFor(t, 30*time.Second, "the first records counted", func() bool { return total("a") == 3 })

	q := iq.NewQuerier(app.Queries())
	w, err := q.WatchWindowBytes(context.Background(), "wcounts", []byte("a"), 1000, iq.MaxTime, iq.WatchOptions{From: iq.FromStart})
	require.NoError(t, err)
	defer w.Close()

	api := iq.NewServer(app.Queries(), iq.ServerConfig{}, iq.CodecFor("wcounts", serde.String, serde.Int64, nil), iq.CodecFor("counts", serde.String, serde.Int64, nil))
	defer api.Close()
	srv := httptest.NewUnstartedServer(api)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	ic, err := iq.NewClient([]string{strings.TrimPrefix(srv.URL, "http://")}, iq.ClientOptions{})
	require.NoError(t, err)
	defer ic.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rw, err := ic.WatchWindows(ctx, "wcounts", "a", []byte("a"), 0, iq.MaxTime, iq.WatchOptions{From: iq.FromNow, Current: true})
	require.NoError(t, err)
	defer rw.Close()
	snapshot := map[int64]string{}
	for range 2 {
		u, err := rw.Next(ctx)
		require.NoError(t, err)
		require.True(t, u.Current)
		require.NotNil(t, u.Window)
		require.Equal(t, u.Window.Start+1000, u.Window.End)
		snapshot[u.Window.Start] = string(u.Value)
	}
	require.Equal(t, map[int64]string{0: "2", 1000: "1"}, snapshot)

	for _, ms := range []int64{1500, 2100, 700, 2900, 3100} {
		produce("a", ms)
		produce("b", ms)
	}
	waitFor(t, 30*time.Second, "every record counted", func() bool { return total("a") == 8 })

	var got []windowChange
	for len(got) == 0 || got[len(got)-1] != (windowChange{got[len(got)-1].pos, 3000, 1}) {
		u, err := w.Next(ctx)
		require.NoError(t, err)
		require.Equal(t, "a", string(u.Key))
		require.NotNil(t, u.Window)
		require.GreaterOrEqual(t, u.Window.Start, int64(1000), "a window starting before the range")
		n, err := serde.Int64.Decode(u.Value)
		require.NoError(t, err)
		got = append(got, windowChange{u.Position, u.Window.Start, n})
	}
	p, err := app.Queries().KeyPartition("wcounts", []byte("a"))
	require.NoError(t, err)
	require.Equal(t, committedWindowChanges(t, b.Addrs(), p, 1000, -1, got[len(got)-1].pos), got)
	var counts []int64
	for _, c := range got {
		counts = append(counts, c.start*10+c.count)
	}
	require.Subset(t, counts, []int64{10001, 10002, 20002, 30001}, "the windows' counts as they grew")

	// The HTTP watch saw the same changes after its snapshot, 700 in
	// window 0 included.
	var remote []string
	for len(remote) == 0 || remote[len(remote)-1] != "3000=1" {
		u, err := rw.Next(ctx)
		require.NoError(t, err)
		require.False(t, u.Current)
		remote = append(remote, strconv.FormatInt(u.Window.Start, 10)+"="+string(u.Value))
	}
	require.Contains(t, remote, "0=3")

	reason := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, path)
		var body struct{ Error, Reason string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return body.Reason + ": " + body.Error
	}
	require.Contains(t, reason("/v1/stores/wcounts/keys/a/watch"), "watch a key's windows")
	require.Contains(t, reason("/v1/stores/counts/keys/a/windows/watch"), "watch it by key, range or prefix")
	require.Contains(t, reason("/v1/stores/wcounts/range/watch"), "invalid_query")
	require.Contains(t, reason("/v1/stores/wcounts/keys/a/windows/watch?from=5000&to=1000"), "invalid_query")
	require.Contains(t, reason("/v1/stores/wcounts/windows/watch?key=a&resume=yesterday"), "invalid_query")
}
