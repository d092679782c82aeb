package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

// switchApp starts an application reading the table "prices" into the
// store "prices", with opts, from the state directory dir.
func switchApp(t *testing.T, addrs []string, app, dir string, opts ...topology.Option) *App {
	t.Helper()
	tb := topology.NewBuilder()
	topology.Table(tb, "prices", serde.String, serde.String, "prices", opts...)
	topo, err := tb.Build()
	require.NoError(t, err)
	a, err := New(topo, Config{ApplicationID: app, Brokers: addrs, StateDir: dir, NumStreamThreads: 1,
		ProcessingErrors: ProcessingLogAndContinue, CommitInterval: 100 * time.Millisecond, SessionTimeout: 2 * time.Second})
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	return a
}

// answers reports the first key whose answer from app differs from want
// (a missing value ""), as of asOf unless it is 0; "" when all match.
func answers(app *App, want map[string]string, asOf int64) string {
	q := iq.NewQuerier(app.Queries())
	for k, v := range want {
		var opts []iq.QueryOption
		if asOf != 0 {
			opts = append(opts, iq.AsOfMillis(asOf))
		}
		res, err := iq.Get(context.Background(), q, "prices", k, serde.String, serde.String, opts...)
		if err != nil {
			return fmt.Sprintf("%s: %v", k, err)
		}
		got := ""
		if res.Found {
			got = res.Value
		}
		if got != v {
			return fmt.Sprintf("%s: %q, want %q", k, got, v)
		}
	}
	return ""
}

func awaitAnswers(t *testing.T, app *App, what string, want map[string]string, asOf int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		m := answers(app, want, asOf)
		if m == "" {
			return
		}
		select {
		case <-app.Done():
			t.Fatalf("%s: the instance stopped: %v", what, app.Err())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, m)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A table switched from plain to versioned and back, over the same state
// directory, needs no reset: each time the instance finds its store in
// the other layout, empties it and restores it from the changelog, which
// either kind reads, and every key keeps its latest value; the versioned
// store's history holds the plain table's values at their times, and
// what it learns out of order or deletes reaches the plain table again.
func TestVersionedSwitchBothWaysKeepsLatestValues(t *testing.T) {
	b, _ := startBroker(t, "prices")
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("prices"))
	require.NoError(t, err)
	defer cl.Close()
	produce := func(key string, value *string, ts int64) {
		t.Helper()
		rec := &kgo.Record{Key: []byte(key), Timestamp: time.UnixMilli(ts)}
		if value != nil {
			rec.Value = []byte(*value)
		}
		require.NoError(t, cl.ProduceSync(context.Background(), rec).FirstErr())
	}
	str := func(s string) *string { return &s }
	keys := []string{"a", "b", "c", "d"}
	for _, k := range keys {
		produce(k, str(k+"1"), 1000)
	}
	dir := t.TempDir()
	ctx := context.Background()

	plain := switchApp(t, b.Addrs(), "switch", dir)
	awaitAnswers(t, plain, "the plain table", map[string]string{"a": "a1", "b": "b1", "c": "c1", "d": "d1"}, 0)
	require.NoError(t, plain.Close(ctx))

	versioned := switchApp(t, b.Addrs(), "switch", dir, topology.Versioned(time.Hour))
	awaitAnswers(t, versioned, "the versioned table restored from the plain table's changelog",
		map[string]string{"a": "a1", "b": "b1", "c": "c1", "d": "d1"}, 0)
	for _, k := range keys {
		produce(k, str(k+"2"), 2000)
	}
	produce("a", str("a-late"), 1500) // out of order: history only
	produce("d", nil, 2500)
	awaitAnswers(t, versioned, "the versioned table's latest values",
		map[string]string{"a": "a2", "b": "b2", "c": "c2", "d": ""}, 0)
	awaitAnswers(t, versioned, "the versioned table's history, the plain table's values included",
		map[string]string{"a": "a-late", "b": "b1", "c": "c1", "d": "d1"}, 1600)
	require.NoError(t, versioned.Close(ctx))

	plain = switchApp(t, b.Addrs(), "switch", dir)
	defer plain.Close(ctx)
	awaitAnswers(t, plain, "the plain table restored from the versioned table's changelog",
		map[string]string{"a": "a2", "b": "b2", "c": "c2", "d": ""}, 0)
	produce("b", str("b3"), 3000)
	awaitAnswers(t, plain, "the plain table going on", map[string]string{"a": "a2", "b": "b3", "c": "c2", "d": ""}, 0)
	require.Zero(t, plain.Stats().ProcessingErrors)
}

