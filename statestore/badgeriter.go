package statestore

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// badgerIter iterates one read transaction, yielding real keys in
// bytewise order within [from, to). Badger's order is that order except
// within a group of keys sharing their first slotPrefixLen bytes (see
// badgerkeys.go), so a group is read whole, sorted and then yielded. Key
// and Value are copied into buffers the iterator owns, so they stay valid
// even if the store closes under them.
type badgerIter struct {
	store *badgerStore
	keys  keyspace

	// mu makes Close of the store (from another goroutine) safe against a
	// Next in progress.
	mu       sync.Mutex
	txn      *badger.Txn
	iter     *badger.Iterator
	seek     []byte
	from, to []byte // real-key bounds; nil: unbounded
	started  bool
	// positioned: iter already stands on the next unread item (reading a
	// group stops on the first item after it).
	positioned bool
	group      []pair // the rest of the group being yielded
	done       bool
	err        error
	key        []byte // nil when not on a pair
	val        []byte
	kbuf, vbuf []byte // reused for items outside groups
}

func (it *badgerIter) Next() bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	for !it.done {
		if len(it.group) > 0 {
			p := it.group[0]
			it.group = it.group[1:]
			if it.from != nil && bytes.Compare(p.key, it.from) < 0 {
				continue
			}
			if it.to != nil && bytes.Compare(p.key, it.to) >= 0 {
				it.finish()
				return false
			}
			it.key, it.val = p.key, p.value
			return true
		}
		switch {
		case !it.started:
			it.started = true
			it.iter.Seek(it.seek)
		case it.positioned:
			it.positioned = false
		default:
			it.iter.Next()
		}
		if !it.iter.Valid() {
			it.finish()
			return false
		}
		item := it.iter.Item()
		if it.keys.inGroup(item.Key()) {
			if err := it.readGroup(); err != nil {
				it.err = fmt.Errorf("statestore: badger iterate: %w", err)
				it.finish()
				return false
			}
			continue
		}
		it.kbuf = item.KeyCopy(it.kbuf[:0])
		key := it.keys.real(it.kbuf)
		if it.from != nil && bytes.Compare(key, it.from) < 0 {
			continue
		}
		if it.to != nil && bytes.Compare(key, it.to) >= 0 {
			it.finish()
			return false
		}
		val, err := item.ValueCopy(it.vbuf[:0])
		if err != nil {
			it.err = fmt.Errorf("statestore: badger iterate: %w", err)
			it.finish()
			return false
		}
		if val == nil {
			val = []byte{}
		}
		it.vbuf = val
		it.key, it.val = key, val
		return true
	}
	return false
}

// readGroup reads the group starting at the current item into it.group,
// sorted by real key, leaving iter on the first item after it.
func (it *badgerIter) readGroup() error {
	first := it.iter.Item().Key()
	prefix := bytes.Clone(it.keys.groupOf(first))
	var group []pair
	for ; it.iter.Valid(); it.iter.Next() {
		item := it.iter.Item()
		k := item.Key()
		if !it.keys.inGroup(k) || !bytes.Equal(it.keys.groupOf(k), prefix) {
			break
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		if v == nil {
			v = []byte{}
		}
		if item.UserMeta() != metaSlotV1 {
			group = append(group, pair{key: bytes.Clone(it.keys.real(k)), value: v})
			continue
		}
		key, val, err := decodeSlot(v)
		if err != nil {
			return err
		}
		group = append(group, pair{key: key, value: val})
	}
	sortPairs(group)
	it.group, it.positioned = group, true
	return nil
}

// finish ends the iteration early, releasing the snapshot right away
// rather than at Close. Called with mu held.
func (it *badgerIter) finish() {
	it.done = true
	it.key, it.val, it.group = nil, nil, nil
	if it.iter != nil {
		it.iter.Close()
		it.txn.Discard()
		it.iter, it.txn = nil, nil
	}
}

// release closes the iterator from the store's side.
func (it *badgerIter) release(err error) {
	it.mu.Lock()
	defer it.mu.Unlock()
	if !it.done && it.err == nil {
		it.err = err
	}
	it.finish()
}

func (it *badgerIter) Key() []byte {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.done {
		return nil
	}
	return it.key
}

func (it *badgerIter) Value() []byte {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.done {
		return nil
	}
	return it.val
}

func (it *badgerIter) Err() error {
	it.mu.Lock()
	defer it.mu.Unlock()
	return it.err
}

func (it *badgerIter) Close() error {
	it.mu.Lock()
	it.finish()
	it.mu.Unlock()
	s := it.store
	s.itersMu.Lock()
	delete(s.iters, it)
	s.itersMu.Unlock()
	return nil
}
