package iq

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

// fakeReplica is a local replica whose role and positions tests set.
type fakeReplica struct {
	mu    sync.Mutex
	info  ReplicaInfo
	store statestore.Store
	// onInfo, when set, may change the description at each Info call
	// (calls counts them from 1): a replica changing under a query.
	onInfo func(calls int, i *ReplicaInfo)
	calls  int
}

func (r *fakeReplica) Info() ReplicaInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.onInfo != nil {
		r.calls++
		r.onInfo(r.calls, &r.info)
	}
	return r.info
}

func (r *fakeReplica) Store() statestore.Store { return r.store }

// set changes the replica's description; the lag follows End and
// Position unless the replica is rebuilding or its lag unconfirmed
// (LagConfirmedAgo Unknown), when it is unknown.
func (r *fakeReplica) set(f func(*ReplicaInfo)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.info)
	r.info.Lag = max(r.info.End-r.info.Position, 0)
	if r.info.Rebuilding || r.info.LagConfirmedAgo < 0 {
		r.info.Lag = -1
	}
}

// put writes key=value through Store.Write and moves the position, as a
// restoration or commit would.
func (r *fakeReplica) put(t testing.TB, key string, value int64) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	v, _ := serde.Int64.Encode(value)
	pos := r.info.Position + 1
	require.NoError(t, r.store.Write([]statestore.Entry{{Key: []byte(key), Value: v}}, pos))
	r.info.Position = pos
	r.info.End = max(r.info.End, pos)
	r.info.Lag = r.info.End - r.info.Position
}

// fakeBackend is an instance as the runtime would describe it.
type fakeBackend struct {
	mu         sync.RWMutex
	self       string
	meta       Metadata
	metaErr    error
	partitions map[string]int32
	replicas   map[StorePartition]*fakeReplica
	replicaErr error // when set, Replica fails with it
	// layouts are the window and session stores; the others are
	// key-value stores.
	layouts map[string]StoreLayout
}

func (f *fakeBackend) StoreLayout(store string) (StoreLayout, error) {
	if _, ok := f.partitions[store]; !ok {
		return StoreLayout{}, fmt.Errorf("%w: %q", ErrUnknownStore, store)
	}
	return f.layouts[store], nil
}

func newFakeBackend(self string, partitions map[string]int32) *fakeBackend {
	return &fakeBackend{self: self, partitions: partitions, replicas: make(map[StorePartition]*fakeReplica)}
}

func (f *fakeBackend) Self() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.self
}

func (f *fakeBackend) Metadata() (Metadata, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.meta, f.metaErr
}

func (f *fakeBackend) KeyPartition(store string, key []byte) (int32, error) {
	n, ok := f.partitions[store]
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrUnknownStore, store)
	}
	return topology.Partition(key, n), nil
}

func (f *fakeBackend) Replica(store string, p int32) (Replica, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if _, ok := f.partitions[store]; !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownStore, store)
	}
	if f.replicaErr != nil {
		return nil, f.replicaErr
	}
	r, ok := f.replicas[StorePartition{store, p}]
	if !ok {
		return nil, fmt.Errorf("%w: store %q partition %d", ErrNotHostedHere, store, p)
	}
	return r, nil
}

func (f *fakeBackend) LocalReplicas() []ReplicaInfo {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []ReplicaInfo
	for _, r := range f.replicas {
		out = append(out, r.Info())
	}
	return out
}

// add gives the instance a replica with a fresh in-memory store.
func (f *fakeBackend) add(store string, p int32, role Role) *fakeReplica {
	r := &fakeReplica{store: statestore.NewMemory(), info: ReplicaInfo{Store: store, Partition: p, Role: role}}
	if role != RoleActive {
		// A test that needs a standby's group contact sets it.
		r.info.ContactAgo = Unknown
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replicas[StorePartition{store, p}] = r
	return r
}

func (f *fakeBackend) remove(store string, p int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.replicas, StorePartition{store, p})
}

func (f *fakeBackend) setMeta(m Metadata, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.meta, f.metaErr = m, err
}

const testStore = "counts"

func countsCodec() StoreCodec { return CodecFor(testStore, serde.String, serde.Int64, nil) }

// fakeInstance is a fake backend behind a real HTTP server.
type fakeInstance struct {
	b    *fakeBackend
	srv  *Server
	http *httptest.Server
	hits atomic.Int64 // requests received
	hang atomic.Bool  // when set, requests get no answer until the caller gives up
}

func (in *fakeInstance) addr() string { return in.b.self }

// cluster is n fake instances sharing one routing table.
type cluster struct {
	t     testing.TB
	parts int32
	ins   []*fakeInstance
}

func newCluster(t testing.TB, n int, parts int32, cfg ServerConfig) *cluster {
	c := &cluster{t: t, parts: parts}
	for i := 0; i < n; i++ {
		in := &fakeInstance{}
		in.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			in.hits.Add(1)
			if in.hang.Load() {
				<-r.Context().Done()
				return
			}
			in.srv.ServeHTTP(w, r)
		}))
		in.b = newFakeBackend(in.http.Listener.Addr().String(), map[string]int32{testStore: parts})
		in.srv = NewServer(in.b, cfg, countsCodec())
		c.ins = append(c.ins, in)
	}
	t.Cleanup(func() {
		for _, in := range c.ins {
			in.http.Close()
			in.srv.Close()
		}
	})
	return c
}

// kill makes an instance unreachable: connections are refused from now on.
func (c *cluster) kill(i int) {
	c.ins[i].http.Close()
}

// publish builds the routing table from every instance's replicas and
// hands it to all of them.
func (c *cluster) publish() Metadata {
	m := Metadata{Partitions: maps.Clone(c.ins[0].b.partitions)}
	for _, in := range c.ins {
		hm := HostMetadata{Host: in.addr()}
		for _, info := range in.b.LocalReplicas() {
			sp := StorePartition{info.Store, info.Partition}
			switch info.Role {
			case RoleActive, RoleRestoring:
				hm.Active = append(hm.Active, sp)
			case RoleStandby:
				hm.Standby = append(hm.Standby, sp)
			case RoleWarmup:
				hm.Warmup = append(hm.Warmup, sp)
			}
		}
		for _, l := range [][]StorePartition{hm.Active, hm.Standby, hm.Warmup} {
			sort.Slice(l, func(i, j int) bool { return l[i].Partition < l[j].Partition })
		}
		m.Hosts = append(m.Hosts, hm)
	}
	sort.Slice(m.Hosts, func(i, j int) bool { return m.Hosts[i].Host < m.Hosts[j].Host })
	for _, in := range c.ins {
		in.b.setMeta(m, nil)
	}
	return m
}

func partitionOf(key string, n int32) int32 { return topology.Partition([]byte(key), n) }

// keyIn returns a key that hashes to partition p.
func keyIn(p, n int32, prefix string) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		if partitionOf(k, n) == p {
			return k
		}
	}
}

// noLeaks fails the test if goroutines started during it outlive it. Call
// it first, so its cleanup runs last.
func noLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				t.Errorf("goroutines leaked: %d before, %d after\n%s", before, runtime.NumGoroutine(), leakedStacks(string(buf[:n])))
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func leakedStacks(all string) string {
	var out []string
	for _, g := range strings.Split(all, "\n\n") {
		if strings.Contains(g, "testing.tRunner") || strings.Contains(g, "testing.(*T).Run") {
			continue
		}
		out = append(out, g)
	}
	return strings.Join(out, "\n\n")
}