// oldVersionedChangelog writes to the changelog of the store "prices" of
// application app what a versioned store's changelog held before it
// logged puts: the store's own keys, as its record cache sent them.
func oldVersionedChangelog(t *testing.T, addrs []string, app string, puts func(put func(key, value string, ts int64))) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	stores := map[int32]*recordedStore{}
	put := func(key, value string, ts int64) {
		p := topology.Partition([]byte(key), 2)
		if stores[p] == nil {
			stores[p] = &recordedStore{ReadWriter: statestore.NewMemory()}
		}
		vs, err := statestore.NewVersionedStore(stores[p], statestore.VersionedOptions{HistoryRetention: time.Hour.Milliseconds()})
		require.NoError(t, err)
		var v []byte
		if value != "" {
			v = []byte(value)
		}
		_, _, err = vs.Put([]byte(key), v, ts)
		require.NoError(t, err)
	}
	puts(put)
	for p, s := range stores {
		for _, e := range s.writes {
			rec := &kgo.Record{Topic: app + "-prices-changelog", Partition: p, Key: e.Key, Value: e.Value}
			require.NoError(t, cl.ProduceSync(context.Background(), rec).FirstErr())
		}
	}
}

// recordedStore records the writes made to it, as the record cache sent
// them to the changelog.
type recordedStore struct {
	statestore.ReadWriter
	writes []statestore.Entry
}

func (s *recordedStore) Put(k, v []byte) error {
	s.writes = append(s.writes, statestore.Entry{Key: k, Value: v})
	return s.ReadWriter.Put(k, v)
}

func (s *recordedStore) Delete(k []byte) error {
	s.writes = append(s.writes, statestore.Entry{Key: k})
	return s.ReadWriter.Delete(k)
}

// A versioned table's changelog written before it logged puts still
// restores every version, and the table goes on logging puts after them;
// a plain table cannot read such a changelog, and stops its instance with
// a StoreLayoutError naming the store rather than misreading it, even
// under ProcessingLogAndContinue.
func TestOldVersionedChangelogRestores(t *testing.T) {
	b, adm := startBroker(t, "prices")
	_, err := adm.CreateTopics(context.Background(), 2, -1, nil, "old-prices-changelog")
	require.NoError(t, err)
	oldVersionedChangelog(t, b.Addrs(), "old", func(put func(key, value string, ts int64)) {
		put("a", "a1", 1000)
		put("a", "a2", 2000)
		put("b", "b1", 1000)
		put("b", "", 1500)
		put("c", "c2", 2000)
		put("c", "c1", 1000)
	})
	ctx := context.Background()
	versioned := switchApp(t, b.Addrs(), "old", t.TempDir(), topology.Versioned(time.Hour))
	awaitAnswers(t, versioned, "the latest values", map[string]string{"a": "a2", "b": "", "c": "c2"}, 0)
	awaitAnswers(t, versioned, "the history", map[string]string{"a": "a1", "b": "b1", "c": "c1"}, 1200)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("prices"))
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Key: []byte("a"), Value: []byte("a3"), Timestamp: time.UnixMilli(3000)}).FirstErr())
	awaitAnswers(t, versioned, "the table going on", map[string]string{"a": "a3", "b": "", "c": "c2"}, 0)
	require.NoError(t, versioned.Close(ctx))

	// The same changelog, now old keys then puts, onto an empty disk.
	again := switchApp(t, b.Addrs(), "old", t.TempDir(), topology.Versioned(time.Hour))
	awaitAnswers(t, again, "the restored history", map[string]string{"a": "a2", "b": "", "c": "c2"}, 2500)
	awaitAnswers(t, again, "the restored early history", map[string]string{"a": "a1", "b": "b1", "c": "c1"}, 1200)
	awaitAnswers(t, again, "the restored latest values", map[string]string{"a": "a3", "b": "", "c": "c2"}, 0)
	require.NoError(t, again.Close(ctx))

	plain := switchApp(t, b.Addrs(), "old", t.TempDir())
	defer plain.Close(ctx)
	for _, k := range []string{"a", "b", "c"} {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Key: []byte(k), Value: []byte(k + "4"), Timestamp: time.UnixMilli(4000)}).FirstErr())
	}
	select {
	case <-plain.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the instance did not stop on the old versioned changelog")
	}
	var le *topology.StoreLayoutError
	require.ErrorAs(t, plain.Err(), &le)
	require.Equal(t, "prices", le.Store)
	require.False(t, le.Versioned)
	require.Zero(t, plain.Stats().ProcessingErrors, "no record skipped")
}
