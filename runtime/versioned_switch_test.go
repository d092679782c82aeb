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
	t.Parallel()
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
