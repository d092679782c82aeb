package statestore

import (
	"bytes"
	"errors"
	"math"
	"slices"
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
	// known is what the replayed writes read of the store, nil until the
	// next one (see knownVersions).
	known *knownVersions
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

// Write applies entries in order with position, in one write of the inner
// store: the store's own entries as they are, changelog records as puts,
// through a buffer over the store, so that a record sees the versions the
// ones before it in the batch put, and the write holds their outcome.
func (v *VersionedChangelog) Write(entries []Entry, position int64) error {
	if !slices.ContainsFunc(entries, isPut) {
		v.known = nil
		return v.Store.Write(entries, position)
	}
	if v.known == nil {
		v.known = newKnownVersions()
	}
	buf := newVersionBuffer(v.Store)
	buf.known = v.known
	vs := &VersionedStore{rw: buf, retention: v.opts.HistoryRetention}
	for i, e := range entries {
		if err := replay(vs, buf, e); err != nil {
			v.known = nil
			return &EntryError{Index: i, Err: err}
		}
	}
	if err := v.Store.Write(buf.entries(), position); err != nil {
		v.known = nil
		return err
	}
	if !v.known.apply(buf) {
		v.known = nil
	}
	return nil
}

// Put writes the inner store, and forgets what replay knew of it.
func (v *VersionedChangelog) Put(key, value []byte) error {
	v.known = nil
	return v.Store.Put(key, value)
}

// Delete writes the inner store, and forgets what replay knew of it.
func (v *VersionedChangelog) Delete(key []byte) error {
	v.known = nil
	return v.Store.Delete(key)
}

// Reset empties the store, and forgets what replay knew of it.
func (v *VersionedChangelog) Reset() error {
	v.known = nil
	return v.Store.Reset()
}

// isPut reports whether e is a changelog record to put, not one of the
// store's own entries.
func isPut(e Entry) bool { return e.Origin != OwnWrite }

// replay applies one record to vs, whose store is buf.
func replay(vs *VersionedStore, buf *versionBuffer, e Entry) error {
	if !isPut(e) {
		if e.Value == nil {
			return buf.Delete(e.Key)
		}
		return buf.Put(e.Key, e.Value)
	}
	if e.Value != nil {
		value, ts := SplitTimestamped(e.Value)
		if ts == NoTimestamp {
			// A bare value, from a store that kept no timestamps: its
			// record's time is the best there is.
			ts = e.Time
		}
		_, _, err := vs.Put(e.Key, value, ts)
		return err
	}
	ts := e.Time
	if e.Origin != TimedRecord {
		// A plain table's delete: its record carries no time of the
		// table's, only when it was produced. The delete came after
		// every version of the key, so it is dated at the store's
		// observed time, which keeps the history before it and moves
		// no cut-off.
		obs, err := vs.ObservedTime()
		if err != nil || obs == math.MinInt64 {
			return err
		}
		ts = obs
	}
	_, _, err := vs.Put(e.Key, nil, ts)
	return err
}

// versionBuffer is a write buffer over a store for VersionedStore puts: it
// holds the writes of one batch and reads through to the store for the
// rest. Its Range serves VersionedStore's walks of one key's versions,
// from the key's prefix to the end of it, and nothing else.
type versionBuffer struct {
	inner ReadWriter
	// known, if set, holds versions of the inner store, read from it
	// once.
	known  *knownVersions
	writes map[string]pendingWrite
	order  []string
	// byPrefix holds the written version keys of each record key, by its
	// prefix (see prefix), sorted.
	byPrefix map[string][]string
}

type pendingWrite struct {
	value   []byte
	deleted bool
}

var errBufferRange = errors.New("statestore: a version buffer ranges over one key's versions only")

func newVersionBuffer(inner ReadWriter) *versionBuffer {
	return &versionBuffer{inner: inner, writes: make(map[string]pendingWrite), byPrefix: make(map[string][]string)}
}

func (b *versionBuffer) Get(key []byte) ([]byte, bool, error) {
	if w, ok := b.writes[string(key)]; ok {
		return w.value, !w.deleted, nil
	}
	return b.inner.Get(key)
}

func (b *versionBuffer) Put(key, value []byte) error {
	if value == nil {
		return ErrNilValue
	}
	b.write(key, pendingWrite{value: value})
	return nil
}

func (b *versionBuffer) Delete(key []byte) error {
	b.write(key, pendingWrite{deleted: true})
	return nil
}

func (b *versionBuffer) write(key []byte, w pendingWrite) {
	k := string(key)
	if _, ok := b.writes[k]; !ok {
		b.order = append(b.order, k)
		if len(key) > 8 && !bytes.Equal(key, observedKey) {
			p := k[:len(k)-8]
			keys := b.byPrefix[p]
			i, _ := slices.BinarySearch(keys, k)
			b.byPrefix[p] = slices.Insert(keys, i, k)
		}
	}
	b.writes[k] = w
}

func (b *versionBuffer) Range(from, to []byte) (Iterator, error) {
	if len(from) < 2 || len(to) != len(from) || !bytes.Equal(from[:len(from)-1], to[:len(to)-1]) {
		return nil, errBufferRange
	}
	var it Iterator
	if b.known != nil {
		vs, err := b.known.versions(b.inner, from, to)
		if err != nil {
			return nil, err
		}
		it = &knownIter{vs: vs}
	} else {
		var err error
		if it, err = b.inner.Range(from, to); err != nil {
			return nil, err
		}
	}
	return &bufferIter{b: b, pending: b.byPrefix[string(from)], inner: it, needInner: true}, nil
}

func (b *versionBuffer) All() (Iterator, error) { return nil, errBufferRange }

func (b *versionBuffer) ApproximateCount() (int64, error) { return b.inner.ApproximateCount() }

// entries returns the buffered writes, one per key, in the order the keys
// were first written.
func (b *versionBuffer) entries() []Entry {
	out := make([]Entry, 0, len(b.order))
	for _, k := range b.order {
		w := b.writes[k]
		e := Entry{Key: []byte(k)}
		if !w.deleted {
			e.Value = w.value
		}
		out = append(out, e)
	}
	return out
}

// bufferIter merges a key's buffered version keys over the inner store's,
// the buffer's writes winning and its deletes hiding keys.
type bufferIter struct {
	b         *versionBuffer
	pending   []string
	inner     Iterator
	needInner bool
	innerOK   bool
	key       []byte
	value     []byte
}

func (i *bufferIter) Next() bool {
	for {
		if i.needInner {
			i.innerOK, i.needInner = i.inner.Next(), false
		}
		var k string
		switch {
		case len(i.pending) > 0 && (!i.innerOK || i.pending[0] <= string(i.inner.Key())):
			k = i.pending[0]
			i.pending = i.pending[1:]
			if i.innerOK && k == string(i.inner.Key()) {
				i.needInner = true
			}
		case i.innerOK:
			i.key, i.value, i.needInner = i.inner.Key(), i.inner.Value(), true
			return true
		default:
			return false
		}
		if w := i.b.writes[k]; !w.deleted {
			i.key, i.value = []byte(k), w.value
			return true
		}
	}
}

func (i *bufferIter) Key() []byte   { return i.key }
func (i *bufferIter) Value() []byte { return i.value }
func (i *bufferIter) Err() error    { return i.inner.Err() }
func (i *bufferIter) Close() error  { return i.inner.Close() }
