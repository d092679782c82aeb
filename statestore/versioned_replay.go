package statestore

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"math"
	"slices"
)

// replayState is what VersionedChangelog knows of its store from one
// replayed write to the next: the observed time and, for each key a
// record named, the versions the store holds. A restoration then reads a
// key's versions from the store once, not at each of its puts (a read
// opens a store iterator, which costs many times what the put writes),
// and never for a key the store did not hold when the state began empty.
// Each write puts its records into these versions in order, with the
// rules of VersionedStore.Put, and writes the versions it changed once.
// VersionedChangelog forgets the state on any other write of the store,
// on a failed write, on a reset, and when it holds more than
// maxKnownVersions versions.
type replayState struct {
	retention int64
	obs       int64
	// complete says every key the store holds is in keys: the store was
	// empty when the state began, so a key not there has no versions.
	complete bool
	// keys holds each key's versions by the record key.
	keys map[string]*keyVersions
	n    int
	// touched lists the keys the current write changed, in the order it
	// first changed them.
	touched []*keyVersions
}

// keyVersions are one key's versions, oldest first.
type keyVersions struct {
	// prefix is the key as its versions' keys begin (see prefix).
	prefix string
	vs     []knownVersion
	// removed holds the times of versions the current write removed that
	// the store holds.
	removed []int64
	// dirty counts the versions the current write put; in a restoration
	// they are the newest, so flush finds them from the end.
	dirty   int
	touched bool
}

// knownVersion is one version: its time and, if the current write put
// it, the index of the record it came from. A version's value is only
// needed until the write that put it has written it, so the versions kept
// from one write to the next hold no pointers, and the collector skips
// them; kept small, they also take few cache lines to walk.
type knownVersion struct {
	ts    int64
	entry int32
	// written says the store holds this version at ts (not necessarily
	// with this value: see dirty).
	written bool
	// dirty says the current write put this version.
	dirty bool
}

// maxKnownVersions bounds the versions replayState holds.
const maxKnownVersions = 1 << 20

