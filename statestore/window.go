package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Window and session stores are key-value stores with a composite key
// layout, so they reuse everything a key-value store has (the record
// cache, changelog writing, restoration, standbys, the position written
// with the data, resets) through the same code: WindowStore and
// SessionStore translate their operations into Get, Put, Delete and Range
// on a ReadWriter, usually the task's cache.Store, and SegmentedStore, a
// Store that sits under the cache, keeps the contents bounded by retention
// whoever writes them (a commit, a restoration, a standby).
//
// Keys. Times are milliseconds, never negative; integers are big-endian.
// What WindowStore and SessionStore, the cache and the changelog see:
//
//	window:   escaped key | 00 01 | start (8)
//	session:  escaped key | 00 01 | end (8) | start (8)
//
// The escaped key is the record key with every 00 byte written as 00 ff;
// the terminator 00 01 cannot occur inside it. The escaping keeps keys in
// their byte order and makes the encoding prefix-free, so one key's windows
// are contiguous and ordered by time (one range scan), and keys are in
// byte order. Such a key never starts with 00 00.
//
// Segments. SegmentedStore stores each key behind its segment,
//
//	segment (8) | key as above
//
// where the segment is time / SegmentInterval and the time is the window's
// start or the session's end (what decides when it expires). Leading with
// the segment makes expiry cheap: everything below the oldest live segment
// is one key range, deleted without looking at keys. Reads go through
// SegmentedStore, which maps a range to each live segment's part of it and
// merges them in key order; a range within one record key's times visits
// only the segments of those times, one after another.
//
// The segment is the store's own business: the changelog carries keys
// without it, so a changelog restores into a store of any interval, and a
// store keeps the interval it was created with (the runtime records it
// beside the store). Changelogs written before segments left the changelog
// carry segment-prefixed keys, recognisable by their leading 00 00 (any
// segment below 2^48); SegmentedStore strips the old segment on Write.

// WindowOptions configure a window or session store.
type WindowOptions struct {
	// Retention, in milliseconds, is how long windows are kept after the
	// store's observed time (the latest window start, or session end,
	// written) passes their own: a window whose time is at or below
	// observed - Retention has expired. It must be positive, and at least
	// the windows' size plus grace (topology's MinRetention).
	Retention int64
	// SegmentInterval is the span of a segment in milliseconds, used by
	// SegmentedStore only; 0 means DefaultSegmentInterval(Retention).
	// Storage holds the live windows plus at most one segment's worth of
	// expired ones.
	SegmentInterval int64
	// WindowSize is the windows' length in milliseconds; a window store's
	// iterators report End as Start + WindowSize. Session stores ignore it.
	WindowSize int64
}

// minSegmentInterval bounds DefaultSegmentInterval from below, so that a
// long retention is not cut into segments too small to be worth a
// deletion each.
const minSegmentInterval = 1000

// DefaultSegmentInterval is the segment interval of a store with the given
// retention: an eighth of it, so that a store holds at most 1/8 of a
// retention period of expired windows, but no less than a second (or half
// the retention, if that is shorter).
func DefaultSegmentInterval(retention int64) int64 {
	return max(retention/8, min(retention/2, minSegmentInterval), 1)
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
		iv = DefaultSegmentInterval(o.Retention)
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

// prefix is the start of every key of the record key key.
func prefix(key []byte) []byte {
	return appendKey(make([]byte, 0, len(key)+2+16), key)
}

// afterKey turns prefix(key) into the least key above all of key's
// entries: the terminator 00 01 becomes 00 02.
func afterKey(p []byte) []byte {
	p[len(p)-1] = 2
	return p
}

// legacyKey reports whether k is a segment-prefixed key from a changelog
// written before segments left the changelog: a key without a segment
// never starts with 00 00 (see the layout above).
func legacyKey(k []byte) bool { return len(k) >= 10 && k[0] == 0 && k[1] == 0 }

var errCorruptKey = errors.New("statestore: corrupt window store key")

// splitKey parses a key into the record key (unescaped into buf, which it
// returns) and the times after it.
func splitKey(k, buf []byte) (key, rest []byte, err error) {
	key = buf[:0]
	for i := 0; i < len(k); i++ {
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
			return key, k[i+2:], nil
		default:
			return nil, nil, errCorruptKey
		}
	}
	return nil, nil, errCorruptKey
}

