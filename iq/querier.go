package iq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// Provenance says where an answer came from, read when the answer was.
type Provenance struct {
	// Host is the answering instance's query endpoint ("" if it has none).
	Host      string
	Partition int32
	Role      Role
	// Position is the replica's changelog position right after the read:
	// the data returned reflects no record at or beyond it. Pass it back
	// as a minimum position to never read older data again.
	Position int64
	// Lag is the replica's lag right after the read, -1 when unknown (not
	// confirmed by the broker recently, or rebuilding).
	Lag int64
	// Rebuilding is set when the replica was rebuilding its store from
	// empty (Position is then -1): only AnyStaleness accepts it.
	Rebuilding bool
	// LagConfirmedAgo is how long before the read the broker last
	// confirmed the changelog end, Unknown if never. 0 for an active.
	LagConfirmedAgo time.Duration
	// Age is the replica's age (ReplicaInfo.Age), Unknown if not known.
	// 0 for an active.
	Age time.Duration
	// InputCommittedAgo is how long before the read the partition's
	// active last committed its input, Unknown if never observed. 0 for
	// an active.
	InputCommittedAgo time.Duration
	// ContactAgo is how long before the read the group last confirmed
	// the replica's member (ReplicaInfo.ContactAgo); Unknown for a
	// global store, and if never.
	ContactAgo time.Duration
}

// provenanceOf describes what a replica said about itself, as an answer
// carries it.
func provenanceOf(host string, p int32, info ReplicaInfo) Provenance {
	age, ok := info.Age()
	if !ok {
		age = Unknown
	}
	return Provenance{Host: host, Partition: p, Role: info.Role, Position: info.Position, Lag: info.Lag, Rebuilding: info.Rebuilding,
		LagConfirmedAgo: info.LagConfirmedAgo, Age: age, InputCommittedAgo: info.InputCommittedAgo, ContactAgo: info.ContactAgo}
}

// caughtUp reports whether a replica is as fresh as its partition can be:
// the running active, or a replica with a confirmed lag of 0. Routers
// answer from such a replica without asking any other.
func (p Provenance) caughtUp() bool {
	return p.Role == RoleActive || (!p.Rebuilding && p.Lag == 0)
}

// fresher reports whether p's data is fresher than o's, for routers
// choosing between answers: a running active first, then a replica with a
// consistent position over a rebuilding one, then the higher changelog
// position (every replica of a partition reads the same changelog), then
// a confirmed lag over an unknown one, then the smaller lag.
func (p Provenance) fresher(o Provenance) bool {
	if (p.Role == RoleActive) != (o.Role == RoleActive) {
		return p.Role == RoleActive
	}
	if p.Rebuilding != o.Rebuilding {
		return !p.Rebuilding
	}
	if p.Position != o.Position {
		return p.Position > o.Position
	}
	if (p.Lag >= 0) != (o.Lag >= 0) {
		return p.Lag >= 0
	}
	return p.Lag < o.Lag
}

// Result is the answer to a key lookup.
type Result[V any] struct {
	Value V
	// Timestamp is the value's timestamp (milliseconds since the epoch)
	// as the store keeps it beside the value, Kafka Streams'
	// ValueAndTimestamp: the time of the update that wrote it. 0 for a
	// store that keeps none (BareStoreValues, global stores) and for a
	// value written without one. From a versioned store, the version's
	// ValidFrom.
	Timestamp int64
	// Found is false when the key is absent on the answering replica.
	Found bool
	// ValidFrom and ValidTo bound, in milliseconds, the validity of the
	// version of a versioned store's key that Value is: [ValidFrom,
	// ValidTo), ValidTo statestore.OpenEnded for the latest version. Both
	// are 0 for other stores, and when nothing was found.
	ValidFrom, ValidTo int64
	Provenance         Provenance
}

// KeyValue is one entry of a range.
type KeyValue[K, V any] struct {
	Key   K
	Value V
	// Timestamp is the value's timestamp, as Result.Timestamp.
	Timestamp int64
}

