package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Window and session stores are key-value stores with a composite key
// layout, so they reuse everything a key-value store has (the record
// cache, changelog writing, restoration, standbys, the position written
// with the data, resets) through the same code: WindowStore and
// SessionStore translate their operations into Get, Put, Delete and Range
// on a ReadWriter, usually the task's CachedStore, and SegmentedStore, a
// Store that sits under the cache, keeps the contents bounded by retention
// whoever writes them (a commit, a restoration, a standby).
//
// Keys. Times are milliseconds, never negative; integers are big-endian.
//
//	window:   segment (8) | escaped key | 00 01 | start (8)
//	session:  segment (8) | escaped key | 00 01 | end (8) | start (8)
//
// The segment is time / SegmentInterval, where time is the window's start
// or the session's end. The escaped key is the record key with every 00
// byte written as 00 ff; the terminator 00 01 cannot occur inside it. The
// escaping keeps keys in their byte order and makes the encoding
// prefix-free, so within a segment one key's windows are contiguous and
// ordered by time (one range scan), and keys are in byte order (a key range
// is one range scan too).
//
// Trade-off. Leading with the segment makes expiry cheap: everything below
// the oldest live segment is one key range, deleted without looking at
// keys, and reads never visit expired data. The price is one range scan per
// live segment for a key's windows instead of a single scan; with the
// default interval (half the retention) a read spans at most three or four
// segments. The other layout, key first, reads a key in one scan but finds
// expired windows only by scanning every key. Sessions are segmented by
// their end, since that is what decides when a session expires, and
// searched by it, since a session joining a record ends near it.
//
// Changelogs carry these keys as they are: restoring a window store
// writes them back verbatim. SegmentInterval is therefore part of a store's
// format: a store written with another interval is refused (see
// SegmentedStore) and must be reset.

// WindowOptions configure a window or session store.
type WindowOptions struct {
	// Retention, in milliseconds, is how long windows are kept after the
	// store's observed time (the latest window start, or session end,
	// written) passes their own: a window whose time is at or below
	// observed - Retention has expired. It must be positive, and at least
	// the windows' size plus grace (topology's MinRetention).
	Retention int64
	// SegmentInterval is the span of a segment in milliseconds; 0 means
	// max(Retention/2, 1). Storage holds at most about
	// Retention/SegmentInterval + 2 segments.
	SegmentInterval int64
	// WindowSize is the windows' length in milliseconds; a window store's
	// iterators report End as Start + WindowSize. Session stores ignore it.
	WindowSize int64
}

func (o WindowOptions) layout() (layout, error) {
	if o.Retention <= 0 {
		return layout{}, fmt.Errorf("statestore: window store retention must be positive, got %d", o.Retention)
	}
	if o.SegmentInterval < 0 || o.WindowSize < 0 {
		return layout{}, fmt.Errorf("statestore: window store segment interval and window size must not be negative")
	}
	iv := o.SegmentInterval
	if iv == 0 {
		iv = max(o.Retention/2, 1)
	}
	return layout{interval: iv, retention: o.Retention, size: o.WindowSize}, nil
}

// ErrNegativeTime is returned for a window or session time below 0.
var ErrNegativeTime = errors.New("statestore: window times must not be negative")

// noTime is the observed time of a store that has seen no window.
const noTime = math.MinInt64

// layout is the arithmetic of one store's keys.
type layout struct {
	interval, retention, size int64
}

func (l layout) segment(t int64) int64 { return t / l.interval }

// minLive is the earliest live time when the store has observed time obs.
func (l layout) minLive(obs int64) int64 {
	if obs == noTime {
		return 0
	}
	return max(0, obs-l.retention+1)
}

// segmentEnd is the last time segment s covers.
func (l layout) segmentEnd(s int64) int64 {
	if s > (math.MaxInt64-l.interval+1)/l.interval {
		return math.MaxInt64
	}
	return s*l.interval + l.interval - 1
}

func appendTime(dst []byte, t int64) []byte { return binary.BigEndian.AppendUint64(dst, uint64(t)) }

