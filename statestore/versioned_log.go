package statestore

import (
	"bytes"
	"errors"
)

// A versioned store's changelog holds one record per version put, as
// Kafka Streams' does: the record key, the value a plain table's store
// holds for it (timestamped, see AppendTimestamped) or a tombstone, and the
// version's time as the record's timestamp. A plain table's store reads
// these records as its own writes, and a versioned store reads a plain
// table's changelog as puts, so a table moves between the two kinds by
// restoring its store from the changelog it has.
//
// VersionedChangelog reads each entry by its Origin and nothing else: a
// TimedRecord is put at its time, a LoggedRecord (a plain table's write)
// is put at the time its value carries, and an OwnWrite (the record
// cache's commit of the store's own keys) is written as it is.

// VersionLogger is implemented by the ReadWriter a task hands a versioned
// store's processor: the store tells it of every version it puts, in put
// order, for the changelog.
type VersionLogger interface {
	// LogVersion is called after value (nil for a tombstone) was put as
	// key's version at ts. The slices are the caller's: copy them to
	// keep them.
	LogVersion(key, value []byte, ts int64)
}

// VersionRecord returns the changelog record of a version put: key (a
// copy), the timestamped value or a tombstone, and ts as its time.
func VersionRecord(key, value []byte, ts int64) Entry {
	e := Entry{Key: bytes.Clone(key), Time: ts, Origin: TimedRecord}
	if value != nil {
		e.Value = AppendTimestamped(nil, ts, value)
	}
	return e
}

// VersionedChangelog is the Store of a versioned store as its writers see
// it: the record cache's commits write the store's own entries, and the
// changelog's readers (restoration, standbys) write changelog records,
// which it puts into the versioned store in order. Reads, positions and
// resets are the inner store's.
type VersionedChangelog struct {
	Store
	opts VersionedOptions
	// replay is what the replayed writes know of the store, nil until
	// the next one (see replayState).
	replay *replayState
}

// NewVersionedChangelog wraps s, a versioned store's backing store.
func NewVersionedChangelog(s Store, opts VersionedOptions) *VersionedChangelog {
	return &VersionedChangelog{Store: s, opts: opts}
}

// Inner returns the wrapped store (see TornUntil).
func (v *VersionedChangelog) Inner() Store { return v.Store }

// DiskSize implements Sizer for an inner store that does; 0 for one that
// keeps no files.
func (v *VersionedChangelog) DiskSize() (int64, error) {
	if sz, ok := v.Store.(Sizer); ok {
		return sz.DiskSize()
	}
	return 0, nil
}

// errMixedWrite is returned for a Write holding both the store's own
// entries and changelog records: each comes from one writer.
var errMixedWrite = errors.New("statestore: a versioned store's write holds both its own entries and changelog records")

// Write applies entries with position, in one write of the inner store:
// the store's own entries (OwnWrite) as they are; changelog records put
// in order as versions, the write holding their outcome.
func (v *VersionedChangelog) Write(entries []Entry, position int64) error {
	puts := 0
	for _, e := range entries {
		if isPut(e) {
			puts++
		}
	}
	if puts == 0 {
		v.replay = nil
		return v.Store.Write(entries, position)
	}
	if puts < len(entries) {
		return errMixedWrite
	}
	if v.replay == nil {
		r, err := newReplayState(v.Store, v.opts.HistoryRetention)
		if err != nil {
			return err
		}
		v.replay = r
	}
	out, err := v.replay.apply(v.Store, entries)
	if err == nil {
		err = v.Store.Write(out, position)
	}
	if err != nil || v.replay.n > maxKnownVersions {
		v.replay = nil
	}
	return err
}

// Put writes the inner store, and forgets what replay knew of it.
func (v *VersionedChangelog) Put(key, value []byte) error {
	v.replay = nil
	return v.Store.Put(key, value)
}

// Delete writes the inner store, and forgets what replay knew of it.
func (v *VersionedChangelog) Delete(key []byte) error {
	v.replay = nil
	return v.Store.Delete(key)
}

// Reset empties the store, and forgets what replay knew of it.
func (v *VersionedChangelog) Reset() error {
	v.replay = nil
	return v.Store.Reset()
}

// isPut reports whether e is a changelog record to put, not one of the
// store's own entries.
func isPut(e Entry) bool { return e.Origin != OwnWrite }
