package changelog

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/statestore"
)

// fakeStore is a map-backed statestore.Store that records its writes.
type fakeStore struct {
	mu       sync.Mutex
	data     map[string][]byte
	pos      int64
	writes   int
	maxBatch int
	failWith error
	onWrite  func(entries []statestore.Entry, position int64) // called under mu
	resets   int
	resetErr error
	onReset  func() // called after a successful Reset, without mu
}

func newFakeStore() *fakeStore {
	return &fakeStore{data: make(map[string][]byte), pos: statestore.NoPosition}
}

func (s *fakeStore) Get(key []byte) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[string(key)]
	return v, ok, nil
}

func (s *fakeStore) Put(key, value []byte) error {
	return s.Write([]statestore.Entry{{Key: key, Value: value}}, s.position())
}

func (s *fakeStore) Delete(key []byte) error {
	return s.Write([]statestore.Entry{{Key: key}}, s.position())
}

func (s *fakeStore) Range(from, to []byte) (statestore.Iterator, error) {
	return nil, errors.New("fakeStore: Range not supported")
}

func (s *fakeStore) All() (statestore.Iterator, error) {
	return nil, errors.New("fakeStore: All not supported")
}

func (s *fakeStore) ApproximateCount() (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.data)), nil
}

func (s *fakeStore) Write(entries []statestore.Entry, position int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failWith != nil {
		return s.failWith
	}
	if s.onWrite != nil {
		s.onWrite(entries, position)
	}
	for _, e := range entries {
		if e.Deleted() {
			delete(s.data, string(e.Key))
		} else {
			s.data[string(e.Key)] = slices.Clone(e.Value)
		}
	}
	s.pos = position
	s.writes++
	s.maxBatch = max(s.maxBatch, len(entries))
	return nil
}

func (s *fakeStore) Position() (int64, error) { return s.position(), nil }

func (s *fakeStore) Reset() error {
	s.mu.Lock()
	if s.resetErr != nil {
		s.mu.Unlock()
		return s.resetErr
	}
	clear(s.data)
	s.pos = statestore.NoPosition
	s.resets++
	hook := s.onReset
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	return nil
}

func (s *fakeStore) resetCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resets
}

func (s *fakeStore) position() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pos
}

func (s *fakeStore) Close() error { return nil }

func (s *fakeStore) snapshot() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.data))
	for k, v := range s.data {
		out[k] = string(v)
	}
	return out
}

func (s *fakeStore) stats() (writes, maxBatch int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes, s.maxBatch
}

func (s *fakeStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.data)
}

var _ statestore.Store = (*fakeStore)(nil)

func newCluster(t testing.TB, partitions int32, topics ...string) *kfake.Cluster {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1)}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(partitions, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func newProducer(t testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// produce writes kvs (a nil value is a tombstone) to one partition and
// waits for them to be acknowledged.
func produce(t testing.TB, cl *kgo.Client, topic string, partition int32, kvs ...statestore.Entry) {
	t.Helper()
	var track Offsets
	Send(context.Background(), cl, topic, partition, kvs, &track)
	require.NoError(t, cl.Flush(context.Background()))
	require.NoError(t, track.Err())
}

func kv(k, v string) statestore.Entry { return statestore.Entry{Key: []byte(k), Value: []byte(v)} }

func del(k string) statestore.Entry { return statestore.Entry{Key: []byte(k)} }

func numbered(from, to int) []statestore.Entry {
	var out []statestore.Entry
	for i := from; i < to; i++ {
		out = append(out, kv(fmt.Sprintf("k%04d", i), fmt.Sprintf("v%d", i)))
	}
	return out
}

func expectMap(entries ...statestore.Entry) map[string]string {
	out := make(map[string]string)
	for _, e := range entries {
		if e.Deleted() {
			delete(out, string(e.Key))
		} else {
			out[string(e.Key)] = string(e.Value)
		}
	}
	return out
}

func newReader(t testing.TB, c *kfake.Cluster, mod func(*ReaderConfig)) *Reader {
	t.Helper()
	cfg := ReaderConfig{Seeds: c.ListenAddrs(), RetryBackoff: 50 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	r, err := NewReader(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// pollUntil drives r from the test goroutine until cond holds for the
// completions gathered so far, failing after a deadline.
func pollUntil(t testing.TB, r *Reader, cond func(done []Completed) bool) []Completed {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var all []Completed
	for !cond(all) {
		require.True(t, time.Now().Before(deadline), "condition not reached; completions so far: %+v", all)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		done, err := r.Poll(ctx)
		cancel()
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
		}
		all = append(all, done...)
	}
	return all
}

func completedFor(topic string, partition int32) func([]Completed) bool {
	return func(done []Completed) bool {
		for _, c := range done {
			if c.Topic == topic && c.Partition == partition {
				return true
			}
		}
		return false
	}
}

// runPolling drives r in the background until the test ends, sending
// completions to the returned channel.
func runPolling(t testing.TB, r *Reader) <-chan Completed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan Completed, 64)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			done, err := r.Poll(ctx)
			for _, c := range done {
				out <- c
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	return out
}

// eventually waits for cond, failing after a deadline.
func eventually(t testing.TB, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 5*time.Millisecond, append([]any{msg}, args...)...)
}

func keysOf(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