// appendKey appends the escaped key and its terminator.
func appendKey(dst, key []byte) []byte {
	for {
		i := bytes.IndexByte(key, 0)
		if i < 0 {
			break
		}
		dst = append(dst, key[:i]...)
		dst = append(dst, 0, 0xff)
		key = key[i+1:]
	}
	dst = append(dst, key...)
	return append(dst, 0, 1)
}

// prefix is the start of every composite key of key in segment seg.
func prefix(seg int64, key []byte) []byte {
	b := make([]byte, 0, 8+len(key)+2+16)
	return appendKey(appendTime(b, seg), key)
}

// afterKey turns prefix(seg, key) into the least key above all of key's
// entries in the segment: the terminator 00 01 becomes 00 02.
func afterKey(p []byte) []byte {
	p[len(p)-1] = 2
	return p
}

var errCorruptKey = errors.New("statestore: corrupt window store key")

// splitKey parses a composite key into its segment, the record key
// (unescaped into buf, which it returns) and the times after it.
func splitKey(k, buf []byte) (seg int64, key, rest []byte, err error) {
	if len(k) < 10 {
		return 0, nil, nil, errCorruptKey
	}
	seg = int64(binary.BigEndian.Uint64(k))
	key = buf[:0]
	for i := 8; i < len(k); i++ {
		if k[i] != 0 {
			key = append(key, k[i])
			continue
		}
		if i+1 == len(k) {
			break
		}
		switch k[i+1] {
		case 0xff:
			key = append(key, 0)
			i++
		case 1:
			return seg, key, k[i+2:], nil
		default:
			return 0, nil, nil, errCorruptKey
		}
	}
	return 0, nil, nil, errCorruptKey
}

// timeOf is the time after the record key of a composite key (the window
// start, or the session end), found without unescaping the key; ok is
// false for a key too short to hold one.
func timeOf(k []byte) (t int64, ok bool) {
	if _, rest, err := splitRest(k); err == nil && len(rest) >= 8 {
		return int64(binary.BigEndian.Uint64(rest)), true
	}
	return 0, false
}

// splitRest is splitKey without the record key, so without copying.
func splitRest(k []byte) (seg int64, rest []byte, err error) {
	if len(k) < 10 {
		return 0, nil, errCorruptKey
	}
	for i := 8; i+1 < len(k); i++ {
		if k[i] != 0 {
			continue
		}
		switch k[i+1] {
		case 0xff:
			i++
		case 1:
			return int64(binary.BigEndian.Uint64(k)), k[i+2:], nil
		default:
			return 0, nil, errCorruptKey
		}
	}
	return 0, nil, errCorruptKey
}

// keyTime is the time a composite key is segmented by (the first 8 bytes
// after the record key), checked against its segment under l.
func (l layout) keyTime(k []byte) (int64, error) {
	seg, rest, err := splitRest(k)
	if err != nil {
		return 0, err
	}
	if len(rest) != 8 && len(rest) != 16 {
		return 0, errCorruptKey
	}
	t := int64(binary.BigEndian.Uint64(rest))
	if t < 0 {
		return 0, errCorruptKey
	}
	if l.segment(t) != seg {
		return 0, fmt.Errorf("statestore: window store key of time %d is in segment %d, not %d: the store was written with another segment interval than %d ms and must be reset",
			t, seg, l.segment(t), l.interval)
	}
	return t, nil
}

// segmentRange finds, by seeking, the lowest and highest segments holding
// any key in rw. It opens one iterator per segment present.
func segmentRange(rw ReadWriter) (lo, hi int64, found bool, err error) {
	var from []byte
	for {
		it, err := rw.Range(from, nil)
		if err != nil {
			return 0, 0, false, err
		}
		ok := it.Next()
		var seg int64
		if ok {
			if len(it.Key()) < 8 {
				_ = it.Close()
				return 0, 0, false, errCorruptKey
			}
			seg = int64(binary.BigEndian.Uint64(it.Key()))
		}
		err = errors.Join(it.Err(), it.Close())
		if err != nil {
			return 0, 0, false, err
		}
		if !ok {
			return lo, hi, found, nil
		}
		if !found {
			lo = seg
		}
		hi, found = seg, true
		if seg < 0 || seg == math.MaxInt64 {
			return lo, hi, found, nil
		}
		from = appendTime(nil, seg+1)
	}
}