// newReplayState reads the observed time of s and whether it is empty.
func newReplayState(s ReadWriter, retention int64) (*replayState, error) {
	r := &replayState{retention: retention, obs: math.MinInt64, keys: make(map[string]*keyVersions)}
	b, found, err := s.Get(observedKey)
	if err != nil {
		return nil, err
	}
	if found {
		if len(b) != 8 {
			return nil, errCorruptVersion
		}
		r.obs = int64(binary.BigEndian.Uint64(b))
		return r, nil
	}
	it, err := s.All()
	if err != nil {
		return nil, err
	}
	empty := !it.Next()
	if err := it.Err(); err != nil {
		it.Close()
		return nil, err
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	r.complete = empty
	return r, nil
}

func (r *replayState) minLive() int64 {
	if r.obs < math.MinInt64+r.retention {
		return math.MinInt64
	}
	return r.obs - r.retention
}

// apply puts every record of entries, in order, and returns the store
// entries that write the outcome: the versions removed and put, and the
// observed time if it moved.
func (r *replayState) apply(s ReadWriter, entries []Entry) ([]Entry, error) {
	obs := r.obs
	for i, e := range entries {
		if err := r.replay(s, e, int32(i)); err != nil {
			return nil, &EntryError{Index: i, Err: err}
		}
	}
	return r.flush(entries, obs != r.obs), nil
}

// replay puts one changelog record: a TimedRecord at its time, a
// LoggedRecord at the time its value carries (a bare value at the
// record's), its delete at the observed time. i is e's index in the
// write.
func (r *replayState) replay(s ReadWriter, e Entry, i int32) error {
	ts := e.Time
	switch {
	case e.Value != nil:
		if _, vts := SplitTimestamped(e.Value); vts != NoTimestamp {
			ts = vts
		}
	case e.Origin != TimedRecord:
		// A plain table's delete carries no time of the table's, only
		// when it was produced. It came after every version of the key,
		// so it is dated at the observed time, which keeps the history
		// before it and moves no cut-off.
		if r.obs == math.MinInt64 {
			return nil
		}
		ts = r.obs
	}
	if ts < r.minLive() {
		return nil
	}
	k, err := r.versionsOf(s, e.Key)
	if err != nil {
		return err
	}
	r.obs = max(r.obs, ts)
	r.put(k, knownVersion{ts: ts, entry: i, dirty: true})
	return nil
}

// versionsOf returns key's versions, read from s if they are not known.
func (r *replayState) versionsOf(s ReadWriter, key []byte) (*keyVersions, error) {
	if k, ok := r.keys[string(key)]; ok {
		return k, nil
	}
	k := &keyVersions{prefix: string(prefix(key))}
	if !r.complete {
		p := []byte(k.prefix)
		it, err := s.Range(p, afterKey(bytes.Clone(p)))
		if err != nil {
			return nil, err
		}
		for it.Next() {
			t, err := versionTime(it.Key())
			if err != nil {
				it.Close()
				return nil, err
			}
			k.vs = append(k.vs, knownVersion{ts: t, written: true})
		}
		if err := it.Err(); err != nil {
			it.Close()
			return nil, err
		}
		if err := it.Close(); err != nil {
			return nil, err
		}
		// The store walks versions newest first.
		slices.Reverse(k.vs)
		r.n += len(k.vs)
	}
	r.keys[string(key)] = k
	return k, nil
}

// put stores v, a version the current write put, as k's, as
// VersionedStore.Put does: a version at v.ts is replaced, and the
// versions whose validity ended at or before the cut-off are removed.
// Their ends rise with their times, so those are the oldest ones.
func (r *replayState) put(k *keyVersions, v knownVersion) {
	ts, minLive := v.ts, r.minLive()
	n := 0
	for n < len(k.vs) {
		t := k.vs[n].ts
		if t == ts {
			break
		}
		end := OpenEnded
		if n+1 < len(k.vs) {
			end = k.vs[n+1].ts
		}
		if t < ts {
			end = min(end, ts)
		}
		if end > minLive {
			break
		}
		if k.vs[n].written {
			k.removed = append(k.removed, t)
		}
		if k.vs[n].dirty {
			k.dirty--
		}
		n++
	}
	if n > 0 {
		k.vs = slices.Delete(k.vs, 0, n)
		r.n -= n
	}
	if len(k.vs) == 0 || k.vs[len(k.vs)-1].ts < ts {
		// In order, as nearly every record of a restoration is.
		k.vs = append(k.vs, v)
		k.dirty++
		r.n++
		r.touch(k)
		return
	}
	switch i, found := slices.BinarySearchFunc(k.vs, ts, cmpVersion); {
	case found:
		v.written = k.vs[i].written
		if !k.vs[i].dirty {
			k.dirty++
		}
		k.vs[i] = v
	default:
		k.vs = slices.Insert(k.vs, i, v)
		k.dirty++
		r.n++
	}
	r.touch(k)
}

// touch lists k among the keys the current write changed.
func (r *replayState) touch(k *keyVersions) {
	if !k.touched {
		k.touched = true
		r.touched = append(r.touched, k)
	}
}

func cmpVersion(v knownVersion, ts int64) int { return cmp.Compare(v.ts, ts) }

// flush returns the store entries of the changes entries made and marks
// them written: for each key changed, its removed versions no longer
// there, then the versions put; then the observed time if moved.
func (r *replayState) flush(entries []Entry, moved bool) []Entry {
	var n, size, valSize int
	for _, k := range r.touched {
		m := len(k.removed) + k.dirty
		n += m
		size += m * (len(k.prefix) + 8)
	}
	for _, e := range entries {
		valSize += 1 + len(e.Value)
	}
	out := make([]Entry, 0, n+1)
	// The version keys share one array, which holds them all, and their
	// stored values (flag byte and value) another. Both are new at each
	// write, since the store may keep the last one's.
	keys := make([]byte, 0, size)
	vals := make([]byte, 0, valSize)
	for _, k := range r.touched {
		for _, t := range k.removed {
			if _, there := slices.BinarySearchFunc(k.vs, t, cmpVersion); there {
				continue
			}
			keys = appendVersionKey(keys, k.prefix, t)
			out = append(out, Entry{Key: keys[len(keys)-len(k.prefix)-8 : len(keys) : len(keys)]})
		}
		for i := len(k.vs) - 1; i >= 0 && k.dirty > 0; i-- {
			v := &k.vs[i]
			if !v.dirty {
				continue
			}
			keys = appendVersionKey(keys, k.prefix, v.ts)
			off := len(vals)
			vals = appendStored(vals, entries[v.entry].Value)
			out = append(out, Entry{Key: keys[len(keys)-len(k.prefix)-8 : len(keys) : len(keys)], Value: vals[off:len(vals):len(vals)]})
			v.dirty, v.written = false, true
			k.dirty--
		}
		k.removed, k.touched = k.removed[:0], false
	}
	r.touched = r.touched[:0]
	if moved {
		out = append(out, Entry{Key: bytes.Clone(observedKey), Value: binary.BigEndian.AppendUint64(nil, uint64(r.obs))})
	}
	return out
}

// appendStored appends what a version stores for a changelog record's
// value: the flag byte, then the value without its timestamp.
func appendStored(b, value []byte) []byte {
	if value == nil {
		return append(b, versionTombstone)
	}
	v, _ := SplitTimestamped(value)
	return append(append(b, versionValue), v...)
}

func appendVersionKey(b []byte, prefix string, ts int64) []byte {
	b = append(b, prefix...)
	return binary.BigEndian.AppendUint64(b, uint64(ts)^math.MaxInt64)
}
