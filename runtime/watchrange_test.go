package runtime

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// keyChange is one committed change of a key at a changelog position.
type keyChange struct {
	pos   int64
	key   string
	count int64
}

// committedRangeChanges reads the records of the keys in holds from a
// changelog partition with read-committed isolation, every one after
// position from through position through.
func committedRangeChanges(t *testing.T, addrs []string, partition int32, holds func(string) bool, from, through int64) []keyChange {
	t.Helper()
	var out []keyChange
	if through <= from {
		return out
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{changelog.TopicName("eos", "counts"): {partition: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading partition %d through %d", partition, through)
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= through {
				done = true
			}
			if r.Offset <= from || r.Offset > through || r.Attrs.IsControl() || !holds(string(r.Key)) {
				return
			}
			v, _ := statestore.SplitTimestamped(r.Value)
			n, err := serde.Int64.Decode(v)
			require.NoError(t, err)
			out = append(out, keyChange{r.Offset, string(r.Key), n})
		})
		if done {
			return out
		}
	}
}

// inRange holds the keys k3 to k6 of the eosCluster's k0..k9.
func inRange(k string) bool { return k >= "k3" && k < "k7" }

// reached reports whether the last change seen of every key of want in
// the range carries want's count.
func reached(last map[string]int64, want map[string]int64) bool {
	for k, n := range want {
		if inRange(k) && last[k] != n {
			return false
		}
	}
	return true
}

