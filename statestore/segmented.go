package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// SegmentedStore is the Store of a window or session store: it stores
// each key behind its segment in the store it wraps (see the layout in
// window.go) and, on every write, removes the segments that have expired,
// so the data held stays bounded by retention rather than by history. It
// sits under the record cache, so expiry follows commits, restorations and
// standby batches alike, all of which arrive as Writes, and so what the
// cache and the changelog see are keys without segments.
//
// The store's observed time is the latest window start (session end) of
// any key written; a segment expires when all of its times are at or below
// observed - Retention, so the store holds the live windows plus less than
// one segment of expired ones. Writes of expired windows (a restoration
// reading old changelog records) are skipped, their position still
// recorded.
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
// The segment interval is part of what the wrapped store holds: reopening
// it with another interval fails at the first read or write (open checks
// the latest segment's keys), so the runtime records a store's interval
// beside it and reopens it with that one.
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
	// floor is the lowest segment that may still hold data; readers use
	// it to bound the segments a range visits.
	floor atomic.Int64
	// opened is set once open has read the store's segments, by the writer
	// or by the first read, whichever comes first; openMu serialises the
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
	s.floor.Store(0)
	newest := int64(noTime)
	if found {
		if err := s.checkInterval(hi); err != nil {
			return err
		}
		s.floor.Store(lo)
		s.observed.Store(max(s.observed.Load(), hi*s.l.interval))
		newest = s.l.segmentEnd(hi)
	}
	s.newest.Store(newest)
	s.opened.Store(true)
	return nil
}

// checkInterval reads the first key of segment seg and fails if its time
// lies in another segment under the store's interval: the store was
// written with another one.
func (s *SegmentedStore) checkInterval(seg int64) error {
	it, err := s.inner.Range(appendTime(nil, seg), nil)
	if err != nil {
		return err
	}
	var t int64
	if it.Next() {
		k := it.Key()
		if len(k) < 8 {
			err = errCorruptKey
		} else {
			t, err = keyTime(k[8:])
		}
	}
	if err := errors.Join(err, it.Err(), it.Close()); err != nil {
		return err
	}
	if s.l.segment(t) != seg {
		return fmt.Errorf("statestore: window store holds a key of time %d in segment %d, not %d: it was written with another segment interval than %d ms",
			t, seg, s.l.segment(t), s.l.interval)
	}
	return nil
}

