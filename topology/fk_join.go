package topology

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/fnv"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// JoinByForeignKey joins each entry of the table l with the entry of the
// table r whose key fk extracts from the l entry's value: the result,
// keyed like l, holds joiner(v, rv) for each key of l whose foreign key r
// holds. It is kept in the store named store (persistent and logged
// unless InMemory or WithoutLogging is given), values encoded with
// valueSerde, and is updated when an l entry changes (its foreign key
// included: it leaves its old r entry for its new one), is deleted, or
// when the r entry it points to changes or is deleted.
//
// l and r need not be co-partitioned. Each l entry subscribes to its
// foreign key through the internal topic
// "<app>-<name>-subscription-registration", partitioned like r, where a
// store "<name>-subscriptions" records the subscribers of each r key;
// r's values come back through "<app>-<name>-subscription-response",
// partitioned like l. name is the result node's, given with Named (default
// "fk-join-<n>"); give one to keep the topics and store stable. A response
// computed from an l value that has since changed is recognized by a hash
// of the value and dropped. l and r need value serdes (a table derived with
// MapTableValues needs TableValueSerde), since their values are hashed and
// sent between the two sides.
//
// A foreign key that r's key serde encodes to nil (a nil []byte with
// serde.Bytes) is Kafka's null: the l entry joins nothing, and loses the
// result it had, as in Kafka Streams.
func JoinByForeignKey[K, V, KO, VO, VR any](l KTable[K, V], r KTable[KO, VO], fk func(K, V) KO, joiner func(v V, rv VO) VR, store string, valueSerde serde.Serde[VR], opts ...Option) KTable[K, VR] {
	var fn func(V, VO, bool) (VR, bool)
	if joiner != nil {
		fn = func(v V, rv VO, found bool) (VR, bool) {
			if !found {
				return zero[VR](), false
			}
			return joiner(v, rv), true
		}
	}
	return fkJoin(l, r, "fk-join", fk, fn, store, valueSerde, collect(opts))
}

// LeftJoinByForeignKey is JoinByForeignKey keeping every key of l: the
// result holds joiner(v, rv, found) for each, with found false and rv the
// zero value when r does not hold the foreign key. An l entry whose foreign
// key is null (see JoinByForeignKey) is joined with found false at once,
// without a round trip through r's side, as Kafka Streams 3.9 joins it.
func LeftJoinByForeignKey[K, V, KO, VO, VR any](l KTable[K, V], r KTable[KO, VO], fk func(K, V) KO, joiner func(v V, rv VO, found bool) VR, store string, valueSerde serde.Serde[VR], opts ...Option) KTable[K, VR] {
	var fn func(V, VO, bool) (VR, bool)
	if joiner != nil {
		fn = func(v V, rv VO, found bool) (VR, bool) { return joiner(v, rv, found), true }
	}
	return fkJoin(l, r, "fk-leftjoin", fk, fn, store, valueSerde, collect(opts))
}

// Subscription instructions, the first byte of a registration record.
const (
	fkSubscribe   = 1
	fkUnsubscribe = 2
)

