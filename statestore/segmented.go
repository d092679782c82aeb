package statestore

import (
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"sync/atomic"
)

// SegmentedStore is the Store of a window or session store: it passes
// everything to the store it wraps and, on every write, removes the
// segments that have expired, so the data held stays bounded by retention
// rather than by history. It sits under the record cache, so expiry
// follows commits, restorations and standby batches alike, all of which
// arrive as Writes.
//
// The store's observed time is the latest window start (session end) of
// any key written; a segment expires when all of its times are at or below
// observed - Retention. Writes of expired windows (a restoration reading
// old changelog records) are skipped, their position still recorded.
//
// Removing expired segments is local: nothing is sent to the changelog,
// whose own retention (cleanup.policy compact,delete; see
// changelog.WindowedTopicConfigs) forgets them in its own time, and the
// position is left as it is. The deletion runs in batches, each one Write
// with the unchanged position; a crash part way leaves expired keys that
// reads already ignore and the next expiry removes. A segment of more
// than dropBatch keys on badger is dropped by prefix instead (DB.DropPrefix:
// tables of the segment alone are deleted, others rewritten without it):
// tombstones for a large segment would take as much room as its data
// until compaction met them, so disk and memory kept growing for several
// retention periods. Small segments keep the per-key deletes, since each
// DropPrefix flushes the memtable and compacts level 0.
//
// A key whose segment does not match its time under the store's
// SegmentInterval (a changelog written with another interval) fails the
// Write with an EntryError naming it: the store must be reset.
type SegmentedStore struct {
	inner Store
	l     layout
	// observed is read by ObservedTime from any goroutine; the writer
	// serialises everything else.
	observed atomic.Int64
	// newest bounds from above the times of the keys the inner store may
	// hold, so that Get answers
	// for a window newer than all of them without a lookup: a window
	// aggregation asks for every new window before writing it, and the
	// inner store is badger, where a miss costs as much as a hit.
	newest atomic.Int64
	// floor is the lowest segment that may still hold data.
	floor int64
	// opened is set once open has read the store's segments, by the writer
	// or by the first Get, whichever comes first; openMu serialises the
	// two.
	opened atomic.Bool
	openMu sync.Mutex
}

// dropBatch is how many expired keys one deletion Write removes. A
// segment holding more is removed by prefix where the inner store can.
const dropBatch = 4096

// prefixDropper is an inner store that can remove every key with a given
// prefix at once (badger), rather than writing a tombstone per key that
// stays on disk until compaction reaches the keys it deletes.
type prefixDropper interface {
	dropPrefix(prefix []byte) error
}

// NewSegmentedStore wraps inner, which holds only window or session store
// keys laid out as opts says.
func NewSegmentedStore(inner Store, opts WindowOptions) (*SegmentedStore, error) {
	l, err := opts.layout()
	if err != nil {
		return nil, err
	}
	s := &SegmentedStore{inner: inner, l: l}
	s.observed.Store(noTime)
	s.newest.Store(math.MaxInt64)
	return s, nil
}

// Inner returns the wrapped store.
func (s *SegmentedStore) Inner() Store { return s.inner }

// ObservedTime is the latest time written, or math.MinInt64 before any
// (the start of the latest segment, for a store reopened with data).
func (s *SegmentedStore) ObservedTime() int64 { return s.observed.Load() }

func (s *SegmentedStore) open() error {
	if s.opened.Load() {
		return nil
	}
	s.openMu.Lock()
	defer s.openMu.Unlock()
	if s.opened.Load() {
		return nil
	}
	lo, hi, found, err := segmentRange(s.inner)
	if err != nil {
		return err
	}
	s.floor = 0
	newest := int64(noTime)
	if found {
		s.floor = lo
		s.observed.Store(max(s.observed.Load(), hi*s.l.interval))
		newest = s.l.segmentEnd(hi)
	}
	s.newest.Store(newest)
	s.opened.Store(true)
	return nil
}

// Write applies entries and position as the inner store does, skipping
// entries already expired, then removes expired segments.
func (s *SegmentedStore) Write(entries []Entry, position int64) error {
	if err := s.open(); err != nil {
		return err
	}
	obs, newest := s.observed.Load(), s.newest.Load()
	times := make([]int64, len(entries))
	for i, e := range entries {
		t, err := s.l.keyTime(e.Key)
		if err != nil {
			return &EntryError{Index: i, Err: err}
		}
		times[i] = t
		if !e.Deleted() {
			obs, newest = max(obs, t), max(newest, t)
		}
	}
	live := s.l.minLive(obs)
	var kept []Entry // nil while every entry so far is kept
	for i, e := range entries {
		switch {
		case times[i] < live && kept == nil:
			kept = append(make([]Entry, 0, len(entries)), entries[:i]...)
		case times[i] >= live && kept != nil:
			kept = append(kept, e)
		}
	}
	if kept == nil {
		kept = entries
	}
	// Raised before the write lands, so no Get skips a key already there.
	s.newest.Store(newest)
	if err := s.inner.Write(kept, position); err != nil {
		return err
	}
	s.observed.Store(obs)
	return s.dropExpired(position)
}