// PartitionEntries is what one partition's replica returned for a range.
type PartitionEntries[K, V any] struct {
	Provenance Provenance
	Entries    []KeyValue[K, V]
	// Truncated is set when the limit cut the range short.
	Truncated bool
}

// PartitionError is a partition that could not answer, and why.
type PartitionError struct {
	Partition int32
	Err       error
}

// RangeResult is the answer to a range or full scan: one entry per
// partition that answered, in partition order, and the local replicas that
// refused (too stale, behind, moved away).
type RangeResult[K, V any] struct {
	Partitions []PartitionEntries[K, V]
	Refused    []PartitionError
}

// PartitionCount is one partition's approximate key count.
type PartitionCount struct {
	Provenance Provenance
	Count      int64
}

// CountResult is the answer to ApproximateCount.
type CountResult struct {
	// Total sums Partitions.
	Total      int64
	Partitions []PartitionCount
	Refused    []PartitionError
}

// KeyQueryMetadata says which hosts hold the partition of a key, from the
// latest assignment.
type KeyQueryMetadata struct {
	Partition int32
	// Active is the active host, or "" when no host holds the partition as
	// an active (between an instance's loss and the next assignment).
	Active   string
	Standbys []string
	Warmups  []string
	// Global is set for a global store: every instance holds the key
	// (partition 0, role global) and any of them answers it, so no host
	// is named.
	Global bool
}

// StoreMetadata is what every host holds of one store.
type StoreMetadata struct {
	Store      string
	Partitions int32
	// Hosts holds only the hosts with some replica of the store, with
	// only this store's partitions, sorted by Host; none for a global
	// store.
	Hosts []HostMetadata
	// Global is set for a global store, which every instance holds whole.
	Global bool
}

// QueryOption adjusts one query.
type QueryOption func(*queryOptions)

type queryOptions struct {
	bound        Staleness
	partition    int32
	hasPartition bool
	minPosition  int64
	hasMin       bool
	limit        int
	prefer       Preference
	hasPrefer    bool
	asOf         int64
	hasAsOf      bool
}

// Preference is how a router chooses among the replicas that may answer
// within a bound.
type Preference uint8

// Routing preferences.
const (
	// PreferFreshest, the default, asks the active first and otherwise
	// takes the answer of the freshest replica within the bound.
	PreferFreshest Preference = iota
	// PreferSpread spreads lookups at random over every replica within
	// the bound, active included, to share the load ("chosen randomly",
	// as KIP-535's draft put it). Answers may be staler than with
	// PreferFreshest, never staler than the bound.
	PreferSpread
)

// String returns freshest or spread, as the HTTP prefer= parameter spells
// it.
func (p Preference) String() string {
	if p == PreferSpread {
		return "spread"
	}
	return "freshest"
}

// ParsePreference parses "freshest" (or "") and "spread". Errors match
// ErrInvalidQuery.
func ParsePreference(s string) (Preference, error) {
	switch s {
	case "", "freshest":
		return PreferFreshest, nil
	case "spread":
		return PreferSpread, nil
	}
	return 0, invalidf("preference %q: want freshest or spread", s)
}

// WithPreference sets how a routing Client chooses among replicas within
// the bound for this query, overriding ClientOptions.Prefer. Local
// queries (Querier) ignore it.
func WithPreference(p Preference) QueryOption {
	return func(o *queryOptions) { o.prefer, o.hasPrefer = p, true }
}

// WithStaleness sets the staleness bound (default ActiveOnly).
func WithStaleness(s Staleness) QueryOption { return func(o *queryOptions) { o.bound = s } }

// WithPartition restricts the query to one partition. For a key lookup it
// replaces the partition computed from the key (for stores partitioned by
// something other than the default partitioner).
func WithPartition(p int32) QueryOption {
	return func(o *queryOptions) { o.partition, o.hasPartition = p, true }
}

// WithMinPosition refuses replicas whose changelog position is below pos
// with a *BehindError (monotonic reads). It needs a single partition: a key
// lookup, or a range with WithPartition.
func WithMinPosition(pos int64) QueryOption {
	return func(o *queryOptions) { o.minPosition, o.hasMin = pos, true }
}