// tracker is what window and session stores know of time: the latest time
// written through them or found in the store when they opened.
type tracker struct {
	rw       ReadWriter
	l        layout
	opened   bool
	observed int64
	maxSeg   int64 // highest segment that may hold data; -1 for none
}

func (t *tracker) open() error {
	if t.opened {
		return nil
	}
	_, hi, found, err := segmentRange(t.rw)
	if err != nil {
		return err
	}
	t.opened, t.observed, t.maxSeg = true, noTime, -1
	if found {
		// The segment's start is a lower bound of its latest time: it may
		// hide fewer expired windows than the writer would, never more.
		t.observed, t.maxSeg = hi*t.l.interval, hi
	}
	return nil
}

// observe records a write at time x and reports whether x is still live.
func (t *tracker) observe(x int64) bool {
	t.observed = max(t.observed, x)
	t.maxSeg = max(t.maxSeg, t.l.segment(x))
	return x >= t.l.minLive(t.observed)
}

// WindowStore is the byte-level window store over a ReadWriter: values
// keyed by a record key and a window start. Windows expire by retention
// (see WindowOptions): reads never return them, and a write of an expired
// window is dropped, as Kafka Streams does. Actual removal is
// SegmentedStore's work, underneath.
//
// A WindowStore keeps the latest time written through it, so it is meant
// for one writer (the task's processor); readers, such as queries, open
// their own, which is cheap.
type WindowStore struct {
	t tracker
	// buf holds the key of the latest Update through an Updater, which
	// keeps no reference to the key it is given.
	buf []byte
}

// NewWindowStore returns a window store over rw, which holds only window
// store keys (it is a SegmentedStore or a cache over one).
func NewWindowStore(rw ReadWriter, opts WindowOptions) (*WindowStore, error) {
	l, err := opts.layout()
	if err != nil {
		return nil, err
	}
	return &WindowStore{t: tracker{rw: rw, l: l}}, nil
}

// ObservedTime is the latest window start the store has seen, or
// math.MinInt64.
func (s *WindowStore) ObservedTime() (int64, error) {
	if err := s.t.open(); err != nil {
		return noTime, err
	}
	return s.t.observed, nil
}

func (s *WindowStore) key(key []byte, start int64) []byte {
	return appendTime(prefix(s.t.l.segment(start), key), start)
}

// Put stores value for key's window starting at start; a nil value
// removes the window. A window already expired is not written.
func (s *WindowStore) Put(key []byte, start int64, value []byte) error {
	if start < 0 {
		return ErrNegativeTime
	}
	if err := s.t.open(); err != nil {
		return err
	}
	if value == nil {
		if start < s.t.l.minLive(s.t.observed) {
			return nil
		}
		return s.t.rw.Delete(s.key(key, start))
	}
	if !s.t.observe(start) {
		return nil
	}
	return s.t.rw.Put(s.key(key, start), value)
}

// Updater is a ReadWriter that can read and rewrite one key with a single
// lookup, as the runtime's record cache does. Update must not keep key.
type Updater interface {
	Update(key []byte, fn func(old []byte, found bool) ([]byte, error)) error
}

// Update is a read-modify-write of key's window starting at start: fn gets
// the window's value (found is false when there is none) and returns the
// new one, which must not be nil. On a ReadWriter that is an Updater it is
// one lookup, and the same rules hold as for Updater.Update: fn must
// neither modify nor keep old, and must return bytes nobody modifies
// afterwards; otherwise it is a Get and a Put. A window already expired
// reaches fn as absent and is not written, as Put would not.
func (s *WindowStore) Update(key []byte, start int64, fn func(old []byte, found bool) ([]byte, error)) error {
	if start < 0 {
		return ErrNegativeTime
	}
	if err := s.t.open(); err != nil {
		return err
	}
	if !s.t.observe(start) {
		_, err := fn(nil, false)
		return err
	}
	if u, ok := s.t.rw.(Updater); ok {
		s.buf = appendTime(appendKey(appendTime(s.buf[:0], s.t.l.segment(start)), key), start)
		return u.Update(s.buf, fn)
	}
	k := s.key(key, start)
	old, found, err := s.t.rw.Get(k)
	if err != nil {
		return err
	}
	v, err := fn(old, found)
	if err != nil {
		return err
	}
	if v == nil {
		return ErrNilValue
	}
	return s.t.rw.Put(k, v)
}