// Expire advances the observed time to streamTime, if it is later, and
// removes the segments that have expired. A task calls it when stream
// time advances without writes to the store.
func (s *SegmentedStore) Expire(streamTime int64) error {
	if err := s.open(); err != nil {
		return err
	}
	if streamTime > s.observed.Load() {
		s.observed.Store(streamTime)
	}
	pos, err := s.inner.Position()
	if err != nil {
		return err
	}
	return s.dropExpired(pos)
}

// dropExpired deletes every segment below the oldest live one, keeping
// position.
func (s *SegmentedStore) dropExpired(position int64) error {
	obs := s.observed.Load()
	if obs == noTime {
		return nil
	}
	below := s.l.segment(s.l.minLive(obs))
	if below <= s.floor {
		return nil
	}
	// From the floor, not from the start: on badger, the keys of segments
	// dropped earlier linger as tombstones until compaction reaches them,
	// and a scan from the start would step over all of them at every drop.
	from, end := appendTime(nil, s.floor), appendTime(nil, below)
	for {
		it, err := s.inner.Range(from, end)
		if err != nil {
			return err
		}
		var dels []Entry
		for len(dels) < dropBatch && it.Next() {
			dels = append(dels, Entry{Key: append([]byte(nil), it.Key()...)})
		}
		if err := errors.Join(it.Err(), it.Close()); err != nil {
			return err
		}
		if len(dels) == 0 {
			break
		}
		if d, ok := s.inner.(prefixDropper); ok && len(dels) == dropBatch {
			// A large segment goes whole, without a tombstone per key.
			seg := int64(binary.BigEndian.Uint64(dels[0].Key))
			if err := d.dropPrefix(appendTime(nil, seg)); err != nil {
				return err
			}
			from = appendTime(nil, seg+1)
			continue
		}
		if err := s.inner.Write(dels, position); err != nil {
			return err
		}
		// The next batch starts after this one's keys, now tombstones.
		from = append(dels[len(dels)-1].Key, 0)
	}
	s.floor = below
	return nil
}

// Put writes one window without changing the position; see Write.
func (s *SegmentedStore) Put(key, value []byte) error {
	if value == nil {
		return ErrNilValue
	}
	return s.single(Entry{Key: key, Value: value})
}

// Delete removes one window without changing the position.
func (s *SegmentedStore) Delete(key []byte) error { return s.single(Entry{Key: key}) }

func (s *SegmentedStore) single(e Entry) error {
	pos, err := s.inner.Position()
	if err != nil {
		return err
	}
	return s.Write([]Entry{e}, pos)
}

// Get reads from the inner store, unless key's time is later than that of
// every key written, which it then reports absent.
func (s *SegmentedStore) Get(key []byte) ([]byte, bool, error) {
	// Opened here too: a task's first commit interval reads before the
	// store's first Write.
	if err := s.open(); err != nil {
		return nil, false, err
	}
	if t, ok := timeOf(key); ok && t > s.newest.Load() {
		return nil, false, nil
	}
	return s.inner.Get(key)
}

// Range reads from the inner store.
func (s *SegmentedStore) Range(from, to []byte) (Iterator, error) { return s.inner.Range(from, to) }

// All reads from the inner store.
func (s *SegmentedStore) All() (Iterator, error) { return s.inner.All() }

// ApproximateCount is the inner store's.
func (s *SegmentedStore) ApproximateCount() (int64, error) { return s.inner.ApproximateCount() }

// Position is the inner store's.
func (s *SegmentedStore) Position() (int64, error) { return s.inner.Position() }

// Reset empties the inner store and forgets the observed time.
func (s *SegmentedStore) Reset() error {
	if err := s.inner.Reset(); err != nil {
		return err
	}
	s.openMu.Lock()
	defer s.openMu.Unlock()
	s.observed.Store(noTime)
	s.newest.Store(noTime)
	s.floor = 0
	s.opened.Store(true)
	return nil
}

// Close closes the inner store.
func (s *SegmentedStore) Close() error { return s.inner.Close() }