// AsOf asks a versioned store for the value a key had at t (rounded down
// to the millisecond) rather than its latest (KIP-960): the version valid
// then, not found if there was none or t is older than the history the
// store keeps. Other stores refuse it with ErrInvalidQuery.
func AsOf(t time.Time) QueryOption { return AsOfMillis(t.UnixMilli()) }

// AsOfMillis is AsOf for a time in milliseconds since the epoch.
func AsOfMillis(ms int64) QueryOption {
	return func(o *queryOptions) { o.asOf, o.hasAsOf = ms, true }
}

// at is the time a key lookup asks for: the AsOf time, or math.MaxInt64
// for the latest value.
func (o *queryOptions) at() int64 {
	if o.hasAsOf {
		return o.asOf
	}
	return math.MaxInt64
}

// WithLimit caps the entries a range or scan returns per partition
// (0, the default, is no cap).
func WithLimit(n int) QueryOption { return func(o *queryOptions) { o.limit = n } }

func buildOptions(opts []QueryOption) queryOptions {
	var o queryOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Querier answers queries against the local replicas of a Backend, and
// reads the routing table it holds. It is safe for concurrent use.
type Querier struct {
	b Backend
}

// NewQuerier returns a Querier over b.
func NewQuerier(b Backend) *Querier { return &Querier{b: b} }

// Backend returns the backend q reads.
func (q *Querier) Backend() Backend { return q.b }

// replica returns the local replica of a partition if it may answer under
// the options (within the bound and at or past the minimum position), with
// what it said about itself before the read.
func (q *Querier) replica(store string, p int32, o *queryOptions) (Replica, ReplicaInfo, error) {
	if p < 0 {
		return nil, ReplicaInfo{}, fmt.Errorf("%w: partition %d of store %q", ErrUnknownPartition, p, store)
	}
	r, err := q.b.Replica(store, p)
	if err != nil {
		if errors.Is(err, ErrNotHostedHere) {
			// Tell a partition that does not exist from one hosted
			// elsewhere, when the routing table can say.
			if m, merr := q.b.Metadata(); merr == nil {
				if n, ok := m.Partitions[store]; ok && p >= n {
					return nil, ReplicaInfo{}, fmt.Errorf("%w: partition %d of store %q, which has %d", ErrUnknownPartition, p, store, n)
				}
			}
		}
		return nil, ReplicaInfo{}, err
	}
	if o.hasMin && o.minPosition < 0 {
		return nil, ReplicaInfo{}, invalidf("minimum position %d: want a changelog offset, 0 or more", o.minPosition)
	}
	info := r.Info()
	if err := o.bound.Check(info); err != nil {
		se := err.(*StaleError)
		se.Store, se.Partition, se.Host = store, p, q.b.Self()
		return nil, ReplicaInfo{}, se
	}
	if o.hasMin && info.Position < o.minPosition {
		return nil, ReplicaInfo{}, &BehindError{Store: store, Partition: p, Host: q.b.Self(), Role: info.Role, Position: info.Position, MinPosition: o.minPosition}
	}
	return r, info, nil
}

// provenance describes r right after a read. Taking the position after the
// read makes it an upper bound of what the read saw, which is the safe side
// for monotonic reads. A position that went backwards means the replica was
// closed or replaced under the read; what it said before is then the better
// description of what was read. The bound was checked before the read: if
// the replica no longer meets it (its age grew past the bound, its lag or
// role changed meanwhile), the answer keeps what it said then, with the
// later position, so that no answer describes its replica as outside the
// bound it was served under.
func (q *Querier) provenance(r Replica, p int32, before ReplicaInfo, bound Staleness) Provenance {
	info := r.Info()
	switch {
	case info.Position < before.Position:
		info = before
	case !bound.Allows(info):
		pos := info.Position
		info = before
		info.Position = pos
	}
	return provenanceOf(q.b.Self(), p, info)
}

// movedErr turns a store closed under a reader into the retryable error it
// means: the replica moved away while being read.
func movedErr(store string, p int32, err error) error {
	if errors.Is(err, statestore.ErrClosed) {
		return fmt.Errorf("%w: store %q partition %d was closed while being read (it moved)", ErrNotHostedHere, store, p)
	}
	return fmt.Errorf("iq: store %q partition %d: %w", store, p, err)
}

// GetBytes looks up a serialized key in the local replica of its partition.
// It fails with ErrNotHostedHere when no local replica exists, *StaleError
// outside the bound, *BehindError below the minimum position.
func (q *Querier) GetBytes(ctx context.Context, store string, key []byte, opts ...QueryOption) (Result[[]byte], error) {
	if err := ctx.Err(); err != nil {
		return Result[[]byte]{}, err
	}
	o := buildOptions(opts)
	if err := q.checkKeyQuery(store, &o); err != nil {
		return Result[[]byte]{}, err
	}
	p := o.partition
	if !o.hasPartition {
		var err error
		if p, err = q.b.KeyPartition(store, key); err != nil {
			return Result[[]byte]{}, err
		}
	}
	r, before, err := q.replica(store, p, &o)
	if err != nil {
		return Result[[]byte]{}, err
	}
	return q.getFrom(r, before, o.bound, store, p, key, o.at())
}

// checkKeyQuery fails with ErrInvalidQuery when store takes no key lookup,
// or one as of a time (AsOf) and is not versioned.
func (q *Querier) checkKeyQuery(store string, o *queryOptions) error {
	l, err := q.layout(store)
	if err != nil {
		return err
	}
	if l.Kind == KindVersioned {
		return nil
	}
	if _, err := q.requireKind(store, KindKeyValue); err != nil {
		return err
	}
	if o.hasAsOf {
		return invalidf("store %q is a %s store, not a versioned store: it keeps no history to ask as of a time", store, l.Kind)
	}
	return nil
}

// timestamped says whether a key-value store keeps a timestamp beside
// each value (StoreLayout.Timestamped).
func (q *Querier) timestamped(store string) (bool, error) {
	l, err := q.layout(store)
	return l.Timestamped, err
}

// splitValue parts a stored value from its timestamp when the store keeps
// one, the timestamp 0 when there is none.
func splitValue(stored []byte, timestamped bool) (v []byte, ts int64) {
	if !timestamped {
		return stored, 0
	}
	if v, ts = statestore.SplitTimestamped(stored); ts == statestore.NoTimestamp {
		ts = 0
	}
	return v, ts
}

// getFrom reads a key from a replica that was found fit to answer when it
// said before about itself: from a versioned store, its version valid at
// at (math.MaxInt64: its latest).
func (q *Querier) getFrom(r Replica, before ReplicaInfo, bound Staleness, store string, p int32, key []byte, at int64) (Result[[]byte], error) {
	l, err := q.layout(store)
	if err != nil {
		return Result[[]byte]{}, err
	}
	if l.Kind == KindVersioned {
		return q.getVersion(r, before, bound, l, store, p, key, at)
	}
	v, found, err := r.Store().Get(key)
	if err != nil {
		return Result[[]byte]{}, movedErr(store, p, err)
	}
	v, ts := splitValue(v, l.Timestamped)
	return Result[[]byte]{Value: v, Timestamp: ts, Found: found, Provenance: q.provenance(r, p, before, bound)}, nil
}

// getVersion is getFrom for a versioned store. The replica's store holds
// the observed time its history is cut off by, at the same changelog
// position as the versions, so an active and a standby at one position
// answer alike.
func (q *Querier) getVersion(r Replica, before ReplicaInfo, bound Staleness, l StoreLayout, store string, p int32, key []byte, at int64) (Result[[]byte], error) {
	vs, err := statestore.NewVersionedStore(r.Store(), l.Versioned)
	if err != nil {
		return Result[[]byte]{}, err
	}
	v, found, err := vs.GetAsOf(key, at)
	if err != nil {
		return Result[[]byte]{}, movedErr(store, p, err)
	}
	res := Result[[]byte]{Found: found, Provenance: q.provenance(r, p, before, bound)}
	if found {
		// A version's timestamp is the time it became valid.
		res.Value, res.Timestamp, res.ValidFrom, res.ValidTo = v.Value, v.ValidFrom, v.ValidFrom, v.ValidTo
	}
	return res, nil
}

// Get looks up a key in the local replica of its partition, serializing the
// key and deserializing the value with the given serdes (the store's own).
func Get[K, V any](ctx context.Context, q *Querier, store string, key K, keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...QueryOption) (Result[V], error) {
	kb, err := keySerde.Encode(key)
	if err != nil {
		return Result[V]{}, invalidf("encode key for store %q: %v", store, err)
	}
	raw, err := q.GetBytes(ctx, store, kb, opts...)
	if err != nil {
		return Result[V]{}, err
	}
	res := Result[V]{Found: raw.Found, Timestamp: raw.Timestamp, ValidFrom: raw.ValidFrom, ValidTo: raw.ValidTo, Provenance: raw.Provenance}
	if raw.Found {
		if res.Value, err = valueSerde.Decode(raw.Value); err != nil {
			return Result[V]{}, fmt.Errorf("iq: store %q partition %d: decode value: %w", store, raw.Provenance.Partition, err)
		}
	}
	return res, nil
}

// localPartitions lists the partitions a local scan visits: the one asked
// for, or every local replica of the store.
func (q *Querier) localPartitions(store string, o *queryOptions) ([]int32, error) {
	if o.hasPartition {
		return []int32{o.partition}, nil
	}
	if o.hasMin {
		return nil, invalidf("a minimum position needs a single partition (use WithPartition)")
	}
	m, err := q.b.Metadata()
	if err != nil {
		return nil, err
	}
	if _, err := m.partitionsOf(store); err != nil {
		return nil, err
	}
	var ps []int32
	for _, info := range q.b.LocalReplicas() {
		if info.Store == store {
			ps = append(ps, info.Partition)
		}
	}
	slices.Sort(ps)
	return slices.Compact(ps), nil
}

// scan runs open on every partition the options select and decodes what it
// yields. A single asked-for partition that cannot answer fails the call;
// in an all-local scan it is listed in Refused.
func scan[K, V any](ctx context.Context, q *Querier, store string, o *queryOptions, open func(statestore.ReadWriter) (statestore.Iterator, error), ks serde.Serde[K], vs serde.Serde[V]) (RangeResult[K, V], error) {
	var res RangeResult[K, V]
	if _, err := q.requireKind(store, KindKeyValue); err != nil {
		return res, err
	}
	ps, err := q.localPartitions(store, o)
	if err != nil {
		return res, err
	}
	for _, p := range ps {
		if err := ctx.Err(); err != nil {
			return RangeResult[K, V]{}, err
		}
		pe, err := scanPartition(ctx, q, store, p, o, open, ks, vs)
		switch {
		case err == nil:
			res.Partitions = append(res.Partitions, pe)
		case o.hasPartition || ctx.Err() != nil || errors.Is(err, ErrInvalidQuery):
			return RangeResult[K, V]{}, err
		default:
			res.Refused = append(res.Refused, PartitionError{Partition: p, Err: err})
		}
	}
	return res, nil
}

func scanPartition[K, V any](ctx context.Context, q *Querier, store string, p int32, o *queryOptions, open func(statestore.ReadWriter) (statestore.Iterator, error), ks serde.Serde[K], vs serde.Serde[V]) (PartitionEntries[K, V], error) {
	r, before, err := q.replica(store, p, o)
	if err != nil {
		return PartitionEntries[K, V]{}, err
	}
	timestamped, err := q.timestamped(store)
	if err != nil {
		return PartitionEntries[K, V]{}, err
	}
	it, err := open(r.Store())
	if err != nil {
		return PartitionEntries[K, V]{}, movedErr(store, p, err)
	}
	defer it.Close()
	var pe PartitionEntries[K, V]
	for it.Next() {
		if o.limit > 0 && len(pe.Entries) == o.limit {
			pe.Truncated = true
			break
		}
		// Checking every entry costs little next to the iterator step and
		// keeps a cancelled scan of a large store short.
		if len(pe.Entries)%256 == 255 {
			if err := ctx.Err(); err != nil {
				return PartitionEntries[K, V]{}, err
			}
		}
		k, err := ks.Decode(it.Key())
		if err != nil {
			return PartitionEntries[K, V]{}, fmt.Errorf("iq: store %q partition %d: decode key: %w", store, p, err)
		}
		vb, ts := splitValue(it.Value(), timestamped)
		v, err := vs.Decode(vb)
		if err != nil {
			return PartitionEntries[K, V]{}, fmt.Errorf("iq: store %q partition %d: decode value: %w", store, p, err)
		}
		pe.Entries = append(pe.Entries, KeyValue[K, V]{Key: k, Value: v, Timestamp: ts})
	}
	if err := it.Err(); err != nil {
		return PartitionEntries[K, V]{}, movedErr(store, p, err)
	}
	pe.Provenance = q.provenance(r, p, before, o.bound)
	return pe, nil
}

// RangeBytes returns the serialized entries with keys in [from, to) (a nil
// bound is open) from one partition (WithPartition) or every local replica
// of the store that satisfies the bound. Keys are ordered bytewise within a
// partition.
func (q *Querier) RangeBytes(ctx context.Context, store string, from, to []byte, opts ...QueryOption) (RangeResult[[]byte, []byte], error) {
	o := buildOptions(opts)
	return scan(ctx, q, store, &o, func(s statestore.ReadWriter) (statestore.Iterator, error) { return s.Range(from, to) }, serde.Bytes, serde.Bytes)
}

// Range returns the entries with keys in [from, to), serialized with
// keySerde and ordered by their serialized bytes, from one partition or
// every local replica (see RangeBytes).
func Range[K, V any](ctx context.Context, q *Querier, store string, from, to K, keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...QueryOption) (RangeResult[K, V], error) {
	fb, err := keySerde.Encode(from)
	if err != nil {
		return RangeResult[K, V]{}, invalidf("encode range start for store %q: %v", store, err)
	}
	tb, err := keySerde.Encode(to)
	if err != nil {
		return RangeResult[K, V]{}, invalidf("encode range end for store %q: %v", store, err)
	}
	o := buildOptions(opts)
	return scan(ctx, q, store, &o, func(s statestore.ReadWriter) (statestore.Iterator, error) { return s.Range(fb, tb) }, keySerde, valueSerde)
}

// All returns every entry of one partition or of every local replica (see
// RangeBytes).
func All[K, V any](ctx context.Context, q *Querier, store string, keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...QueryOption) (RangeResult[K, V], error) {
	o := buildOptions(opts)
	return scan(ctx, q, store, &o, func(s statestore.ReadWriter) (statestore.Iterator, error) { return s.All() }, keySerde, valueSerde)
}

// ApproximateCount estimates the keys of one partition or of every local
// replica that satisfies the bound.
func (q *Querier) ApproximateCount(ctx context.Context, store string, opts ...QueryOption) (CountResult, error) {
	o := buildOptions(opts)
	var res CountResult
	ps, err := q.localPartitions(store, &o)
	if err != nil {
		return res, err
	}
	for _, p := range ps {
		if err := ctx.Err(); err != nil {
			return CountResult{}, err
		}
		r, before, err := q.replica(store, p, &o)
		var n int64
		if err == nil {
			if n, err = r.Store().ApproximateCount(); err != nil {
				err = movedErr(store, p, err)
			}
		}
		if err != nil {
			if o.hasPartition {
				return CountResult{}, err
			}
			res.Refused = append(res.Refused, PartitionError{Partition: p, Err: err})
			continue
		}
		res.Partitions = append(res.Partitions, PartitionCount{Provenance: q.provenance(r, p, before, o.bound), Count: n})
		res.Total += n
	}
	return res, nil
}

// Metadata returns the routing table of the latest assignment, for every
// host.
func (q *Querier) Metadata() (Metadata, error) { return q.b.Metadata() }

// LocalReplicas describes every local replica: role, position, end, lag.
func (q *Querier) LocalReplicas() []ReplicaInfo { return q.b.LocalReplicas() }

// StoreMetadata returns which partitions of store each host holds.
func (q *Querier) StoreMetadata(store string) (StoreMetadata, error) {
	m, err := q.b.Metadata()
	if err != nil {
		return StoreMetadata{}, err
	}
	return storeMetadata(m, store)
}

func storeMetadata(m Metadata, store string) (StoreMetadata, error) {
	n, err := m.partitionsOf(store)
	if err != nil {
		return StoreMetadata{}, err
	}
	sm := StoreMetadata{Store: store, Partitions: n, Global: m.IsGlobal(store)}
	only := func(sps []StorePartition) []StorePartition {
		var out []StorePartition
		for _, sp := range sps {
			if sp.Store == store {
				out = append(out, sp)
			}
		}
		return out
	}
	for _, h := range m.Hosts {
		hm := HostMetadata{Host: h.Host, Active: only(h.Active), Standby: only(h.Standby), Warmup: only(h.Warmup)}
		if len(hm.Active)+len(hm.Standby)+len(hm.Warmup) > 0 {
			sm.Hosts = append(sm.Hosts, hm)
		}
	}
	return sm, nil
}

// KeyMetadata names the partition of a serialized key and the hosts that
// hold it. Before the first assignment, or when no host holds the
// partition in any role, it fails with an *UnavailableError rather than
// guess.
func (q *Querier) KeyMetadata(store string, key []byte) (KeyQueryMetadata, error) {
	p, err := q.b.KeyPartition(store, key)
	if err != nil {
		if errors.Is(err, ErrUnknownStore) {
			return KeyQueryMetadata{}, err
		}
		return KeyQueryMetadata{}, &UnavailableError{Store: store, Partition: -1, Cause: err}
	}
	return q.PartitionMetadata(store, p)
}

// KeyMetadataFor is KeyMetadata for a typed key.
func KeyMetadataFor[K any](q *Querier, store string, key K, keySerde serde.Serde[K]) (KeyQueryMetadata, error) {
	kb, err := keySerde.Encode(key)
	if err != nil {
		return KeyQueryMetadata{}, invalidf("encode key for store %q: %v", store, err)
	}
	return q.KeyMetadata(store, kb)
}

// PartitionMetadata names the hosts holding one partition of a store.
func (q *Querier) PartitionMetadata(store string, p int32) (KeyQueryMetadata, error) {
	m, err := q.b.Metadata()
	if err != nil {
		return KeyQueryMetadata{}, &UnavailableError{Store: store, Partition: p, Cause: err}
	}
	return locate(m, store, p)
}

// locate finds a partition's hosts in a routing table.
func locate(m Metadata, store string, p int32) (KeyQueryMetadata, error) {
	n, err := m.partitionsOf(store)
	if err != nil {
		return KeyQueryMetadata{}, err
	}
	if p < 0 || p >= n {
		return KeyQueryMetadata{}, fmt.Errorf("%w: partition %d of store %q, which has %d", ErrUnknownPartition, p, store, n)
	}
	if m.IsGlobal(store) {
		return KeyQueryMetadata{Partition: p, Global: true}, nil
	}
	km := KeyQueryMetadata{Partition: p}
	want := StorePartition{Store: store, Partition: p}
	for _, h := range m.Hosts {
		switch {
		case slices.Contains(h.Active, want):
			km.Active = h.Host
		case slices.Contains(h.Standby, want):
			km.Standbys = append(km.Standbys, h.Host)
		case slices.Contains(h.Warmup, want):
			km.Warmups = append(km.Warmups, h.Host)
		}
	}
	if km.Active == "" && len(km.Standbys) == 0 && len(km.Warmups) == 0 {
		return KeyQueryMetadata{}, &UnavailableError{Store: store, Partition: p, Cause: errNoHost}
	}
	return km, nil
}

// errNoHost is why locate finds nobody for a partition: between an
// instance's loss and the next assignment, or while a rebalance moves it.
var errNoHost = errors.New("no host holds the partition in the latest assignment")
