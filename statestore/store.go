// Package statestore holds Eddy's byte-level key-value stores: the Store
// interface, a badger backend for persistent state, an in-memory backend, and
// the write-back record cache that sits in front of every logged store.
//
// A Store also keeps the changelog position its contents reflect. The position
// is written in the same atomic write as the data it covers (see Store.Write),
// so a crash never leaves the store claiming data it lacks: it holds a batch
// and the position after it, or neither, or, for a store that says so
// (TornStore), part of a batch under the old position until its changelog is
// replayed past the batch.
package statestore

import "errors"

// ErrClosed is returned by operations on a closed store.
var ErrClosed = errors.New("statestore: store is closed")

// ErrReset is reported by an iterator whose store was emptied by Reset
// while it was open.
var ErrReset = errors.New("statestore: store was reset")

// NoPosition is the position of a store that has never recorded one: its
// changelog must be read from the beginning.
const NoPosition int64 = -1

// Entry is one write: a put of Value under Key, or a delete of Key when
// Value is nil.
type Entry struct {
	Key   []byte
	Value []byte
	// Time, in milliseconds, is the timestamp of a changelog record: the
	// version's time in a versioned store's changelog, which replaying it
	// needs (see VersionedChangelog). For a LoggedRecord it is when the
	// record was produced, which says nothing of the value.
	Time int64
	// Origin says whether the entry is a store's own write or a
	// changelog record, which a versioned store reads as a put.
	Origin Origin
}

// Origin is where an Entry comes from. A plain store writes every entry
// as it is; a versioned store (VersionedChangelog) writes its own entries
// as they are and puts changelog records as versions.
type Origin uint8

const (
	// OwnWrite is a store's own write: a record cache's commit, a
	// task's put. It is the zero Origin.
	OwnWrite Origin = iota
	// LoggedRecord is a changelog record without its value's time: a
	// plain table's write.
	LoggedRecord
	// TimedRecord is a changelog record whose Time is its value's time:
	// a versioned store's put (see VersionRecord).
	TimedRecord
)

// Deleted reports whether e is a delete (a tombstone).
func (e Entry) Deleted() bool { return e.Value == nil }

// Iterator walks key-value pairs in ascending key order. Key and Value are
// valid only until the next call to Next; copy them to keep them.
type Iterator interface {
	// Next advances to the next pair and reports whether there is one.
	Next() bool
	Key() []byte
	Value() []byte
	// Err returns the first error the iteration hit, if any.
	Err() error
	// Close releases the iterator. It must be called.
	Close() error
}

// ReadWriter is the byte-level key-value interface processors see (through
// typed wrappers in package topology).
type ReadWriter interface {
	// Get returns the value for key and whether it was found.
	Get(key []byte) (value []byte, found bool, err error)
	// Put stores value under key. A nil value is not allowed; use Delete.
	Put(key, value []byte) error
	// Delete removes key. Deleting an absent key is not an error.
	Delete(key []byte) error
	// Range iterates over keys in [from, to). A nil bound is unbounded.
	Range(from, to []byte) (Iterator, error)
	// All iterates over every key.
	All() (Iterator, error)
	// ApproximateCount estimates the number of keys.
	ApproximateCount() (int64, error)
}

// Sizer is a store that keeps files. DiskSize estimates the bytes they
// hold, for metrics and inspection rather than for decisions.
type Sizer interface {
	DiskSize() (int64, error)
}

// Store is a persistent or in-memory key-value store with a changelog
// position. Reads may run concurrently with one writer and always see either
// all or none of a Write.
type Store interface {
	ReadWriter
	// Write applies entries in order and records position (the offset of
	// the next changelog record to apply) atomically with them: readers
	// see all of it or none, and so does a crash, except in a TornStore.
	Write(entries []Entry, position int64) error
	// Position returns the changelog position recorded by the last Write,
	// or NoPosition.
	Position() (int64, error)
	// Reset removes every key and the position in one step, leaving the
	// store as if newly created: readers, and a crash, see either the old
	// contents with the old position or an empty store at NoPosition, never
	// a mix. It is how a store whose position no longer fits its changelog
	// is rebuilt. Iterators open at the time may end with ErrReset.
	Reset() error
	// Close flushes and releases the store. Closing twice is a no-op.
	Close() error
}

// TornStore is implemented by a store whose large Writes with a position
// are atomic for readers but not across a crash: one cut short leaves
// part of its entries applied under the old position. The store stays
// correct for changelog-backed state, whose Writes hold what the
// changelog holds between the two positions as final values per key: a
// replay of the changelog from the store's position sets every key it
// touched to its latest value, over the entries applied or not. Until the
// replay passes the torn Write's position, the store's contents are no
// snapshot of any offset.
type TornStore interface {
	// TornUntil returns the position a torn store must reach before its
	// contents are consistent again, and whether it is torn.
	TornUntil() (target int64, torn bool)
}

// TornUntil reports whether s, or a store it wraps (one with an Inner
// method, as SegmentedStore), is torn; see TornStore.
func TornUntil(s Store) (int64, bool) {
	for s != nil {
		if t, ok := s.(TornStore); ok {
			return t.TornUntil()
		}
		w, ok := s.(interface{ Inner() Store })
		if !ok {
			break
		}
		s = w.Inner()
	}
	return NoPosition, false
}

// Restoring tells s, or a store it wraps, that the writes about to come
// are changelog records, restored or followed rather than processed. A
// badger store drops its filter of new keys (keyfilter.go): showing it
// every restored key costs a hash and a memory access per layer, about a
// tenth of a restoration's rate, and spares a read only to the keys a
// task will later write for the first time. Such a store then reads
// badger for any key it does not hold, as a store opened on keys does,
// until a Reset starts it empty with a new filter.
func Restoring(s Store) {
	for s != nil {
		if r, ok := s.(interface{ restoring() }); ok {
			r.restoring()
			return
		}
		w, ok := s.(interface{ Inner() Store })
		if !ok {
			return
		}
		s = w.Inner()
	}
}
