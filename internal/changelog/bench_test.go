package changelog

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/statestore"
)

// discardStore keeps only its position, isolating the reader's own cost.
type discardStore struct {
	fakeStore
}

func (s *discardStore) Write(entries []statestore.Entry, position int64) error {
	s.mu.Lock()
	s.pos = position
	s.mu.Unlock()
	return nil
}

// BenchmarkRestore restores benchRecords records (10-byte keys, 8-byte
// values, as small as changelog records get) from an in-process kfake
// broker into a store. The broker shares the CPU with the reader, so the
// figure is a floor for a real cluster, not a ceiling.
func BenchmarkRestore(b *testing.B) {
	const benchRecords = 200_000
	c := newCluster(b, 1, clTopic)
	prod := newProducer(b, c)
	entries := make([]statestore.Entry, 0, 10_000)
	for i := range benchRecords {
		key := []byte(fmt.Sprintf("key%07d", i))
		val := binary.BigEndian.AppendUint64(nil, uint64(i))
		entries = append(entries, statestore.Entry{Key: key, Value: val})
		if len(entries) == cap(entries) {
			produce(b, prod, clTopic, 0, entries...)
			entries = entries[:0]
		}
	}
	produce(b, prod, clTopic, 0, entries...)

	for _, bc := range []struct {
		name  string
		store func() statestore.Store
	}{
		{"map", func() statestore.Store { return newFakeStore() }},
		{"discard", func() statestore.Store { return &discardStore{fakeStore{pos: statestore.NoPosition}} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var total time.Duration
			for b.Loop() {
				store := bc.store()
				r, err := NewReader(ReaderConfig{Seeds: c.ListenAddrs()})
				require.NoError(b, err)
				start := time.Now()
				require.NoError(b, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Restore}))
				var done []Completed
				for len(done) == 0 {
					d, err := r.Poll(context.Background())
					require.NoError(b, err)
					done = append(done, d...)
				}
				total += time.Since(start)
				require.NoError(b, done[0].Err)
				require.Equal(b, int64(benchRecords), done[0].Restored)
				require.NoError(b, r.Close())
			}
			b.ReportMetric(float64(benchRecords)*float64(b.N)/total.Seconds(), "records/s")
		})
	}
}
