package statestore

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// How user keys are laid out in badger, whose keys may not exceed 65,000
// bytes while a Kafka record key may approach a megabyte.
//
// A short key, of at most maxRawKey bytes, is stored as it always was:
// userPrefix followed by the key, with the value as is and badger's
// UserMeta byte 0. Existing state directories therefore read unchanged.
//
// A long key lives in a slot: the badger key is userPrefix, the key's first
// slotPrefixLen bytes and the SHA-256 of the whole key, 65,000 bytes in all
// (longer than any short key's, so the two can never meet), with UserMeta
// metaSlotV1. The slot's value is uvarint(len(key)), the key, then the
// value, so readers compare the full key (Get of a key whose slot holds
// another key finds nothing) and iterators yield the real key. A write that
// would put a key into a slot held by a different key (a SHA-256 collision,
// or a legacy key spelling a slot) fails rather than overwrite it.
//
// Order. Comparing badger keys orders two user keys exactly as comparing
// the keys themselves, except when both are longer than slotPrefixLen and
// share their first slotPrefixLen bytes: only then may a slot's hash put
// them out of order. Such keys form a group that is adjacent in badger's
// order (every badger key with that prefix and more bytes after it), so an
// iterator reads a whole group, sorts it by real key and yields it in
// order; a group needs memory for all its entries. Range seeks to the
// first slotPrefixLen bytes of its lower bound and skips what precedes the
// bound; it stops at the first real key at or after the upper bound, since
// the sequence it yields is in real key order.
//
// The old code accepted keys of up to legacyRawKey bytes, one more than
// maxRawKey; a key of exactly that length may still sit unslotted in an old
// store. Reads fall back to it, and writing or deleting that key removes it.
const (
	maxKeyBytes   = 65000 // badger's limit on one key
	maxRawKey     = maxKeyBytes - 2
	legacyRawKey  = maxKeyBytes - 1
	slotPrefixLen = maxKeyBytes - 1 - sha256.Size
	metaSlotV1    = byte(1) // UserMeta of a long-key slot, format 1
)

var errCorruptSlot = errors.New("statestore: corrupt long-key slot")

// keyspace is where one store's keys live in its badger DB: every badger
// key of the store starts with ns, which is empty for a store with a DB of
// its own and names the store in a shared DB (see badgershared.go). The
// layout after ns is the same in both; as badger's limit counts ns, the
// raw-key and slot lengths above shrink by its length.
type keyspace struct {
	ns []byte
	// The store's own records under ns.
	position, legacyPosition, torn, stageMarker []byte
}

func newKeyspace(ns []byte) keyspace {
	join := func(k []byte) []byte { return append(bytes.Clone(ns), k...) }
	return keyspace{
		ns:             ns,
		position:       join(positionKey),
		legacyPosition: join(legacyPositionKey),
		torn:           join(tornKey),
		stageMarker:    join(stageMarkerKey),
	}
}

// ownKeys is the keyspace of a store with a DB of its own.
var ownKeys = newKeyspace(nil)

// maxRaw is the longest key stored unslotted, slotPrefix the number of a
// long key's bytes its slot keeps and legacyRaw the key length an older
// binary left unslotted (only a store with a DB of its own has any).
func (k keyspace) maxRaw() int     { return maxRawKey - len(k.ns) }
func (k keyspace) slotPrefix() int { return slotPrefixLen - len(k.ns) }
func (k keyspace) legacyRaw() int  { return legacyRawKey - len(k.ns) }

// prefixed returns ns, then p, then rest, in a new slice.
func (k keyspace) prefixed(p byte, rest []byte) []byte {
	b := make([]byte, 0, len(k.ns)+1+len(rest))
	b = append(b, k.ns...)
	b = append(b, p)
	return append(b, rest...)
}

// user is the badger key of a short user key.
func (k keyspace) user(key []byte) []byte { return k.prefixed(userPrefix, key) }

// users is the prefix of every badger key holding a user key.
func (k keyspace) users() []byte { return k.prefixed(userPrefix, nil) }

// real is the user key a badger key spells, for an unslotted one.
func (k keyspace) real(bk []byte) []byte { return bk[len(k.ns)+1:] }

func (k keyspace) slot(key []byte) []byte {
	h := sha256.Sum256(key)
	b := make([]byte, 0, maxKeyBytes)
	b = append(b, k.ns...)
	b = append(b, userPrefix)
	b = append(b, key[:k.slotPrefix()]...)
	return append(b, h[:]...)
}

func encodeSlot(key, value []byte) []byte {
	b := make([]byte, 0, binary.MaxVarintLen64+len(key)+len(value))
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	return append(b, value...)
}

// decodeSlot splits a slot's value into the key and value it holds; both
// alias v.
func decodeSlot(v []byte) (key, value []byte, err error) {
	n, w := binary.Uvarint(v)
	if w <= 0 || uint64(len(v)-w) < n {
		return nil, nil, errCorruptSlot
	}
	return v[w : w+int(n)], v[w+int(n):], nil
}

// op is one badger mutation a Write or Put resolves to.
type op struct {
	key   []byte
	value []byte // nil: delete
	meta  byte
}

func (o op) entry() *badger.Entry {
	return badger.NewEntry(o.key, o.value).WithMeta(o.meta)
}

