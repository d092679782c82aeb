package statestore

import (
	"bytes"
	"slices"
)

// knownVersions holds, from one replayed write to the next, the versions
// the store holds for the keys replay has read, so that a restoration
// reads each key's versions from the store once rather than at every put
// of it: a read opens a store iterator, which costs many times what the
// put writes. Every write of the store goes through VersionedChangelog,
// which brings what is known up to date after each replayed write, and
// forgets it all on any other write, on a failed one, on a reset, and
// when it holds more than maxKnownVersions versions.
type knownVersions struct {
	// byPrefix holds each known key's versions, by the key's prefix
	// (see prefix), sorted by version key.
	byPrefix map[string][]storedVersion
	n        int
}

type storedVersion struct {
	key, value []byte
}

// maxKnownVersions bounds the versions knownVersions holds.
const maxKnownVersions = 1 << 20

func newKnownVersions() *knownVersions {
	return &knownVersions{byPrefix: make(map[string][]storedVersion)}
}

// versions returns the versions of the key whose prefix is p, reading
// them from inner, whose end is to, when they are not known yet.
func (k *knownVersions) versions(inner ReadWriter, p, to []byte) ([]storedVersion, error) {
	if vs, ok := k.byPrefix[string(p)]; ok {
		return vs, nil
	}
	it, err := inner.Range(p, to)
	if err != nil {
		return nil, err
	}
	var vs []storedVersion
	for it.Next() {
		vs = append(vs, storedVersion{bytes.Clone(it.Key()), bytes.Clone(it.Value())})
	}
	if err := it.Err(); err != nil {
		it.Close()
		return nil, err
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	k.byPrefix[string(p)] = vs
	k.n += len(vs)
	return vs, nil
}

// apply brings the known versions up to date with the writes b made to
// the store; it reports false when they have grown past their bound.
func (k *knownVersions) apply(b *versionBuffer) bool {
	for _, key := range b.order {
		if len(key) <= 8 || key == string(observedKey) {
			continue
		}
		p := key[:len(key)-8]
		vs, ok := k.byPrefix[p]
		if !ok {
			continue
		}
		w := b.writes[key]
		i, found := slices.BinarySearchFunc(vs, key, func(v storedVersion, key string) int { return bytes.Compare(v.key, []byte(key)) })
		switch {
		case w.deleted && found:
			vs = slices.Delete(vs, i, i+1)
			k.n--
		case w.deleted:
		case found:
			vs[i].value = bytes.Clone(w.value)
		default:
			vs = slices.Insert(vs, i, storedVersion{[]byte(key), bytes.Clone(w.value)})
			k.n++
		}
		k.byPrefix[p] = vs
	}
	return k.n <= maxKnownVersions
}

// knownIter walks known versions as a store iterator.
type knownIter struct {
	vs  []storedVersion
	cur storedVersion
}

func (i *knownIter) Next() bool {
	if len(i.vs) == 0 {
		return false
	}
	i.cur, i.vs = i.vs[0], i.vs[1:]
	return true
}

func (i *knownIter) Key() []byte   { return i.cur.key }
func (i *knownIter) Value() []byte { return i.cur.value }
func (i *knownIter) Err() error    { return nil }
func (i *knownIter) Close() error  { return nil }
