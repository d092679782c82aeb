package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testWriteAtomic checks that readers never see part of a Write: every
// Write sets all keys to the same generation number.
func testWriteAtomic(t *testing.T, b backend) {
	s := b.open(t)
	const keys, writes = 50, 200
	batch := func(gen uint64) []Entry {
		es := make([]Entry, keys)
		for i := range es {
			v := binary.BigEndian.AppendUint64(nil, gen)
			es[i] = Entry{Key: fmt.Appendf(nil, "key-%02d", i), Value: v}
		}
		return es
	}
	require.NoError(t, s.Write(batch(0), 0))

	done := make(chan error, 1)
	go func() {
		for g := uint64(1); g <= writes; g++ {
			if err := s.Write(batch(g), int64(g)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()

	check := func() {
		it, err := s.All()
		require.NoError(t, err)
		n, first := 0, []byte(nil)
		for it.Next() {
			if first == nil {
				first = append([]byte{}, it.Value()...)
			}
			require.Equal(t, first, it.Value(), "a reader saw part of a Write")
			n++
		}
		require.NoError(t, it.Err())
		require.NoError(t, it.Close())
		require.Equal(t, keys, n)
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-done:
			require.NoError(t, err)
			check()
			pos, err := s.Position()
			require.NoError(t, err)
			require.Equal(t, int64(writes), pos)
			return
		case <-deadline:
			t.Fatal("writer did not finish")
		default:
			check()
		}
	}
}

// testResetAtomicForReaders resets a store under concurrent readers: a
// read sees the whole old contents or none of them, and an iteration cut
// short says so with ErrReset.
func testResetAtomic(t *testing.T, b backend) {
	s := b.open(t)
	const keys = 200
	es := make([]Entry, keys)
	for i := range es {
		es[i] = Entry{Key: fmt.Appendf(nil, "key-%03d", i), Value: []byte("v")}
	}
	require.NoError(t, s.Write(es, 9))

	stop := make(chan struct{})
	errs := make(chan error, 1)
	var reads atomic.Int64
	go func() {
		defer close(errs)
		for {
			select {
			case <-stop:
				return
			default:
			}
			it, err := s.All()
			if err != nil {
				errs <- err
				return
			}
			n := 0
			for it.Next() {
				n++
			}
			ierr := it.Err()
			it.Close()
			switch {
			case ierr != nil && !errors.Is(ierr, ErrReset):
				errs <- ierr
				return
			case ierr == nil && n != 0 && n != keys:
				errs <- fmt.Errorf("a reader saw %d of %d keys", n, keys)
				return
			}
			reads.Add(1)
		}
	}()
	// Reads before, during and after the reset.
	waitReads := func(n int64) {
		deadline := time.Now().Add(10 * time.Second)
		for reads.Load() < n {
			select {
			case err := <-errs:
				require.NoError(t, err)
				t.Fatal("reader stopped")
			default:
			}
			require.True(t, time.Now().Before(deadline), "reader stalled")
			runtime.Gosched()
		}
	}
	waitReads(1)
	require.NoError(t, s.Reset())
	waitReads(reads.Load() + 2)
	close(stop)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Empty(t, collectAll(t, s))
}

// testBigBatchAtomic writes batches far beyond one badger transaction
// (longKeys keys beyond the badger key limit with values of 100 KB, and
// thousands of entries with 300-byte values) while readers check they
// never see part of one, then checks the last batch and its position
// survive a reopen. Unless logged, every Write is without a position.
func testBigBatchAtomic(t *testing.T, b backend, longKeys int, logged bool) {
	s := b.open(t)
	const smallKeys, writes = 3000, 8
	key := func(i int) []byte {
		if i < longKeys {
			return fmt.Appendf(bytes.Repeat([]byte("k"), 70_000), "%03d", i)
		}
		return fmt.Appendf(nil, "small-%05d", i)
	}
	batch := func(gen uint64) []Entry {
		es := make([]Entry, longKeys+smallKeys)
		for i := range es {
			v := binary.BigEndian.AppendUint64(nil, gen)
			if i < longKeys {
				v = append(v, bytes.Repeat([]byte{byte(gen)}, 100_000)...)
			} else {
				v = append(v, bytes.Repeat([]byte{byte(gen)}, 300)...)
			}
			es[i] = Entry{Key: key(i), Value: v}
		}
		return es
	}
	position := func(g uint64) int64 {
		if !logged {
			return NoPosition
		}
		return int64(g)
	}
	require.NoError(t, s.Write(batch(0), position(0)))
	done := make(chan error, 1)
	go func() {
		for g := uint64(1); g <= writes; g++ {
			if err := s.Write(batch(g), position(g)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	check := func(s Store) uint64 {
		it, err := s.All()
		require.NoError(t, err)
		n, gen := 0, uint64(0)
		for it.Next() {
			g := binary.BigEndian.Uint64(it.Value())
			if n == 0 {
				gen = g
			}
			require.Equal(t, gen, g, "a reader saw part of a Write")
			n++
		}
		require.NoError(t, it.Err())
		require.NoError(t, it.Close())
		require.Equal(t, longKeys+smallKeys, n)
		v, found, err := s.Get(key(0))
		require.NoError(t, err)
		require.True(t, found)
		require.GreaterOrEqual(t, binary.BigEndian.Uint64(v), gen)
		return gen
	}
	deadline := time.After(60 * time.Second)
	for finished := false; !finished; {
		select {
		case err := <-done:
			require.NoError(t, err)
			finished = true
		case <-deadline:
			t.Fatal("writer did not finish")
		default:
			check(s)
		}
	}
	require.Equal(t, uint64(writes), check(s))
	if b.reopen != nil {
		s = b.reopen(t, s)
		require.Equal(t, uint64(writes), check(s))
	}
	pos, err := s.Position()
	require.NoError(t, err)
	require.Equal(t, position(writes), pos)
}
