package topologytest

import (
	"bytes"
	"errors"
	"slices"
	"sort"

	"github.com/eddystreams/eddy/statestore"
)

// memStore is a map-backed statestore.ReadWriter, enough for tests. Its
// iterators walk a snapshot, so writes during iteration are not seen.
//
// Under Config.Commits it also answers HasCommitted, as the runtime's
// record cache does: whether a key held a value when its task last
// flushed, which
// decides whether a tombstone held since goes out (a key that held nothing
// then is deleted unseen, as by Kafka Streams' caching stores).
type memStore struct {
	m map[string][]byte
	// before holds, while tracking, each key's value as of the last
	// commit, for the keys written since (nil for a key absent then).
	tracking bool
	before   map[string][]byte
}

func newMemStore(tracking bool) *memStore {
	return &memStore{m: make(map[string][]byte), tracking: tracking, before: make(map[string][]byte)}
}

// HasCommitted reports whether key held a value at the last commit.
func (s *memStore) HasCommitted(key []byte) (bool, error) {
	if v, ok := s.before[string(key)]; ok {
		return v != nil, nil
	}
	_, ok := s.m[string(key)]
	return ok, nil
}

// SkipTombstone does nothing: a Delete of a key the store lacks changed
// nothing, and topologytest keeps no changelog.
func (s *memStore) SkipTombstone([]byte) {}

// commit makes the store's values the committed ones.
func (s *memStore) commit() { clear(s.before) }

// remember keeps key's committed value before its first write since the
// last commit.
func (s *memStore) remember(key []byte) {
	if !s.tracking {
		return
	}
	if _, ok := s.before[string(key)]; !ok {
		s.before[string(key)] = s.m[string(key)]
	}
}

func (s *memStore) Get(key []byte) ([]byte, bool, error) {
	v, ok := s.m[string(key)]
	if !ok {
		return nil, false, nil
	}
	return slices.Clone(v), true, nil
}

func (s *memStore) Put(key, value []byte) error {
	if value == nil {
		return errors.New("topologytest: Put with a nil value; use Delete")
	}
	s.remember(key)
	s.m[string(key)] = slices.Clone(value)
	return nil
}

func (s *memStore) Delete(key []byte) error {
	s.remember(key)
	delete(s.m, string(key))
	return nil
}

func (s *memStore) Range(from, to []byte) (statestore.Iterator, error) {
	keys := make([]string, 0, len(s.m))
	for k := range s.m {
		if from != nil && bytes.Compare([]byte(k), from) < 0 {
			continue
		}
		if to != nil && bytes.Compare([]byte(k), to) >= 0 {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	it := &memIter{pos: -1}
	for _, k := range keys {
		it.keys = append(it.keys, []byte(k))
		it.vals = append(it.vals, slices.Clone(s.m[k]))
	}
	return it, nil
}

func (s *memStore) All() (statestore.Iterator, error) { return s.Range(nil, nil) }

func (s *memStore) ApproximateCount() (int64, error) { return int64(len(s.m)), nil }

type memIter struct {
	keys, vals [][]byte
	pos        int
}

func (i *memIter) Next() bool {
	if i.pos+1 >= len(i.keys) {
		i.pos = len(i.keys)
		return false
	}
	i.pos++
	return true
}

func (i *memIter) Key() []byte   { return i.keys[i.pos] }
func (i *memIter) Value() []byte { return i.vals[i.pos] }
func (i *memIter) Err() error    { return nil }
func (i *memIter) Close() error  { return nil }
