package statestore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every key shown passes, through the filter's growth; keys never shown
// (deleted ones) mostly do not; showing keys again does not grow it.
func TestKeyFilter(t *testing.T) {
	const n = 200_000
	f := newKeyFilter()
	key := func(i int) []byte { return fmt.Appendf(nil, "key-%d", i) }
	for i := range n {
		f.add([]Entry{{Key: key(i), Value: []byte("v")}, {Key: key(-1 - i)}})
	}
	for i := range n {
		require.True(t, f.mayHave(key(i)), "key %d", i)
	}
	passed := 0
	for i := range n {
		if f.mayHave(key(-1 - i)) {
			passed++
		}
	}
	rate := float64(passed) / n
	t.Logf("%d layers, %d bytes (%.1f bits per key); absent keys passed: %.2f%%", len(*f.layers.Load()), f.bytes(), 8*float64(f.bytes())/n, 100*rate)
	require.Less(t, rate, 0.08, "absent keys that pass")
	require.Less(t, f.bytes(), n*20/8, "bytes")

	size := f.bytes()
	for range 3 {
		for i := range n {
			f.add([]Entry{{Key: key(i), Value: []byte("w")}})
		}
	}
	require.Equal(t, size, f.bytes(), "keys shown again grow the filter")
}

// A store that holds no key answers a Get of a key it was never given
// without reading badger, and finds every key written to it through each
// way of writing; one opened on keys reads them all.
func TestBadgerAbsentKeysSkipTheRead(t *testing.T) {
	dir := t.TempDir()
	s := openTestBadger(t, dir, testBadgerOptions())
	bs := s.(*badgerStore)
	_, found, err := s.Get([]byte("never"))
	require.NoError(t, err)
	require.False(t, found)
	require.Nil(t, bs.shared, "a Get of a key the store cannot hold took a read transaction")

	require.NoError(t, s.Put([]byte("put"), []byte("1")))
	require.NoError(t, s.Write([]Entry{{Key: []byte("written"), Value: []byte("2")}}, 5))
	big := make([]Entry, 20_000) // torn: more than one transaction
	for i := range big {
		big[i] = Entry{Key: fmt.Appendf(nil, "big-%05d", i), Value: []byte("3")}
	}
	require.NoError(t, s.Write(big, 6))
	for _, k := range []string{"put", "written", "big-00000", "big-19999"} {
		_, found, err := s.Get([]byte(k))
		require.NoError(t, err)
		require.True(t, found, k)
	}

	require.NoError(t, s.Close())
	s = openTestBadger(t, dir, testBadgerOptions())
	bs = s.(*badgerStore)
	require.Nil(t, bs.absent.Load(), "a store opened on keys has no filter")
	_, found, err = s.Get([]byte("big-12345"))
	require.NoError(t, err)
	require.True(t, found)

	require.NoError(t, s.Reset())
	require.NotNil(t, bs.absent.Load(), "a reset store is empty")
	require.NoError(t, s.Put([]byte("after"), []byte("4")))
	_, found, err = s.Get([]byte("after"))
	require.NoError(t, err)
	require.True(t, found)
}