// splitRest is splitKey without the record key, so without copying; n is
// the length of the escaped key with its terminator.
func splitRest(k []byte) (n int, rest []byte, err error) {
	for i := 0; i+1 < len(k); i++ {
		if k[i] != 0 {
			continue
		}
		switch k[i+1] {
		case 0xff:
			i++
		case 1:
			return i + 2, k[i+2:], nil
		default:
			return 0, nil, errCorruptKey
		}
	}
	return 0, nil, errCorruptKey
}

// timeOf is the time after the record key of a key (the window start, or
// the session end); ok is false for a key too short to hold one.
func timeOf(k []byte) (t int64, ok bool) {
	if _, rest, err := splitRest(k); err == nil && len(rest) >= 8 {
		return int64(binary.BigEndian.Uint64(rest)), true
	}
	return 0, false
}

// keyTime is the time a key is segmented by (the first 8 bytes after the
// record key), checking the key's shape.
func keyTime(k []byte) (int64, error) {
	_, rest, err := splitRest(k)
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
	return t, nil
}

// segmentRange finds, by seeking, the lowest and highest segments holding
// any key in rw, a SegmentedStore's inner store. It opens one iterator per
// segment present.
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
}

// inner is a store that wraps another, as the record cache does.
type inner interface{ Inner() Store }

func (t *tracker) open() error {
	if t.opened {
		return nil
	}
	obs, err := observedIn(t.rw)
	if err != nil {
		return err
	}
	t.opened, t.observed = true, obs
	return nil
}

// observedIn is the observed time of the SegmentedStore under rw, found
// through wrappers that expose what they wrap; without one, the latest
// time of any key in rw, read in full.
func observedIn(rw ReadWriter) (int64, error) {
	for r := rw; r != nil; {
		switch s := r.(type) {
		case *SegmentedStore:
			if err := s.open(); err != nil {
				return noTime, err
			}
			return s.ObservedTime(), nil
		case inner:
			r = s.Inner()
		default:
			r = nil
		}
	}
	it, err := rw.All()
	if err != nil {
		return noTime, err
	}
	obs := int64(noTime)
	for it.Next() {
		if t, ok := timeOf(it.Key()); ok {
			obs = max(obs, t)
		}
	}
	return obs, errors.Join(it.Err(), it.Close())
}

// rewind forgets the times written through the tracker since it read the
// store beneath: the next use reads the observed time from there again.
func (t *tracker) rewind() { t.opened = false }

// observe records a write at time x and reports whether x is still live.
func (t *tracker) observe(x int64) bool {
	t.observed = max(t.observed, x)
	return x >= t.l.minLive(t.observed)
}

// timeRanger is a store that can narrow a range by the times its keys are
// segmented by (SegmentedStore): it reads only the segments that may hold
// a key of a time in [tFrom, tTo].
type timeRanger interface {
	rangeTimes(from, to []byte, tFrom, tTo int64) (Iterator, error)
}