// Remove removes key's window starting at start.
func (s *WindowStore) Remove(key []byte, start int64) error { return s.Put(key, start, nil) }

// Get returns the value of key's window starting at start.
func (s *WindowStore) Get(key []byte, start int64) ([]byte, bool, error) {
	if start < 0 {
		return nil, false, nil
	}
	if err := s.t.open(); err != nil {
		return nil, false, err
	}
	if start < s.t.l.minLive(s.t.observed) {
		return nil, false, nil
	}
	return s.t.rw.Get(s.key(key, start))
}

// Fetch iterates over key's windows starting in [from, to] (both
// included), by ascending start.
func (s *WindowStore) Fetch(key []byte, from, to int64) (*WindowIterator, error) {
	return s.scan(key, key, from, to, false)
}

// FetchBackward is Fetch by descending start.
func (s *WindowStore) FetchBackward(key []byte, from, to int64) (*WindowIterator, error) {
	return s.scan(key, key, from, to, true)
}

// FetchRange iterates over the windows of the keys in [keyFrom, keyTo]
// (both included; nil is unbounded) starting in [from, to], ordered by
// segment, then key, then start: keys are in order only within a segment.
func (s *WindowStore) FetchRange(keyFrom, keyTo []byte, from, to int64) (*WindowIterator, error) {
	return s.scan(keyFrom, keyTo, from, to, false)
}

// FetchAll iterates over every window starting in [from, to], ordered as
// FetchRange.
func (s *WindowStore) FetchAll(from, to int64) (*WindowIterator, error) {
	return s.scan(nil, nil, from, to, false)
}

// FetchAllBackward is FetchAll in exactly reverse order.
func (s *WindowStore) FetchAllBackward(from, to int64) (*WindowIterator, error) {
	return s.scan(nil, nil, from, to, true)
}

func (s *WindowStore) scan(keyFrom, keyTo []byte, from, to int64, backward bool) (*WindowIterator, error) {
	if err := s.t.open(); err != nil {
		return nil, err
	}
	l := s.t.l
	from = max(from, l.minLive(s.t.observed))
	it := &WindowIterator{rw: s.t.rw, backward: backward}
	if from > to || s.t.maxSeg < 0 {
		return it, nil
	}
	lo, hi := l.segment(from), min(l.segment(to), s.t.maxSeg)
	single := keyFrom != nil && keyTo != nil && bytes.Equal(keyFrom, keyTo)
	it.segs = segmentList(lo, hi, backward)
	it.bounds = func(seg int64) ([]byte, []byte) {
		if single {
			// One key: its windows in the segment are ordered by start,
			// so the time bounds are key bounds too.
			p := prefix(seg, keyFrom)
			lo := appendTime(bytes.Clone(p), max(from, seg*l.interval))
			end := min(to, l.segmentEnd(seg))
			if end == math.MaxInt64 {
				return lo, afterKey(p)
			}
			return lo, appendTime(p, end+1)
		}
		return keyBounds(seg, keyFrom, keyTo)
	}
	it.decode = func(rest []byte) (int64, int64, bool) {
		if len(rest) != 8 {
			return 0, 0, false
		}
		st := int64(binary.BigEndian.Uint64(rest))
		return st, addSat(st, l.size), st >= from && st <= to
	}
	return it, nil
}

// keyBounds are the range bounds of keys [keyFrom, keyTo] in segment seg.
func keyBounds(seg int64, keyFrom, keyTo []byte) ([]byte, []byte) {
	lo := appendTime(nil, seg)
	if keyFrom != nil {
		lo = prefix(seg, keyFrom)
	}
	var hi []byte
	if keyTo != nil {
		hi = afterKey(prefix(seg, keyTo))
	} else if seg < math.MaxInt64 {
		hi = appendTime(nil, seg+1)
	}
	return lo, hi
}