// Write applies entries and position as the inner store does, each key
// behind its segment, skipping entries already expired, then removes
// expired segments. A key that is no window or session key fails the Write
// with an EntryError naming it.
func (s *SegmentedStore) Write(entries []Entry, position int64) error {
	if err := s.open(); err != nil {
		return err
	}
	obs, newest := s.observed.Load(), s.newest.Load()
	times := make([]int64, len(entries))
	size := 0
	for i, e := range entries {
		k := e.Key
		if legacyKey(k) {
			k = k[8:]
		}
		t, err := keyTime(k)
		if err != nil {
			return &EntryError{Index: i, Err: err}
		}
		times[i] = t
		size += 8 + len(k)
		if !e.Deleted() {
			obs, newest = max(obs, t), max(newest, t)
		}
	}
	live := s.l.minLive(obs)
	// The segmented keys share one allocation; the inner store keeps none
	// of them past Write.
	buf := make([]byte, 0, size)
	kept := make([]Entry, 0, len(entries))
	for i, e := range entries {
		if times[i] < live {
			continue
		}
		k := e.Key
		if legacyKey(k) {
			k = k[8:]
		}
		n := len(buf)
		buf = append(appendTime(buf, s.l.segment(times[i])), k...)
		kept = append(kept, Entry{Key: buf[n:len(buf):len(buf)], Value: e.Value})
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
	floor := s.floor.Load()
	if below <= floor {
		return nil
	}
	// From the floor, not from the start: on badger, the keys of segments
	// dropped earlier linger as tombstones until compaction reaches them,
	// and a scan from the start would step over all of them at every drop.
	from, end := appendTime(nil, floor), appendTime(nil, below)
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
	s.floor.Store(below)
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

// Get reads key from its segment, unless key's time is later than that of
// every key written, which it then reports absent.
func (s *SegmentedStore) Get(key []byte) ([]byte, bool, error) {
	// Opened here too: a task's first commit interval reads before the
	// store's first Write.
	if err := s.open(); err != nil {
		return nil, false, err
	}
	t, err := keyTime(key)
	if err != nil {
		return nil, false, err
	}
	if t > s.newest.Load() {
		return nil, false, nil
	}
	return s.inner.Get(append(appendTime(make([]byte, 0, 8+len(key)), s.l.segment(t)), key...))
}

// Range iterates over the keys in [from, to), in key order. Bounds within
// one record key's keys (as a window or session fetch of one key uses)
// visit only the segments of the times between them, one after another;
// other ranges merge the ranges of every segment that may hold data.
func (s *SegmentedStore) Range(from, to []byte) (Iterator, error) {
	tFrom, tTo := int64(0), int64(math.MaxInt64)
	if n, rest, err := splitRest(from); err == nil && len(to) >= n && bytes.Equal(from[:n-1], to[:n-1]) {
		switch {
		case to[n-1] == 2 && len(to) == n: // afterKey: all of the key's times
		case to[n-1] == 1 && len(to) >= n+8:
			tTo = int64(binary.BigEndian.Uint64(to[n:]))
			if len(to) == n+8 {
				tTo-- // to itself is excluded
			}
		default:
			return s.rangeTimes(from, to, 0, math.MaxInt64)
		}
		if len(rest) >= 8 {
			tFrom = int64(binary.BigEndian.Uint64(rest))
		}
		return s.segmentRanges(from, to, tFrom, tTo, true)
	}
	return s.rangeTimes(from, to, tFrom, tTo)
}

// rangeTimes is Range over the segments that may hold keys of times in
// [tFrom, tTo].
func (s *SegmentedStore) rangeTimes(from, to []byte, tFrom, tTo int64) (Iterator, error) {
	return s.segmentRanges(from, to, tFrom, tTo, false)
}

// maxListedSegments is how many segments a range lists without looking:
// beyond, it seeks the segments that hold data instead.
const maxListedSegments = 16

// segmentRanges reads [from, to) from each segment of the times [tFrom,
// tTo] that may hold data: one after another when chain says their ranges
// follow each other in key order (a single record key's), else merged.
func (s *SegmentedStore) segmentRanges(from, to []byte, tFrom, tTo int64, chain bool) (Iterator, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	newest := s.newest.Load()
	if newest == noTime || tFrom > tTo {
		return emptyIter{}, nil
	}
	lo := max(s.l.segment(max(tFrom, 0)), s.floor.Load(), s.l.segment(s.l.minLive(s.observed.Load())))
	hi := min(s.l.segment(tTo), s.l.segment(newest))
	var segs []int64
	if hi-lo < maxListedSegments {
		for g := lo; g <= hi; g++ {
			segs = append(segs, g)
		}
	} else {
		var err error
		if segs, err = presentSegments(s.inner, lo, hi); err != nil {
			return nil, err
		}
	}
	bounds := func(seg int64) ([]byte, []byte) {
		p := appendTime(nil, seg)
		lo := append(bytes.Clone(p), from...)
		if to != nil {
			return lo, append(p, to...)
		}
		if seg == math.MaxInt64 {
			return lo, nil
		}
		return lo, appendTime(nil, seg+1)
	}
	if chain {
		return &chainIter{inner: s.inner, segs: segs, bounds: bounds}, nil
	}
	m := &mergeIter{cur: -1}
	for _, seg := range segs {
		lo, hi := bounds(seg)
		it, err := s.inner.Range(lo, hi)
		if err != nil {
			return nil, errors.Join(err, m.Close())
		}
		m.its = append(m.its, it)
	}
	return m, nil
}

// presentSegments lists the segments in [lo, hi] that hold any key of
// inner, seeking from one to the next.
func presentSegments(inner Store, lo, hi int64) ([]int64, error) {
	var segs []int64
	for seg := lo; seg <= hi; {
		it, err := inner.Range(appendTime(nil, seg), nil)
		if err != nil {
			return nil, err
		}
		ok := it.Next()
		if ok {
			if len(it.Key()) < 8 {
				err = errCorruptKey
			} else {
				seg = int64(binary.BigEndian.Uint64(it.Key()))
			}
		}
		if err := errors.Join(err, it.Err(), it.Close()); err != nil {
			return nil, err
		}
		if !ok || seg > hi {
			break
		}
		segs = append(segs, seg)
		if seg == math.MaxInt64 {
			break
		}
		seg++
	}
	return segs, nil
}

// All iterates over every key, in key order.
func (s *SegmentedStore) All() (Iterator, error) { return s.Range(nil, nil) }

// DiskSize implements Sizer for an inner store that does; 0 for one that
// keeps no files.
func (s *SegmentedStore) DiskSize() (int64, error) {
	if sz, ok := s.inner.(Sizer); ok {
		return sz.DiskSize()
	}
	return 0, nil
}

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
	s.floor.Store(0)
	s.opened.Store(true)
	return nil
}

// Close closes the inner store.
func (s *SegmentedStore) Close() error { return s.inner.Close() }

// chainIter reads segments one after another, each as the inner store's
// range within it, without the segment in its keys.
type chainIter struct {
	inner  Store
	segs   []int64
	bounds func(seg int64) (lo, hi []byte)
	it     Iterator
	err    error
}

func (c *chainIter) Next() bool {
	for c.err == nil {
		if c.it != nil {
			if c.it.Next() {
				return true
			}
			c.err = errors.Join(c.it.Err(), c.it.Close())
			c.it = nil
			continue
		}
		if len(c.segs) == 0 {
			return false
		}
		lo, hi := c.bounds(c.segs[0])
		c.segs = c.segs[1:]
		c.it, c.err = c.inner.Range(lo, hi)
	}
	return false
}

func (c *chainIter) Key() []byte   { return c.it.Key()[8:] }
func (c *chainIter) Value() []byte { return c.it.Value() }
func (c *chainIter) Err() error    { return c.err }

func (c *chainIter) Close() error {
	c.segs = nil
	if c.it == nil {
		return nil
	}
	err := c.it.Close()
	c.it = nil
	return err
}

// mergeIter merges the ranges of several segments into key order, without
// the segment in its keys. A key lives in one segment only, so there are
// no ties.
type mergeIter struct {
	its     []Iterator
	heads   []bool // whether its[i] is positioned on a key
	cur     int    // the iterator Key and Value read; -1 before the first Next
	started bool
}

func (m *mergeIter) Next() bool {
	if !m.started {
		m.started = true
		m.heads = make([]bool, len(m.its))
		for i, it := range m.its {
			m.heads[i] = it.Next()
		}
	} else if m.cur >= 0 {
		m.heads[m.cur] = m.its[m.cur].Next()
	}
	m.cur = -1
	for i, ok := range m.heads {
		if ok && (m.cur < 0 || bytes.Compare(m.its[i].Key()[8:], m.its[m.cur].Key()[8:]) < 0) {
			m.cur = i
		}
	}
	return m.cur >= 0
}

func (m *mergeIter) Key() []byte   { return m.its[m.cur].Key()[8:] }
func (m *mergeIter) Value() []byte { return m.its[m.cur].Value() }

func (m *mergeIter) Err() error {
	var errs []error
	for _, it := range m.its {
		errs = append(errs, it.Err())
	}
	return errors.Join(errs...)
}

func (m *mergeIter) Close() error {
	var errs []error
	for _, it := range m.its {
		errs = append(errs, it.Close())
	}
	m.its, m.heads, m.cur = nil, nil, -1
	return errors.Join(errs...)
}

// emptyIter is a range with nothing in it.
type emptyIter struct{}

func (emptyIter) Next() bool    { return false }
func (emptyIter) Key() []byte   { return nil }
func (emptyIter) Value() []byte { return nil }
func (emptyIter) Err() error    { return nil }
func (emptyIter) Close() error  { return nil }