func fkJoin[K, V, KO, VO, VR any](l KTable[K, V], r KTable[KO, VO], op string, fk func(K, V) KO, fn func(V, VO, bool) (VR, bool), store string, vs serde.Serde[VR], o options) KTable[K, VR] {
	b := l.builder()
	r.builder()
	// The result node comes first so that its name names the rest.
	res := b.addNode(kindProcessor, op, o)
	out := versionedResult(KTable[K, VR]{b: b, n: res, store: store, keySerde: l.keySerde, valueSerde: vs}, o)
	if r.b != b {
		b.errorf("%s joins a table from another Builder", res.label())
		return out
	}
	b.checkFunc(res, fk == nil, "foreign key extractor")
	b.checkFunc(res, fn == nil, "joiner")
	if vs == nil {
		b.errorf("%s: store %q: value serde is nil", res.label(), store)
	}
	if l.valueSerde == nil || r.valueSerde == nil {
		b.errorf("%s: both tables need a value serde (give a derived table one with TableValueSerde, a table join without a store its valueSerde)", res.label())
	}
	res.stores = []string{store}
	res.olds = ownOldValues
	b.declareResultStore(res, store, o)
	lks, lvs, rks, rvs := l.keySerde, l.valueSerde, r.keySerde, r.valueSerde
	res.newProc = func() (procImpl, error) {
		return &tableJoinResult[K, VR]{store: store, keySerde: lks, valueSerde: vs}, nil
	}
	derived := func(suffix string) options { return options{name: res.name + suffix, derived: true} }
	registration := TopicRef{Name: res.name + "-subscription-registration", Internal: true}
	response := TopicRef{Name: res.name + "-subscription-response", Internal: true}
	subStore := res.name + "-subscriptions"

	// Left side: each update of l (un)subscribes; a deleted entry leaves
	// the result at once.
	sub := b.addProcessor("", derived("-subscribe"), func() procImpl {
		return &fkSubscribeProc[K, V, KO]{fk: fk, keySerde: lks, valueSerde: lvs, fkSerde: rks, result: res.name,
			joinNone: func(v V) (any, bool) { return fn(v, zero[VO](), false) }}
	}, l.n)
	b.requireOldValues(l.n, sub.label())
	addSink(b, sub, registration, serde.Bytes, serde.Bytes, derived("-registration-sink"))
	sub.children = append(sub.children, res)
	res.parents = append(res.parents, sub)

	// Right side: subscriptions are recorded next to r and answered with
	// r's value; each update of r answers its subscribers.
	regSrc := addSource(b, registration, serde.Bytes, serde.Bytes, derived("-registration-source"))
	rStores, rLookup := r.view()
	subs := b.addProcessor("", derived("-subscriptions"), func() procImpl {
		return &fkSubscriptionsProc[KO, VO]{store: subStore, lookup: rLookup, keySerde: rks, valueSerde: rvs}
	}, regSrc)
	subs.stores = append([]string{subStore}, rStores...)
	subs.joins = r.n
	b.declareStore(StoreInfo{Name: subStore, Persistent: !o.inMemory, Logged: !o.unlogged}, subs.label())
	upd := b.addProcessor("", derived("-right"), func() procImpl {
		return &fkRightProc[KO, VO]{store: subStore, keySerde: rks, valueSerde: rvs}
	}, r.n)
	upd.stores = []string{subStore}
	respSink := addSink(b, subs, response, serde.Bytes, serde.Bytes, derived("-response-sink"))
	upd.children = append(upd.children, respSink)
	respSink.parents = append(respSink.parents, upd)

	// Back on the left: a response still matching l's current value is
	// joined into the result.
	respSrc := addSource(b, response, lks, serde.Bytes, derived("-response-source"))
	lStores, lLookup := l.view()
	resolve := b.addProcessor("", derived("-resolve"), func() procImpl {
		return &fkResolveProc[K, V, VO, VR]{lookup: lLookup, valueSerde: lvs, rValueSerde: rvs, join: fn}
	}, respSrc)
	resolve.stores = lStores
	resolve.joins = l.n
	resolve.children = append(resolve.children, res)
	res.parents = append(res.parents, resolve)
	return out
}

// valueHash identifies an l value in a subscription, so that a response
// to an older value can be told apart.
func valueHash(encoded []byte) uint64 {
	h := fnv.New64a()
	h.Write(encoded)
	return h.Sum64()
}

// subscriptionKey is the subscription store's key: the foreign key's
// length and bytes, then the l key's bytes, so that one foreign key's
// subscribers are a key range.
func subscriptionKey(fk, pk []byte) []byte {
	out := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(fk)+len(pk)), uint64(len(fk)))
	out = append(out, fk...)
	return append(out, pk...)
}

// prefixEnd returns the smallest key greater than every key starting with
// prefix, or nil when there is none.
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// fkSubscribeProc turns each update of l into registration records: an
// unsubscription from the old foreign key when it changed or the entry
// was deleted, a subscription to the new one otherwise; a deletion also
// goes straight to the result node as a tombstone, and so does the result
// of an entry whose foreign key is null (r's key serde encodes it to nil),
// which subscribes to nothing.
type fkSubscribeProc[K, V, KO any] struct {
	fk         func(K, V) KO
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
	fkSerde    serde.Serde[KO]
	result     string
	// joinNone joins an l value with no r value, as the join does when r
	// lacks the foreign key; false if the join has no result then.
	joinNone func(V) (any, bool)
}

func (p *fkSubscribeProc[K, V, KO]) init(*nodeInstance) error { return nil }

