package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
)

// SessionStore is the byte-level session store over a ReadWriter: values
// keyed by a record key and a session [start, end] (both included). Its
// keys, segments and retention are described with WindowStore's; sessions
// are segmented and expire by their end.
//
// Like WindowStore, it keeps the latest time written through it and is
// meant for one writer; readers open their own.
type SessionStore struct{ t tracker }

// NewSessionStore returns a session store over rw, which holds only
// session store keys (it is a SegmentedStore or a cache over one).
func NewSessionStore(rw ReadWriter, opts WindowOptions) (*SessionStore, error) {
	l, err := opts.layout()
	if err != nil {
		return nil, err
	}
	return &SessionStore{t: tracker{rw: rw, l: l}}, nil
}

// ErrBadSession is returned for a session whose end precedes its start.
var ErrBadSession = errors.New("statestore: session ends before it starts")

func (s *SessionStore) key(key []byte, start, end int64) []byte { return SessionKey(key, start, end) }

// SessionKey returns the key under which a SessionStore keeps key's
// session [start, end] in its ReadWriter, for a reader beneath the
// store's own methods (a record cache's committed values).
func SessionKey(key []byte, start, end int64) []byte {
	return appendTime(appendTime(prefix(key), end), start)
}

func checkSession(start, end int64) error {
	if start < 0 {
		return ErrNegativeTime
	}
	if end < start {
		return ErrBadSession
	}
	return nil
}

// ObservedTime is the latest session end the store has seen, or
// math.MinInt64.
func (s *SessionStore) ObservedTime() (int64, error) {
	if err := s.t.open(); err != nil {
		return noTime, err
	}
	return s.t.observed, nil
}

// Rewind is WindowStore.Rewind for sessions.
func (s *SessionStore) Rewind() { s.t.rewind() }

// Put stores value for key's session [start, end]; a nil value removes the
// session. A session already expired is not written. Merging sessions is
// the caller's work: it removes the sessions a merged one replaces.
func (s *SessionStore) Put(key []byte, start, end int64, value []byte) error {
	if err := checkSession(start, end); err != nil {
		return err
	}
	if err := s.t.open(); err != nil {
		return err
	}
	if value == nil {
		if end < s.t.l.minLive(s.t.observed) {
			return nil
		}
		return s.t.rw.Delete(s.key(key, start, end))
	}
	if !s.t.observe(end) {
		return nil
	}
	return s.t.rw.Put(s.key(key, start, end), value)
}

// Remove removes key's session [start, end].
func (s *SessionStore) Remove(key []byte, start, end int64) error {
	return s.Put(key, start, end, nil)
}

// Get returns the value of key's session [start, end].
func (s *SessionStore) Get(key []byte, start, end int64) ([]byte, bool, error) {
	if checkSession(start, end) != nil {
		return nil, false, nil
	}
	if err := s.t.open(); err != nil {
		return nil, false, err
	}
	if end < s.t.l.minLive(s.t.observed) {
		return nil, false, nil
	}
	return s.t.rw.Get(s.key(key, start, end))
}

// FindSessions iterates over key's sessions that end at or after
// earliestEnd and start at or before latestStart, the sessions a record
// joins (see topology.SessionWindows.SearchBounds), by ascending end, then
// start.
func (s *SessionStore) FindSessions(key []byte, earliestEnd, latestStart int64) (*WindowIterator, error) {
	return s.scan(key, key, earliestEnd, latestStart, false)
}

// FindSessionsBackward is FindSessions in reverse order.
func (s *SessionStore) FindSessionsBackward(key []byte, earliestEnd, latestStart int64) (*WindowIterator, error) {
	return s.scan(key, key, earliestEnd, latestStart, true)
}

// FindSessionsRange is FindSessions for the keys in [keyFrom, keyTo] (both
// included; nil is unbounded), ordered by key, then end and start.
func (s *SessionStore) FindSessionsRange(keyFrom, keyTo []byte, earliestEnd, latestStart int64) (*WindowIterator, error) {
	return s.scan(keyFrom, keyTo, earliestEnd, latestStart, false)
}

// Fetch iterates over all of key's live sessions.
func (s *SessionStore) Fetch(key []byte) (*WindowIterator, error) {
	return s.FindSessions(key, 0, math.MaxInt64)
}

func (s *SessionStore) scan(keyFrom, keyTo []byte, earliestEnd, latestStart int64, backward bool) (*WindowIterator, error) {
	if err := s.t.open(); err != nil {
		return nil, err
	}
	earliestEnd = max(earliestEnd, s.t.l.minLive(s.t.observed))
	if latestStart < 0 || s.t.observed == noTime {
		return &WindowIterator{}, nil
	}
	var lo, hi []byte
	if keyFrom != nil && keyTo != nil && bytes.Equal(keyFrom, keyTo) {
		// A session's end has no upper bound but the latest observed.
		p := prefix(keyFrom)
		lo, hi = appendTime(bytes.Clone(p), earliestEnd), afterKey(p)
	} else {
		lo, hi = keyBounds(keyFrom, keyTo)
	}
	it, err := rangeTimes(s.t.rw, lo, hi, earliestEnd, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	return newWindowIterator(it, backward, func(rest []byte) (int64, int64, bool) {
		if len(rest) != 16 {
			return 0, 0, false
		}
		end := int64(binary.BigEndian.Uint64(rest))
		start := int64(binary.BigEndian.Uint64(rest[8:]))
		return start, end, end >= earliestEnd && start <= latestStart
	})
}
