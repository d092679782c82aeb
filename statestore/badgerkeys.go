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

func slotKey(key []byte) []byte {
	h := sha256.Sum256(key)
	k := make([]byte, 0, maxKeyBytes)
	k = append(k, userPrefix)
	k = append(k, key[:slotPrefixLen]...)
	return append(k, h[:]...)
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
		return occupant{present: true, key: bk[1:]}, nil
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
	if len(e.Key) <= maxRawKey {
		return append(ops, op{key: userKey(e.Key), value: e.Value}), nil
	}
	if p.seen == nil {
		p.seen = make(map[string]occupant)
	}
	slot := slotKey(e.Key)
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
	if len(e.Key) == legacyRawKey {
		raw := userKey(e.Key)
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

// getIn reads key from txn, whatever its layout.
func getIn(txn *badger.Txn, key []byte) ([]byte, bool, error) {
	if len(key) <= maxRawKey {
		return getItem(txn, userKey(key), false, nil)
	}
	v, found, err := getItem(txn, slotKey(key), true, key)
	if found || err != nil || len(key) != legacyRawKey {
		return v, found, err
	}
	return getItem(txn, userKey(key), false, nil)
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

// seekKey is where a Range with lower bound from starts in badger's order;
// see the layout notes above for why the bound is cut.
func seekKey(from []byte) []byte {
	if len(from) > slotPrefixLen {
		from = from[:slotPrefixLen]
	}
	return userKey(from)
}

// inGroup reports whether badger key bk may be out of real order with its
// neighbours sharing its first slotPrefixLen key bytes.
func inGroup(bk []byte) bool { return len(bk)-1 > slotPrefixLen }

// pair is one decoded key-value pair of a group.
type pair struct{ key, value []byte }

func sortPairs(ps []pair) {
	slices.SortFunc(ps, func(a, b pair) int { return bytes.Compare(a.key, b.key) })
}