func segmentList(lo, hi int64, backward bool) []int64 {
	if lo > hi {
		return nil
	}
	segs := make([]int64, 0, hi-lo+1)
	for s := lo; s <= hi; s++ {
		segs = append(segs, s)
	}
	if backward {
		slices.Reverse(segs)
	}
	return segs
}

func addSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// WindowIterator walks windows (or sessions) of a WindowStore or
// SessionStore, one segment after another. Key and Value are valid until
// the next call to Next. It must be closed.
//
// Going backward, the iterator reads each segment's matching entries into
// memory and yields them in reverse, since the byte-level iterators only
// go forward: a backward scan of a single key holds one segment's windows
// of that key, a backward FetchAll every window of the segment in range.
type WindowIterator struct {
	rw       ReadWriter
	segs     []int64
	backward bool
	bounds   func(seg int64) (lo, hi []byte)
	// decode reads the times after the record key, and whether the entry
	// is in the scan's time bounds.
	decode func(rest []byte) (start, end int64, ok bool)

	it      Iterator
	pending []windowEntry // backward: the current segment, reversed
	cur     windowEntry
	keyBuf  []byte
	err     error
	closed  bool
}

type windowEntry struct {
	key, value []byte
	start, end int64
}

// Next advances to the next window and reports whether there is one.
func (i *WindowIterator) Next() bool {
	if i.err != nil || i.closed {
		return false
	}
	for {
		if i.backward {
			if n := len(i.pending); n > 0 {
				i.cur, i.pending = i.pending[n-1], i.pending[:n-1]
				return true
			}
		} else if i.it != nil {
			if i.advance() {
				return true
			}
			if i.err != nil {
				return false
			}
		}
		if !i.nextSegment() {
			return false
		}
	}
}

// advance moves the open byte-level iterator to the next entry within the
// scan's bounds, filling cur.
func (i *WindowIterator) advance() bool {
	for i.it.Next() {
		_, key, rest, err := splitKey(i.it.Key(), i.keyBuf)
		if err != nil {
			i.err = err
			return false
		}
		i.keyBuf = key
		start, end, ok := i.decode(rest)
		if !ok {
			continue
		}
		i.cur = windowEntry{key: key, value: i.it.Value(), start: start, end: end}
		return true
	}
	i.err = errors.Join(i.it.Err(), i.it.Close())
	i.it = nil
	return false
}

// nextSegment opens the next segment's range, or for a backward scan
// reads it whole. It reports false when no segment is left or on error.
func (i *WindowIterator) nextSegment() bool {
	for len(i.segs) > 0 && i.err == nil {
		seg := i.segs[0]
		i.segs = i.segs[1:]
		lo, hi := i.bounds(seg)
		it, err := i.rw.Range(lo, hi)
		if err != nil {
			i.err = err
			return false
		}
		i.it = it
		if !i.backward {
			return true
		}
		for i.it != nil && i.advance() {
			e := i.cur
			e.key, e.value = bytes.Clone(e.key), bytes.Clone(e.value)
			i.pending = append(i.pending, e)
		}
		if len(i.pending) > 0 {
			return true
		}
	}
	return false
}

// Key returns the current record key.
func (i *WindowIterator) Key() []byte { return i.cur.key }

// Value returns the current value.
func (i *WindowIterator) Value() []byte { return i.cur.value }

// Start returns the current window's start.
func (i *WindowIterator) Start() int64 { return i.cur.start }

// End returns the current window's end: start plus the window size for a
// window store, the session's end for a session store.
func (i *WindowIterator) End() int64 { return i.cur.end }

// Err returns the first error of the iteration.
func (i *WindowIterator) Err() error { return i.err }

// Close releases the iterator.
func (i *WindowIterator) Close() error {
	if i.closed {
		return nil
	}
	i.closed = true
	i.pending = nil
	if i.it != nil {
		err := i.it.Close()
		i.it = nil
		return err
	}
	return nil
}