// rangeTimes is rw's range [from, to) narrowed to times in [tFrom, tTo]
// where rw can, else the whole range.
func rangeTimes(rw ReadWriter, from, to []byte, tFrom, tTo int64) (Iterator, error) {
	if tr, ok := rw.(timeRanger); ok {
		return tr.rangeTimes(from, to, tFrom, tTo)
	}
	return rw.Range(from, to)
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

// Rewind makes the store forget the times written through it that the
// store beneath does not hold: after a record cache under it dropped its
// writes (an aborted transaction), its observed time is again that of the
// writes committed. It reads nothing until the store is next used.
func (s *WindowStore) Rewind() { s.t.rewind() }

func (s *WindowStore) key(key []byte, start int64) []byte {
	return appendTime(prefix(key), start)
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

// SlotUpdater is an Updater that also reports where the key's entry is
// kept, as the runtime's record cache does (cache.Store.UpdateAt): slot,
// a number that stays the key's until the cache's next commit or discard,
// and stored, the updater's own copy of the key, never modified.
type SlotUpdater interface {
	UpdateAt(key []byte, fn func(old []byte, found bool) ([]byte, error)) (slot int, stored []byte, err error)
}

// Update is a read-modify-write of key's window starting at start: fn gets
// the window's value (found is false when there is none) and returns the
// new one, which must not be nil. On a ReadWriter that is an Updater it is
// one lookup, and the same rules hold as for Updater.Update: fn must
// neither modify nor keep old, and must return bytes nobody modifies
// afterwards; otherwise it is a Get and a Put. A window already expired
// reaches fn as absent and is not written, as Put would not.
func (s *WindowStore) Update(key []byte, start int64, fn func(old []byte, found bool) ([]byte, error)) error {
	_, _, err := s.UpdateAt(key, start, fn)
	return err
}

// UpdateAt is Update, which also reports, when the ReadWriter is a
// SlotUpdater, the slot and stored key of the window's entry there, so
// that a caller keeping something per window until the cache commits can
// find it by slot rather than by key. slot is -1 (and stored nil) when the
// ReadWriter is no SlotUpdater or the window had expired and was not
// written.
func (s *WindowStore) UpdateAt(key []byte, start int64, fn func(old []byte, found bool) ([]byte, error)) (slot int, stored []byte, err error) {
	if start < 0 {
		return -1, nil, ErrNegativeTime
	}
	if err := s.t.open(); err != nil {
		return -1, nil, err
	}
	if !s.t.observe(start) {
		_, err := fn(nil, false)
		return -1, nil, err
	}
	switch u := s.t.rw.(type) {
	case SlotUpdater:
		s.buf = appendTime(appendKey(s.buf[:0], key), start)
		return u.UpdateAt(s.buf, fn)
	case Updater:
		s.buf = appendTime(appendKey(s.buf[:0], key), start)
		return -1, nil, u.Update(s.buf, fn)
	}
	k := s.key(key, start)
	old, found, err := s.t.rw.Get(k)
	if err != nil {
		return -1, nil, err
	}
	v, err := fn(old, found)
	if err != nil {
		return -1, nil, err
	}
	if v == nil {
		return -1, nil, ErrNilValue
	}
	return -1, nil, s.t.rw.Put(k, v)
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
// key, then start.
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
	if from > to || s.t.observed == noTime {
		return &WindowIterator{}, nil
	}
	var lo, hi []byte
	if keyFrom != nil && keyTo != nil && bytes.Equal(keyFrom, keyTo) {
		// One key: its windows are ordered by start, so the time bounds
		// are key bounds too.
		p := prefix(keyFrom)
		lo = appendTime(bytes.Clone(p), from)
		if to == math.MaxInt64 {
			hi = afterKey(p)
		} else {
			hi = appendTime(p, to+1)
		}
	} else {
		lo, hi = keyBounds(keyFrom, keyTo)
	}
	it, err := rangeTimes(s.t.rw, lo, hi, from, to)
	if err != nil {
		return nil, err
	}
	return newWindowIterator(it, backward, func(rest []byte) (int64, int64, bool) {
		if len(rest) != 8 {
			return 0, 0, false
		}
		st := int64(binary.BigEndian.Uint64(rest))
		return st, addSat(st, l.size), st >= from && st <= to
	})
}

// keyBounds are the range bounds of keys [keyFrom, keyTo].
func keyBounds(keyFrom, keyTo []byte) (lo, hi []byte) {
	if keyFrom != nil {
		lo = prefix(keyFrom)
	}
	if keyTo != nil {
		hi = afterKey(prefix(keyTo))
	}
	return lo, hi
}

func addSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