// entries makes the badger entries of a batch of ops in one allocation
// rather than one each (deletes leave theirs unused).
func entries(ops []op) []badger.Entry {
	es := make([]badger.Entry, len(ops))
	for i, o := range ops {
		es[i] = badger.Entry{Key: o.key, Value: o.value, UserMeta: o.meta}
	}
	return es
}

// occupant is what a badger key holds as far as a plan has seen: absent,
// a slot holding key, or an unslotted key (spelled by the badger key).
type occupant struct {
	present bool
	slotted bool
	key     []byte
}

// planner turns entries into badger ops. Short keys need nothing but
// their prefix; a long key needs its slot's current occupant, read from
// the snapshot or, if the plan already wrote the slot, from the plan.
type planner struct {
	txn  *badger.Txn // read snapshot; writers are serialised, so it is current
	keys keyspace
	seen map[string]occupant
}

func (p *planner) occupant(bk []byte) (occupant, error) {
	if o, ok := p.seen[string(bk)]; ok {
		return o, nil
	}
	item, err := p.txn.Get(bk)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return occupant{}, nil
	}
	if err != nil {
		return occupant{}, err
	}
	if item.UserMeta() != metaSlotV1 {
		return occupant{present: true, key: p.keys.real(bk)}, nil
	}
	var o occupant
	err = item.Value(func(v []byte) error {
		k, _, err := decodeSlot(v)
		o = occupant{present: true, slotted: true, key: bytes.Clone(k)}
		return err
	})
	return o, err
}

func (p *planner) add(ops []op, e Entry) ([]op, error) {
	if len(e.Key) <= p.keys.maxRaw() {
		return append(ops, op{key: p.keys.user(e.Key), value: e.Value}), nil
	}
	if p.seen == nil {
		p.seen = make(map[string]occupant)
	}
	slot := p.keys.slot(e.Key)
	o, err := p.occupant(slot)
	if err != nil {
		return nil, err
	}
	mine := o.present && o.slotted && bytes.Equal(o.key, e.Key)
	switch {
	case o.present && !mine:
		if e.Deleted() {
			break // the key is not there: deleting it is a no-op
		}
		return nil, fmt.Errorf("statestore: key of %d bytes maps to a slot already holding a different key of %d bytes", len(e.Key), len(o.key))
	case e.Deleted():
		if o.present {
			ops = append(ops, op{key: slot})
		}
		p.seen[string(slot)] = occupant{}
	default:
		ops = append(ops, op{key: slot, value: encodeSlot(e.Key, e.Value), meta: metaSlotV1})
		p.seen[string(slot)] = occupant{present: true, slotted: true, key: e.Key}
	}
	if len(e.Key) == p.keys.legacyRaw() {
		raw := p.keys.user(e.Key)
		lo, err := p.occupant(raw)
		if err != nil {
			return nil, err
		}
		if lo.present && !lo.slotted {
			ops = append(ops, op{key: raw})
			p.seen[string(raw)] = occupant{}
		}
	}
	return ops, nil
}

// getIn reads key of keyspace k from txn, whatever its layout.
func getIn(txn *badger.Txn, k keyspace, key []byte) ([]byte, bool, error) {
	if len(key) <= k.maxRaw() {
		return getItem(txn, k.user(key), false, nil)
	}
	v, found, err := getItem(txn, k.slot(key), true, key)
	if found || err != nil || len(key) != k.legacyRaw() {
		return v, found, err
	}
	return getItem(txn, k.user(key), false, nil)
}

// getItem reads one badger key; a slot must hold want, an unslotted key
// must not be a slot.
func getItem(txn *badger.Txn, bk []byte, slot bool, want []byte) ([]byte, bool, error) {
	item, err := txn.Get(bk)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if (item.UserMeta() == metaSlotV1) != slot {
		return nil, false, nil
	}
	// Start from a non-nil slice so an empty value reads back as empty,
	// not as nil (which would look like a tombstone to Entry users).
	if !slot {
		v, err := item.ValueCopy(make([]byte, 0, item.ValueSize()))
		return v, err == nil, err
	}
	var (
		out   []byte
		found bool
	)
	err = item.Value(func(v []byte) error {
		k, val, err := decodeSlot(v)
		if err != nil {
			return err
		}
		if bytes.Equal(k, want) {
			out, found = append(make([]byte, 0, len(val)), val...), true
		}
		return nil
	})
	return out, found, err
}

// seek is where a Range with lower bound from starts in badger's order;
// see the layout notes above for why the bound is cut.
func (k keyspace) seek(from []byte) []byte {
	if len(from) > k.slotPrefix() {
		from = from[:k.slotPrefix()]
	}
	return k.user(from)
}

// inGroup reports whether badger key bk may be out of real order with its
// neighbours sharing its first slotPrefix key bytes.
func (k keyspace) inGroup(bk []byte) bool { return len(bk)-len(k.ns)-1 > k.slotPrefix() }

// groupOf is the part of badger key bk, in a group, that the group's keys
// share.
func (k keyspace) groupOf(bk []byte) []byte { return bk[:len(k.ns)+1+k.slotPrefix()] }

// pair is one decoded key-value pair of a group.
type pair struct{ key, value []byte }

func sortPairs(ps []pair) {
	slices.SortFunc(ps, func(a, b pair) int { return bytes.Compare(a.key, b.key) })
}
