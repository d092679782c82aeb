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
type memStore struct {
	m map[string][]byte
}

func newMemStore() *memStore { return &memStore{m: make(map[string][]byte)} }

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
	s.m[string(key)] = slices.Clone(value)
	return nil
}

func (s *memStore) Delete(key []byte) error {
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