func (p *fkSubscribeProc[K, V, KO]) process(c *nodeInstance, r record) error {
	// As in a table-table join, only latest values take part (KIP-914).
	if r.keyNull || r.notLatest {
		return nil
	}
	k := as[K](r.key)
	pk, err := p.keySerde.Encode(k)
	if err != nil {
		return err
	}
	var oldFK []byte
	if r.old != nil && !r.old.null {
		if oldFK, err = p.fkSerde.Encode(p.fk(k, as[V](r.old.value))); err != nil {
			return err
		}
	}
	if r.valueNull {
		if oldFK != nil {
			if err := p.send(c, r, oldFK, fkUnsubscribe, 0, pk); err != nil {
				return err
			}
		}
		return c.forwardTo(p.result, record{key: r.key, value: zero[any](), valueNull: true, ts: r.ts, headers: r.headers})
	}
	v := as[V](r.value)
	newFK, err := p.fkSerde.Encode(p.fk(k, v))
	if err != nil {
		return err
	}
	if oldFK != nil && (newFK == nil || !bytes.Equal(oldFK, newFK)) {
		if err := p.send(c, r, oldFK, fkUnsubscribe, 0, pk); err != nil {
			return err
		}
	}
	if newFK == nil {
		return p.noForeignKey(c, r, v, oldFK != nil)
	}
	vb, err := p.valueSerde.Encode(v)
	if err != nil {
		return err
	}
	return p.send(c, r, newFK, fkSubscribe, valueHash(vb), pk)
}

// noForeignKey settles the result for an entry of l whose foreign key is
// null: as in Kafka Streams, a left join joins the entry with no r value
// at once, and an inner join drops it, deleting the result it had if it
// was subscribed before.
func (p *fkSubscribeProc[K, V, KO]) noForeignKey(c *nodeInstance, r record, v V, wasSubscribed bool) error {
	if out, ok := p.joinNone(v); ok {
		return c.forwardTo(p.result, record{key: r.key, value: out, ts: r.ts, headers: r.headers})
	}
	if !wasSubscribed {
		return nil
	}
	return c.forwardTo(p.result, record{key: r.key, value: zero[any](), valueNull: true, ts: r.ts, headers: r.headers})
}

// send writes a registration: instruction, value hash, l key.
func (p *fkSubscribeProc[K, V, KO]) send(c *nodeInstance, r record, fk []byte, instr byte, hash uint64, pk []byte) error {
	v := make([]byte, 0, 9+len(pk))
	v = append(v, instr)
	v = binary.BigEndian.AppendUint64(v, hash)
	v = append(v, pk...)
	for _, ch := range c.children {
		if ch.node.kind == kindSink {
			return ch.process(record{key: fk, value: v, ts: r.ts, headers: r.headers})
		}
	}
	return errors.New("topology: foreign-key join: no registration sink")
}

func (p *fkSubscribeProc[K, V, KO]) close() error { return nil }

var errBadRegistration = errors.New("topology: malformed foreign-key join record")

// fkSubscriptionsProc records subscriptions next to r and answers each
// subscription with r's current value for the foreign key.
type fkSubscriptionsProc[KO, VO any] struct {
	store      string
	lookup     tableLookup[KO, VO]
	keySerde   serde.Serde[KO]
	valueSerde serde.Serde[VO]
	subs       statestore.ReadWriter
	get        func(KO) (VO, int64, bool, error)
}

func (p *fkSubscriptionsProc[KO, VO]) init(c *nodeInstance) error {
	rw, err := c.store(p.store)
	if err != nil {
		return err
	}
	p.subs = rw
	p.get, err = p.lookup(c.store)
	return err
}

func (p *fkSubscriptionsProc[KO, VO]) process(c *nodeInstance, r record) error {
	fk, v := as[[]byte](r.key), as[[]byte](r.value)
	if r.keyNull || r.valueNull || len(v) < 9 {
		return errBadRegistration
	}
	instr, hash, pk := v[0], v[1:9], v[9:]
	key := subscriptionKey(fk, pk)
	if instr == fkUnsubscribe {
		return p.subs.Delete(key)
	}
	if instr != fkSubscribe {
		return errBadRegistration
	}
	if err := p.subs.Put(key, bytes.Clone(hash)); err != nil {
		return err
	}
	k, err := p.keySerde.Decode(fk)
	if err != nil {
		return err
	}
	rv, rts, found, err := p.get(k)
	if err != nil {
		return err
	}
	var rvb []byte
	ts := r.ts
	if found {
		if rvb, err = p.valueSerde.Encode(rv); err != nil {
			return err
		}
		// The answer, and so the result, is stamped with the later of the
		// subscriber's update and r's value, as in Kafka Streams.
		ts = stamp(r.ts, max(r.ts.UnixMilli(), rts))
	}
	return c.forward(record{key: bytes.Clone(pk), value: fkResponse(hash, rvb, found), ts: ts, headers: r.headers})
}

