package iq

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

const benchKeys = 10000

// badgerBackend is one instance holding partition 0 of a one-partition
// store as a running active, on badger, filled with benchKeys keys.
func badgerBackend(tb testing.TB) (*fakeBackend, statestore.Store) {
	st, err := statestore.OpenBadger(tb.TempDir(), statestore.BadgerOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(tb, err)
	tb.Cleanup(func() { st.Close() })
	var batch []statestore.Entry
	for i := 0; i < benchKeys; i++ {
		v, _ := serde.Int64.Encode(int64(i))
		batch = append(batch, statestore.Entry{Key: fmt.Appendf(nil, "word-%05d", i), Value: v})
		if len(batch) == 1000 {
			require.NoError(tb, st.Write(batch, int64(i+1)))
			batch = batch[:0]
		}
	}
	b := newFakeBackend("self:1", map[string]int32{testStore: 1})
	r := b.add(testStore, 0, RoleActive)
	r.store = st
	r.set(func(i *ReplicaInfo) { i.Position, i.End = benchKeys, benchKeys })
	b.setMeta(Metadata{Hosts: []HostMetadata{{Host: "self:1", Active: []StorePartition{{testStore, 0}}}}, Partitions: map[string]int32{testStore: 1}}, nil)
	return b, st
}

const benchKey = "word-05000"

// BenchmarkBareGet is the baseline: a badger store Get and the value's
// decoding, nothing else.
func BenchmarkBareGet(b *testing.B) {
	_, st := badgerBackend(b)
	key := []byte(benchKey)
	b.ReportAllocs()
	for b.Loop() {
		v, ok, err := st.Get(key)
		if err != nil || !ok {
			b.Fatal(err, ok)
		}
		if _, err := serde.Int64.Decode(v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQuerierGet is the same key through the typed Querier: key
// encoding, partitioning, replica lookup, the staleness gate, the read,
// and provenance.
func BenchmarkQuerierGet(b *testing.B) {
	be, _ := badgerBackend(b)
	q := NewQuerier(be)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := Get(ctx, q, testStore, benchKey, serde.String, serde.Int64)
		if err != nil || !res.Found {
			b.Fatal(err)
		}
	}
}

// httpPair is two instances: A holds the store, B holds nothing and
// forwards.
func httpPair(tb testing.TB) (a, b *fakeInstance, hc *http.Client) {
	c := newCluster(tb, 2, 1, ServerConfig{})
	be, st := badgerBackend(tb)
	r, _ := be.Replica(testStore, 0)
	c.ins[0].b.mu.Lock()
	c.ins[0].b.replicas[StorePartition{testStore, 0}] = r.(*fakeReplica)
	c.ins[0].b.mu.Unlock()
	_ = st
	c.publish()
	tr := newTransport(nil)
	hc = &http.Client{Transport: tr}
	tb.Cleanup(tr.CloseIdleConnections)
	return c.ins[0], c.ins[1], hc
}

func httpGet(hc *http.Client, url string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return err
}

// BenchmarkHTTPGet is a key lookup answered locally by the instance
// asked; run in parallel, its rate is the queries/s one instance sustains.
func BenchmarkHTTPGet(b *testing.B) {
	a, _, hc := httpPair(b)
	url := keyURL(a, benchKey, "")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := httpGet(hc, url); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "queries/s")
}

// BenchmarkHTTPRoutedGet is a key lookup that takes one forwarding hop:
// asked of an instance without the partition, answered by its active.
func BenchmarkHTTPRoutedGet(b *testing.B) {
	_, fwd, hc := httpPair(b)
	url := keyURL(fwd, benchKey, "")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := httpGet(hc, url); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "queries/s")
}

func percentiles(ds []time.Duration) (p50, p99, p999 time.Duration) {
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(int(q*float64(len(ds))), len(ds)-1)] }
	return at(0.50), at(0.99), at(0.999)
}

// TestLatencyReport prints latency percentiles: local Get through the
// Querier against a bare badger Get of the same key (interleaved, so both
// see the same machine), and HTTP lookups over loopback, local and with
// one forwarding hop. Set IQ_LATENCY_REPORT=1 to run it.
func TestLatencyReport(t *testing.T) {
	if os.Getenv("IQ_LATENCY_REPORT") == "" {
		t.Skip("set IQ_LATENCY_REPORT=1 to measure latency percentiles")
	}
	be, st := badgerBackend(t)
	q := NewQuerier(be)
	ctx := context.Background()
	key := []byte(benchKey)
	const n = 200000
	bare, local := make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		s := time.Now()
		v, _, err := st.Get(key)
		if err == nil {
			_, err = serde.Int64.Decode(v)
		}
		bare = append(bare, time.Since(s))
		require.NoError(t, err)
		s = time.Now()
		_, err = Get(ctx, q, testStore, benchKey, serde.String, serde.Int64)
		local = append(local, time.Since(s))
		require.NoError(t, err)
	}
	b50, b99, b999 := percentiles(bare)
	l50, l99, l999 := percentiles(local)
	t.Logf("bare badger get:  p50 %v  p99 %v  p99.9 %v", b50, b99, b999)
	t.Logf("querier get:      p50 %v  p99 %v  p99.9 %v  (p99 ratio %.2f)", l50, l99, l999, float64(l99)/float64(b99))

	a, fwd, hc := httpPair(t)
	for _, tc := range []struct {
		name string
		url  string
	}{{"http local", keyURL(a, benchKey, "")}, {"http routed (1 hop)", keyURL(fwd, benchKey, "")}} {
		const m = 5000
		ds := make([]time.Duration, 0, m)
		for i := 0; i < m; i++ {
			s := time.Now()
			require.NoError(t, httpGet(hc, tc.url))
			ds = append(ds, time.Since(s))
		}
		p50, p99, p999 := percentiles(ds)
		t.Logf("%-20s sequential: p50 %v  p99 %v  p99.9 %v", tc.name+":", p50, p99, p999)

		// Throughput with 16 concurrent callers for one second.
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			total int
		)
		stop := time.Now().Add(time.Second)
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k := 0
				for time.Now().Before(stop) {
					if httpGet(hc, tc.url) == nil {
						k++
					}
				}
				mu.Lock()
				total += k
				mu.Unlock()
			}()
		}
		wg.Wait()
		t.Logf("%-20s 16 callers: %d queries/s", tc.name+":", total)
	}
}