// The same for stores of a shared database, written by Commit, reset, and
// reopened.
func TestSharedBadgerAbsentKeysSkipTheRead(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenSharedBadger(dir, testBadgerOptions())
	require.NoError(t, err)
	a, err := d.Open("0_0/a")
	require.NoError(t, err)
	_, found, err := a.Get([]byte("k"))
	require.NoError(t, err)
	require.False(t, found)
	require.Nil(t, a.(*badgerStore).shared, "a Get of a key the store cannot hold took a read transaction")
	require.NoError(t, d.Commit([]StoreWrite{{Store: a, Entries: []Entry{{Key: []byte("k"), Value: []byte("1")}}, Position: 3}}))
	v, found, err := a.Get([]byte("k"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "1", string(v))

	require.NoError(t, a.Close())
	a, err = d.Open("0_0/a")
	require.NoError(t, err)
	require.Nil(t, a.(*badgerStore).absent.Load(), "a store opened on keys has no filter")
	require.NoError(t, a.Reset())
	require.NotNil(t, a.(*badgerStore).absent.Load(), "a reset store is empty")
	require.NoError(t, d.Commit([]StoreWrite{{Store: a, Entries: []Entry{{Key: []byte("j"), Value: []byte("2")}}, Position: 1}}))
	_, found, err = a.Get([]byte("j"))
	require.NoError(t, err)
	require.True(t, found)
	require.NoError(t, a.Close())
	require.NoError(t, d.Close())
}

// Readers of a store whose filter grows under a writer find every key
// written before their Get began.
func TestBadgerAbsentKeysWhileWriting(t *testing.T) {
	s := openTestBadger(t, t.TempDir(), testBadgerOptions())
	const batch, batches = 1000, 30
	var written atomic.Int64
	stop := readWritten(t, s, 3, &written)
	for b := range int64(batches) {
		es := make([]Entry, batch)
		for j := range es {
			es[j] = Entry{Key: growKey(b*batch + int64(j)), Value: []byte("v")}
		}
		require.NoError(t, s.Write(es, b+1))
		written.Store((b + 1) * batch)
	}
	stop()
	require.Greater(t, len(*s.(*badgerStore).absent.Load().layers.Load()), 1, "the filter grew meanwhile")
}

// growKey is the i-th key the tests of a growing store write.
func growKey(i int64) []byte { return fmt.Appendf(nil, "key-%07d", i) }

// readWritten starts n readers that Get keys below written, as it grows,
// until stop, which fails the test if any of them missed one.
func readWritten(t *testing.T, s Store, n int, written *atomic.Int64) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	errs := make(chan error, n)
	var readers sync.WaitGroup
	for r := range n {
		readers.Go(func() {
			for i := int64(r); ; i += 7 {
				select {
				case <-done:
					return
				default:
				}
				w := written.Load()
				if w == 0 {
					continue
				}
				k := growKey(i % w)
				if _, found, err := s.Get(k); err != nil || !found {
					errs <- fmt.Errorf("%s written before the Get: found %v, %v", k, found, err)
					return
				}
			}
		})
	}
	return func() {
		t.Helper()
		close(done)
		readers.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}
}

// wrapped hides a store behind a wrapper, as the runtime's stores are.
type wrapped struct{ Store }

func (w wrapped) Inner() Store { return w.Store }

// A store written from its changelog drops its filter before the first
// restored key lands: every restored key is then found, by Gets that ran
// while it was written as by later ones, and a reset store starts with a
// filter again.
func TestBadgerRestoredStoreFindsEveryKey(t *testing.T) {
	for _, layout := range []string{"own", "shared"} {
		t.Run(layout, func(t *testing.T) {
			var s Store
			if layout == "own" {
				s = openTestBadger(t, t.TempDir(), testBadgerOptions())
			} else {
				s = openTestShared(t, openTestSharedDB(t, t.TempDir()), "0_0/counts")
			}
			bs := s.(*badgerStore)
			require.NotNil(t, bs.absent.Load(), "a new store has a filter")
			var written atomic.Int64
			stop := readWritten(t, s, 2, &written)
			// Batches as the changelog reader writes them, then one too
			// big for a badger transaction (torn).
			sizes := []int64{3000, 3000, 3000, 20_000}
			var pos int64
			for _, size := range sizes {
				es := make([]Entry, size)
				for j := range es {
					es[j] = Entry{Key: growKey(pos + int64(j)), Value: []byte("v")}
				}
				Restoring(wrapped{s})
				require.NoError(t, s.Write(es, pos+size))
				pos += size
				written.Store(pos)
			}
			stop()
			require.Nil(t, bs.absent.Load(), "restored keys were shown to the filter")
			for i := range pos {
				_, found, err := s.Get(growKey(i))
				require.NoError(t, err)
				require.True(t, found, "restored key %d", i)
			}

			require.NoError(t, s.Reset())
			require.NotNil(t, bs.absent.Load(), "a reset store is empty")
			Restoring(s)
			require.NoError(t, s.Write([]Entry{{Key: growKey(1), Value: []byte("again")}}, 1))
			require.Nil(t, bs.absent.Load())
			v, found, err := s.Get(growKey(1))
			require.NoError(t, err)
			require.True(t, found)
			require.Equal(t, "again", string(v))
		})
	}
}