// A range watch of each partition on its local replica, started from a
// past position, reads the range's changes back from the changelog and
// then follows the commits: per partition, the delivered sequence is the
// changelog's committed sequence of the keys in the range after the start,
// with nothing from outside it.
func TestWatchRangeLocalReadBackAndLive(t *testing.T) {
	c := newEOSCluster(t)
	want := map[string]int64{}
	app := c.start(t, t.TempDir())
	defer app.Close(context.Background())
	for range 3 {
		c.produce(t, 40, want)
		waitCounts(t, app, want)
	}
	q := iq.NewQuerier(app.Queries())
	rng := iq.KeyRange{From: []byte("k3"), To: []byte("k7")}
	var ws []*iq.Watch
	for p := range int32(2) {
		w, err := q.WatchRangeBytes(context.Background(), "counts", p, rng, iq.WatchOptions{From: 2})
		require.NoError(t, err)
		defer w.Close()
		ws = append(ws, w)
	}
	for range 4 {
		c.produce(t, 60, want)
		waitCounts(t, app, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := map[int32][]keyChange{}
	last := map[string]int64{}
	for _, w := range ws {
		for !reachedIn(app, w.Partition(), last, want) {
			u, err := w.Next(ctx)
			require.NoError(t, err)
			require.True(t, inRange(string(u.Key)), "key %q is outside the range", u.Key)
			require.Equal(t, w.Partition(), u.Provenance.Partition)
			require.Equal(t, iq.RoleActive, u.Provenance.Role)
			n, err := serde.Int64.Decode(u.Value)
			require.NoError(t, err)
			got[w.Partition()] = append(got[w.Partition()], keyChange{u.Position, string(u.Key), n})
			last[string(u.Key)] = n
		}
	}
	require.True(t, reached(last, want))
	for p, changes := range got {
		require.Equal(t, committedRangeChanges(t, c.b.Addrs(), p, inRange, 2, changes[len(changes)-1].pos), changes, "partition %d", p)
	}
	require.Len(t, got, 2, "the range spans both partitions")
}

// reachedIn is reached for the keys of one partition.
func reachedIn(app *App, p int32, last, want map[string]int64) bool {
	for k, n := range want {
		kp, _ := app.Queries().KeyPartition("counts", []byte(k))
		if kp == p && inRange(k) && last[k] != n {
			return false
		}
	}
	return true
}

// The range watch endpoint, read with a plain HTTP client: a snapshot of
// the range first, then the changes of every partition, each event's id
// the resume token after it; a watch resumed from one of those tokens goes
// on with exactly the events that followed it. A bad range or token is a
// 400 with a reason.
func TestWatchRangeHTTPStream(t *testing.T) {
	c := newEOSCluster(t)
	want := map[string]int64{}
	app := c.start(t, t.TempDir())
	defer app.Close(context.Background())
	c.produce(t, 50, want)
	waitCounts(t, app, want)
	api := iq.NewServer(app.Queries(), iq.ServerConfig{}, iq.CodecFor("counts", serde.String, serde.Int64, nil))
	defer api.Close()
	srv := httptest.NewServer(api)
	defer srv.Close()
	reason := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, path)
		var body struct{ Reason string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return body.Reason
	}
	require.Equal(t, "unknown_store", reason("/v1/stores/nope/range/watch"))
	require.Equal(t, "invalid_query", reason("/v1/stores/counts/range/watch?from=k5&to=k3"))
	require.Equal(t, "invalid_query", reason("/v1/stores/counts/range/watch?from=k1&prefix=k"))
	require.Equal(t, "invalid_query", reason("/v1/stores/counts/range/watch?resume=v1:0=3"), "a token leaving out partition 1")
	require.Equal(t, "invalid_query", reason("/v1/stores/counts/range/watch?resume=v9:0=3,1=4"))
	require.Equal(t, "unknown_partition", reason("/v1/stores/counts/range/watch?partition=7"))

	open := func(query string, lastEventID ...string) (*bufio.Reader, func()) {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/stores/counts/range/watch?from=k3&to=k7&"+query, nil)
		require.NoError(t, err)
		for _, id := range lastEventID {
			req.Header.Set("Last-Event-ID", id)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		return bufio.NewReader(resp.Body), func() { resp.Body.Close() }
	}
	br, done := open("current=true")
	defer done()
	ev := readEvent(t, br)
	require.Equal(t, "start", ev.name)
	var start struct {
		Resume    string
		Positions map[int32]int64
	}
	require.NoError(t, json.Unmarshal([]byte(ev.data), &start))
	require.Len(t, start.Positions, 2)
	at, err := iq.ParseRangeResume(start.Resume)
	require.NoError(t, err)
	require.Equal(t, iq.RangeResume(start.Positions), at)

	type update struct {
		Key       string
		Value     int64
		Position  int64
		Partition int32
		Current   bool
		id        string
	}
	read := func(br *bufio.Reader) update {
		ev := readEvent(t, br)
		require.Equal(t, "update", ev.name, ev.data)
		var u update
		require.NoError(t, json.Unmarshal([]byte(ev.data), &u))
		require.True(t, inRange(u.Key), u.Key)
		at[u.Partition] = u.Position
		require.Equal(t, at.String(), ev.id, "the id is the resume token after the update")
		u.id = ev.id
		return u
	}
	// The snapshot: each key of the range once, as counted.
	snapshot := map[string]int64{}
	for range 4 {
		u := read(br)
		require.True(t, u.Current)
		require.Equal(t, start.Positions[u.Partition], u.Position)
		snapshot[u.Key] = u.Value
	}
	require.Equal(t, map[string]int64{"k3": want["k3"], "k4": want["k4"], "k5": want["k5"], "k6": want["k6"]}, snapshot)

	for range 3 {
		c.produce(t, 30, want)
		waitCounts(t, app, want)
	}
	var got []update
	last := map[string]int64{}
	for !reached(last, want) {
		u := read(br)
		require.False(t, u.Current)
		got = append(got, u)
		last[u.Key] = u.Value
	}
	perPartition := func(us []update) map[int32][]keyChange {
		out := map[int32][]keyChange{}
		for _, u := range us {
			out[u.Partition] = append(out[u.Partition], keyChange{u.Position, u.Key, u.Value})
		}
		return out
	}
	for p, changes := range perPartition(got) {
		require.Equal(t, committedRangeChanges(t, c.b.Addrs(), p, inRange, start.Positions[p], changes[len(changes)-1].pos), changes, "partition %d", p)
	}

	// Resumed from the token of an update half way, as resume= or as the
	// Last-Event-ID an EventSource sends back, a watch delivers what
	// followed it, partition by partition.
	half := len(got) / 2
	for _, resumed := range []func() (*bufio.Reader, func()){
		func() (*bufio.Reader, func()) { return open("resume=" + url.QueryEscape(got[half].id)) },
		func() (*bufio.Reader, func()) { return open("", got[half].id) },
	} {
		br2, done2 := resumed()
		defer done2()
		ev = readEvent(t, br2)
		require.Equal(t, "start", ev.name)
		require.NoError(t, json.Unmarshal([]byte(ev.data), &start))
		require.Equal(t, got[half].id, start.Resume)
		at, err = iq.ParseRangeResume(start.Resume)
		require.NoError(t, err)
		rest := got[half+1:]
		var again []update
		for len(again) < len(rest) {
			again = append(again, read(br2))
		}
		require.Equal(t, perPartition(rest), perPartition(again))
	}
}

// A range watch followed by iq.Client over two instances, each partition
// with an active and a standby: when the instance serving a partition is
// killed, that partition goes on from another replica where it stopped.
// Per partition the delivered sequence is the changelog's committed
// sequence of the range's keys, with no gap and no duplicate, and the
// resume point says where each partition stands.
func TestWatchRangeClientThroughFailover(t *testing.T) {
	c := newEOSCluster(t)
	want := map[string]int64{}
	type node struct {
		app  *App
		srv  *http.Server
		addr string
	}
	start := func() node {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		app, err := New(countTopology(t), Config{
			ApplicationID: "eos", Brokers: c.b.Addrs(), StateDir: t.TempDir(),
			ProcessingGuarantee: ExactlyOnce, SessionTimeout: 2 * time.Second,
			NumStreamThreads: 1, NumStandbys: 1, Endpoint: ln.Addr().String(),
		})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		api := iq.NewServer(app.Queries(), iq.ServerConfig{}, iq.CodecFor("counts", serde.String, serde.Int64, nil))
		srv := &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		t.Cleanup(func() {
			srv.Close()
			api.Close()
			app.Close(context.Background())
		})
		return node{app, srv, ln.Addr().String()}
	}
	nodes := []node{start(), start()}
	c.produce(t, 40, want)
	waitFor(t, 60*time.Second, "an active and a caught-up standby of each partition", func() bool {
		for p := range int32(2) {
			roles := map[iq.Role]bool{}
			for _, n := range nodes {
				if r, err := n.app.Queries().Replica("counts", p); err == nil {
					if info := r.Info(); info.Lag == 0 && info.Position > 0 {
						roles[info.Role] = true
					}
				}
			}
			if !roles[iq.RoleActive] || !roles[iq.RoleStandby] {
				return false
			}
		}
		return true
	})

	cl, err := iq.NewClient([]string{nodes[0].addr, nodes[1].addr}, iq.ClientOptions{})
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := cl.WatchRange(ctx, "counts", "k3", "k7", iq.RangeWatchOptions{WatchOptions: iq.WatchOptions{From: iq.FromNow, Staleness: iq.MaxLag(1000)}})
	require.NoError(t, err)
	defer w.Close()
	from := w.Resume()
	require.Len(t, from, 2)

	got := map[int32][]keyChange{}
	last := map[string]int64{}
	hosts := map[string]bool{}
	servedP0 := map[string]bool{} // who served partition 0's updates
	follow := func() {
		for !reached(last, want) {
			u, err := w.Next(ctx)
			require.NoError(t, err)
			n, err := strconv.ParseInt(string(u.Value), 10, 64)
			require.NoError(t, err)
			p := u.Provenance.Partition
			got[p] = append(got[p], keyChange{u.Position, string(u.Key), n})
			last[string(u.Key)] = n
			hosts[u.Provenance.Host] = true
			if p == 0 {
				servedP0[u.Provenance.Host] = true
			}
		}
	}
	for range 3 {
		c.produce(t, 30, want)
	}
	follow()
	// The active of partition 0, which served its watch, goes away
	// without a word.
	victim := 1
	if r, err := nodes[0].app.Queries().Replica("counts", 0); err == nil && r.Info().Role == iq.RoleActive {
		victim = 0
	}
	require.True(t, hosts[nodes[victim].addr], "the active served updates")
	clear(servedP0)
	nodes[victim].srv.Close()
	nodes[victim].app.Kill()
	survivor := nodes[1-victim].app
	for range 4 {
		c.produce(t, 30, want)
	}
	waitFor(t, time.Minute, "the survivor counting everything", func() bool {
		for k, n := range want {
			v, found, _, err := activeGet(survivor, "counts", []byte(k))
			if err != nil || !found {
				return false
			}
			if m, _ := serde.Int64.Decode(v); m != n {
				return false
			}
		}
		return true
	})
	follow()
	require.Equal(t, map[string]bool{nodes[1-victim].addr: true}, servedP0, "partition 0 went on on the survivor")
	at := w.Resume()
	for p, changes := range got {
		require.Equal(t, changes[len(changes)-1].pos, at[p], "the resume point of partition %d", p)
		require.Equal(t, committedRangeChanges(t, c.b.Addrs(), p, inRange, from[p], changes[len(changes)-1].pos), changes, "partition %d", p)
	}
	require.Len(t, got, 2)
}

// A range watch from now through the Client, one of whose partitions no
// replica serves at first, returns only once that partition has started
// too: its resume point names a position for every partition, never
// "now", so that the watch, and a watch resumed from its resume point,
// deliver every change committed after it began.
func TestWatchRangeClientStartsEveryPartitionFirst(t *testing.T) {
	c := newEOSCluster(t)
	want := map[string]int64{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	app, err := New(countTopology(t), Config{
		ApplicationID: "eos", Brokers: c.b.Addrs(), StateDir: t.TempDir(),
		ProcessingGuarantee: ExactlyOnce, SessionTimeout: 2 * time.Second,
		NumStreamThreads: 1, Endpoint: ln.Addr().String(),
	})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	defer app.Close(context.Background())
	api := iq.NewServer(app.Queries(), iq.ServerConfig{}, iq.CodecFor("counts", serde.String, serde.Int64, nil))
	defer api.Close()
	// Partition 1's watches are cut off, as by a replica that cannot
	// serve, until refusing is cleared.
	var refusing atomic.Bool
	var refused atomic.Int64
	refusing.Store(true)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refusing.Load() && strings.HasSuffix(r.URL.Path, "/range/watch") && r.URL.Query().Get("partition") == "1" {
			refused.Add(1)
			panic(http.ErrAbortHandler)
		}
		api.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	c.produce(t, 40, want)
	waitCounts(t, app, want)

	cl, err := iq.NewClient([]string{ln.Addr().String()}, iq.ClientOptions{})
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type started struct {
		w   *iq.RangeWatch
		err error
	}
	ch := make(chan started, 1)
	go func() {
		w, err := cl.WatchRange(ctx, "counts", "k3", "k7", iq.RangeWatchOptions{WatchOptions: iq.WatchOptions{From: iq.FromNow}})
		ch <- started{w, err}
	}()
	waitFor(t, 30*time.Second, "partition 1's watch refused three times", func() bool { return refused.Load() >= 3 || len(ch) > 0 })
	select {
	case s := <-ch:
		require.NoError(t, s.err)
		s.w.Close()
		t.Fatalf("the watch started with partition 1 refused: resume point %s", s.w.Resume())
	default:
	}
	// Committed while partition 1 has not started: before the watch
	// began, as far as partition 1 goes.
	c.produce(t, 20, want)
	waitCounts(t, app, want)
	refusing.Store(false)
	s := <-ch
	require.NoError(t, s.err)
	w := s.w
	from := w.Resume()
	require.Len(t, from, 2)
	for p, pos := range from {
		require.GreaterOrEqual(t, pos, int64(0), "partition %d starts at a position", p)
	}

	got := map[int32][]keyChange{}
	last := map[string]int64{}
	follow := func(w *iq.RangeWatch) {
		for !reached(last, want) {
			u, err := w.Next(ctx)
			require.NoError(t, err)
			n, err := strconv.ParseInt(string(u.Value), 10, 64)
			require.NoError(t, err)
			p := u.Provenance.Partition
			got[p] = append(got[p], keyChange{u.Position, string(u.Key), n})
			last[string(u.Key)] = n
		}
	}
	c.produce(t, 40, want)
	follow(w)
	at := w.Resume()
	w.Close()
	// Committed while nobody watches: the watch resumed from at
	// delivers them.
	c.produce(t, 40, want)
	waitCounts(t, app, want)
	w, err = cl.WatchRange(ctx, "counts", "k3", "k7", iq.RangeWatchOptions{Resume: at})
	require.NoError(t, err)
	defer w.Close()
	follow(w)
	for p := range int32(2) {
		changes := got[p]
		require.NotEmpty(t, changes, "partition %d", p)
		require.Equal(t, committedRangeChanges(t, c.b.Addrs(), p, inRange, from[p], changes[len(changes)-1].pos), changes, "partition %d", p)
	}
}