func (p *fkSubscriptionsProc[KO, VO]) close() error { return nil }

// fkResponse is a response record's value: the subscriber's value hash, a
// found byte, and r's encoded value.
func fkResponse(hash, rv []byte, found bool) []byte {
	out := make([]byte, 0, 9+len(rv))
	out = append(out, hash...)
	if found {
		out = append(out, 1)
		return append(out, rv...)
	}
	return append(out, 0)
}

// fkRightProc answers every subscriber of an r key when r's value for it
// changes or is deleted.
type fkRightProc[KO, VO any] struct {
	store      string
	keySerde   serde.Serde[KO]
	valueSerde serde.Serde[VO]
	subs       statestore.ReadWriter
}

func (p *fkRightProc[KO, VO]) init(c *nodeInstance) error {
	var err error
	p.subs, err = c.store(p.store)
	return err
}

func (p *fkRightProc[KO, VO]) process(c *nodeInstance, r record) error {
	if r.keyNull || r.notLatest {
		return nil
	}
	fk, err := p.keySerde.Encode(as[KO](r.key))
	if err != nil {
		return err
	}
	var rvb []byte
	if !r.valueNull {
		if rvb, err = p.valueSerde.Encode(as[VO](r.value)); err != nil {
			return err
		}
	}
	prefix := subscriptionKey(fk, nil)
	it, err := p.subs.Range(prefix, prefixEnd(prefix))
	if err != nil {
		return err
	}
	type sub struct{ pk, hash []byte }
	var subs []sub
	for it.Next() {
		subs = append(subs, sub{pk: bytes.Clone(it.Key()[len(prefix):]), hash: bytes.Clone(it.Value())})
	}
	err = it.Err()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// Sent after the iterator is closed: forwarding must not run while a
	// store iteration is open.
	for _, s := range subs {
		if err := c.forward(record{key: s.pk, value: fkResponse(s.hash, rvb, !r.valueNull), ts: r.ts, headers: r.headers}); err != nil {
			return err
		}
	}
	return nil
}

func (p *fkRightProc[KO, VO]) close() error { return nil }

// fkResolveProc joins a response with l's current value for its key,
// dropping it when that value no longer has the hash it was sent for.
type fkResolveProc[K, V, VO, VR any] struct {
	lookup      tableLookup[K, V]
	valueSerde  serde.Serde[V]
	rValueSerde serde.Serde[VO]
	join        func(V, VO, bool) (VR, bool)
	get         func(K) (V, int64, bool, error)
}

func (p *fkResolveProc[K, V, VO, VR]) init(c *nodeInstance) error {
	var err error
	p.get, err = p.lookup(c.store)
	return err
}

func (p *fkResolveProc[K, V, VO, VR]) process(c *nodeInstance, r record) error {
	resp := as[[]byte](r.value)
	if r.keyNull || r.valueNull || len(resp) < 9 {
		return errBadRegistration
	}
	v, _, found, err := p.get(as[K](r.key))
	if err != nil || !found {
		// A deleted entry left the result when it was deleted.
		return err
	}
	vb, err := p.valueSerde.Encode(v)
	if err != nil {
		return err
	}
	if binary.BigEndian.Uint64(resp[:8]) != valueHash(vb) {
		return nil // an answer to an older value; a newer one follows
	}
	var rv VO
	rfound := resp[8] == 1
	if rfound {
		if rv, err = p.rValueSerde.Decode(resp[9:]); err != nil {
			return err
		}
	}
	out, ok := p.join(v, rv, rfound)
	return c.forward(record{key: r.key, value: out, valueNull: !ok, ts: r.ts, headers: r.headers})
}

func (p *fkResolveProc[K, V, VO, VR]) close() error { return nil }
