package iq

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

// ClientOptions tunes a Client. Zero fields take the defaults documented on
// each.
type ClientOptions struct {
	// Timeout bounds one request to one instance. Default 2s.
	Timeout time.Duration
	// MetadataMaxAge is how long a fetched routing table is used before it
	// is fetched again; failures that suggest it is out of date refresh it
	// sooner. Default 30s.
	MetadataMaxAge time.Duration
	// SuspectFor is how long an instance that did not answer at all is
	// routed around, unless the routing table changes first. Default 5s.
	SuspectFor time.Duration
	// DisableMonotonic stops the client from passing the last position it
	// saw for a partition as min_position. Monotonic reads are on by
	// default.
	DisableMonotonic bool
	// BehindWait is how long a lookup whose every eligible replica is
	// behind the position the client already saw keeps retrying them
	// (they usually catch up within milliseconds) before giving up.
	// Default 500ms; a negative value does not wait.
	BehindWait time.Duration
	// RebalanceWait is how long a lookup whose routing table names no
	// replica that holds the partition (every one asked said it is not
	// hosted there, is rebalancing, has not had its lag confirmed since it
	// opened or, under the active bound, is the active still restoring;
	// or the table names none: a rebalance is moving it or the instances
	// are still learning the new table) keeps refreshing the table and
	// asking again before giving up. Default 500ms; a negative
	// value does not wait.
	RebalanceWait time.Duration
	// FanOut is how many partitions an all-keys query (WindowFetchAll)
	// asks at once. Default 8.
	FanOut int
	// Transport carries the requests. Nil uses a private transport with a
	// 1s connect timeout (and TLS).
	Transport http.RoundTripper
	// TLS, when set, makes the client use https, verifying the instances
	// with it (RootCAs for a private CA; Certificates for client
	// certificates). Addresses given as https://host:port also turn https
	// on, trusting the system's roots unless TLS says otherwise.
	TLS *tls.Config
	// Token is the bearer token the instances require (ServerConfig.Token);
	// empty sends none.
	Token string
	// Prefer is how lookups choose among the replicas within their bound:
	// PreferFreshest (the default) or PreferSpread. WithPreference
	// overrides it for one lookup.
	Prefer Preference
	// ActiveFirstTimeout bounds the wait for a partition's active before a
	// lookup whose bound allows other replicas asks them instead; an
	// active that does not answer in time is routed around for
	// SuspectFor, like one that did not answer at all. Default 300ms.
	ActiveFirstTimeout time.Duration
}

// minRefreshInterval keeps a burst of failing lookups from turning into a
// burst of metadata requests: refreshes closer together than this reuse
// the last table.
const minRefreshInterval = 100 * time.Millisecond

// Client queries an Eddy application from outside it. Given the address of
// any of its instances, it fetches the routing table (/v1/metadata),
// computes each key's partition itself, and asks the partition's active
// host first (for ActiveFirstTimeout when the bound allows others), then
// every standby and warmup the bound allows at once, returning the
// freshest answer (see the package doc), refreshing the table when answers
// suggest it is out of date. With PreferSpread it asks the replicas in
// random order instead. A global store (Metadata.Global), which every
// instance holds whole, is asked of the instances the client was given, in
// order, then of the others, until one answers.
//
// Unless disabled, reads are monotonic per partition: the client remembers
// the highest position it saw for each store partition and refuses answers
// from replicas behind it (they answer 409 and the client moves on), so it
// never returns older data than it returned before, across failovers.
//
// A Client is safe for concurrent use. Close it to release connections.
type Client struct {
	seeds  []string
	opts   ClientOptions
	rt     *router
	minGap time.Duration

	mu     sync.Mutex // guards meta, metaFP, metaAt
	meta   *Metadata
	metaFP uint64
	metaAt time.Time

	refreshMu sync.Mutex // one metadata fetch at a time
	lastForce time.Time  // guarded by refreshMu

	posMu sync.Mutex
	pos   map[StorePartition]int64
}

// NewClient returns a client that bootstraps from addrs (host:port, at
// least one). It does no I/O until the first query.
func NewClient(addrs []string, opts ClientOptions) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("iq: NewClient needs at least one instance address")
	}
	c := &Client{opts: opts, pos: make(map[StorePartition]int64), minGap: minRefreshInterval}
	useTLS := opts.TLS != nil
	for _, a := range addrs {
		useTLS = useTLS || strings.HasPrefix(strings.TrimSpace(a), "https://")
		n, err := normalizeAddr(a)
		if err != nil {
			return nil, err
		}
		c.seeds = append(c.seeds, n)
	}
	c.seeds = dedupe(c.seeds)
	if c.opts.Timeout <= 0 {
		c.opts.Timeout = 2 * time.Second
	}
	if c.opts.MetadataMaxAge <= 0 {
		c.opts.MetadataMaxAge = 30 * time.Second
	}
	if c.opts.SuspectFor <= 0 {
		c.opts.SuspectFor = 5 * time.Second
	}
	if c.opts.FanOut <= 0 {
		c.opts.FanOut = 8
	}
	if c.opts.ActiveFirstTimeout <= 0 {
		c.opts.ActiveFirstTimeout = 300 * time.Millisecond
	}
	switch {
	case c.opts.RebalanceWait == 0:
		c.opts.RebalanceWait = 500 * time.Millisecond
	case c.opts.RebalanceWait < 0:
		c.opts.RebalanceWait = 0
	}
	switch {
	case c.opts.BehindWait == 0:
		c.opts.BehindWait = 500 * time.Millisecond
	case c.opts.BehindWait < 0:
		c.opts.BehindWait = 0
	}
	c.rt = newRouter(c.opts.Transport, useTLS, c.opts.TLS, c.opts.Token, c.opts.Timeout, c.opts.SuspectFor)
	return c, nil
}

// Close releases the client's idle connections.
func (c *Client) Close() { c.rt.close() }

// Metadata returns the routing table, fetching it if the client has none
// or it is older than MetadataMaxAge.
func (c *Client) Metadata(ctx context.Context) (Metadata, error) {
	m, _, err := c.metadata(ctx, false)
	return m, err
}

// RefreshMetadata fetches the routing table now.
func (c *Client) RefreshMetadata(ctx context.Context) (Metadata, error) {
	m, _, err := c.metadata(ctx, true)
	return m, err
}

func (c *Client) cached() (Metadata, uint64, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.meta == nil {
		return Metadata{}, 0, time.Time{}, false
	}
	return *c.meta, c.metaFP, c.metaAt, true
}

func (c *Client) metadata(ctx context.Context, force bool) (Metadata, uint64, error) {
	asked := time.Now()
	if m, fp, at, ok := c.cached(); ok && !force && asked.Sub(at) < c.opts.MetadataMaxAge {
		return m, fp, nil
	}
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	// Another caller may have refreshed while this one waited; and forced
	// refreshes (after failures) are spaced out, so that a partition no
	// replica can serve does not turn every lookup into a metadata fetch.
	if m, fp, at, ok := c.cached(); ok {
		if at.After(asked) || (!force && asked.Sub(at) < c.opts.MetadataMaxAge) || (force && time.Since(c.lastForce) < c.minGap) {
			return m, fp, nil
		}
	}
	if force {
		c.lastForce = time.Now()
	}
	m, err := c.fetchMetadata(ctx)
	if err != nil {
		return Metadata{}, 0, err
	}
	fp := fingerprint(m)
	c.mu.Lock()
	c.meta, c.metaFP, c.metaAt = &m, fp, time.Now()
	c.mu.Unlock()
	return m, fp, nil
}

// fetchMetadata asks the known instances, then the seeds, for the routing
// table; the first answer wins.
func (c *Client) fetchMetadata(ctx context.Context) (Metadata, error) {
	var hosts []string
	fp := func() uint64 { return 0 }
	if m, f, _, ok := c.cached(); ok {
		for _, h := range m.Hosts {
			hosts = append(hosts, h.Host)
		}
		fp = func() uint64 { return f }
	}
	hosts = dedupe(append(hosts, c.seeds...))
	var m Metadata
	tried, ok := c.rt.try(ctx, hosts, fp, "/v1/metadata", func(_ string, st int, body []byte) error {
		if st != http.StatusOK {
			return decodeErrorAnswer(st, body)
		}
		var w wireMetadata
		if err := json.Unmarshal(body, &w); err != nil {
			return fmt.Errorf("iq: malformed metadata answer: %w", err)
		}
		m = w.metadata()
		return nil
	})
	if !ok {
		// Refused credentials are a configuration error, not an outage:
		// say so rather than "unavailable, retry".
		if len(tried) > 0 && !slices.ContainsFunc(tried, func(a Attempt) bool { return !errors.Is(a.Err, ErrUnauthorized) }) {
			return Metadata{}, fmt.Errorf("iq: routing table from %s: %w", tried[0].Host, tried[0].Err)
		}
		return Metadata{}, &UnavailableError{Partition: -1, Cause: errors.New("no instance returned the routing table"), Tried: tried}
	}
	return m, nil
}

// LastPosition returns the highest position the client has seen for a
// store partition.
func (c *Client) LastPosition(store string, partition int32) (int64, bool) {
	c.posMu.Lock()
	defer c.posMu.Unlock()
	p, ok := c.pos[StorePartition{store, partition}]
	return p, ok
}

func (c *Client) saw(store string, partition int32, position int64) {
	c.posMu.Lock()
	defer c.posMu.Unlock()
	sp := StorePartition{store, partition}
	if old, ok := c.pos[sp]; !ok || position > old {
		c.pos[sp] = position
	}
}

// KeyMetadata names the partition of a serialized key and its hosts, from
// the client's routing table; for a global store it says Global (every
// instance holds the key) instead.
func (c *Client) KeyMetadata(ctx context.Context, store string, keyBytes []byte) (KeyQueryMetadata, error) {
	m, _, err := c.metadata(ctx, false)
	if err != nil {
		return KeyQueryMetadata{}, err
	}
	n, err := m.partitionsOf(store)
	if err != nil {
		return KeyQueryMetadata{}, err
	}
	return locate(m, store, topology.Partition(keyBytes, n))
}

// Get looks up a key. keyText is the key as the store's StoreCodec reads
// it from a URL; keyBytes is the same key serialized with the store's key
// serde, from which the partition is computed. The value comes back as the
// JSON the server rendered.
func (c *Client) Get(ctx context.Context, store, keyText string, keyBytes []byte, opts ...QueryOption) (Result[json.RawMessage], error) {
	o := buildOptions(opts)
	path := func(q url.Values) string {
		if o.hasAsOf {
			q.Set("as_of", strconv.FormatInt(o.asOf, 10))
		}
		return keyPath(store, keyText, q)
	}
	return clientLookup(ctx, c, store, keyBytes, opts, path,
		func(st int, body []byte) (Result[json.RawMessage], Provenance, error) {
			if st == http.StatusOK || st == http.StatusNotFound {
				var k wireKey
				if json.Unmarshal(body, &k) == nil && k.ServedBy != nil {
					prov := k.ServedBy.provenance(k.Partition)
					res := Result[json.RawMessage]{Value: k.Value, Timestamp: k.TimestampMs, Found: st == http.StatusOK, Provenance: prov}
					if k.ValidFrom != nil {
						res.ValidFrom, res.ValidTo = *k.ValidFrom, statestore.OpenEnded
						if k.ValidTo != nil {
							res.ValidTo = *k.ValidTo
						}
					}
					return res, prov, nil
				}
			}
			return Result[json.RawMessage]{}, Provenance{}, decodeErrorAnswer(st, body)
		})
}

// clientLookup asks the replicas of the partition of keyBytes for
// path(query), as Get describes, refreshing the routing table once when
// the answers suggest it moved on.
func clientLookup[T any](ctx context.Context, c *Client, store string, keyBytes []byte, opts []QueryOption, path func(url.Values) string, decode decodeFn[T]) (T, error) {
	var zero T
	o := buildOptions(opts)
	m, fp, err := c.metadata(ctx, false)
	if err != nil {
		return zero, &UnavailableError{Store: store, Partition: -1, Bound: o.bound, Cause: err}
	}
	ue := &UnavailableError{Store: store, Partition: -1, Bound: o.bound}
	behindUntil := time.Now().Add(c.opts.BehindWait)
	movingUntil := time.Now().Add(c.opts.RebalanceWait)
	for round := 0; ; round++ {
		res, retry, err := lookupOnce(ctx, c, m, store, keyBytes, &o, ue, path, decode)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			ue.Cause = ctx.Err()
			return zero, ue
		}
		if onlyBehind(ue.Tried) && time.Now().Before(behindUntil) {
			// Every replica that could answer is just behind what this
			// client already saw: give them a moment to catch up.
			select {
			case <-ctx.Done():
				ue.Cause = ctx.Err()
				return zero, ue
			case <-time.After(behindRetryPause):
			}
			ue.Tried = ue.Tried[:0]
			round--
			continue
		}
		if retry && partitionMoving(ue.Tried, "", o.bound) && time.Now().Before(movingUntil) {
			// The table names nobody who holds the partition now: a
			// rebalance is moving it, or the instances have not learned
			// the new table yet. Ask for the table again shortly.
			select {
			case <-ctx.Done():
				ue.Cause = ctx.Err()
				return zero, ue
			case <-time.After(movingRetryPause):
			}
			if nm, nfp, merr := c.metadata(ctx, true); merr == nil {
				m, fp = nm, nfp
			}
			ue.Tried = ue.Tried[:0]
			round--
			continue
		}
		if !retry || round == 1 {
			return zero, err
		}
		nm, nfp, merr := c.metadata(ctx, true)
		if merr != nil || nfp == fp {
			return zero, err
		}
		m, fp = nm, nfp
	}
}

// behindRetryPause is the pause between retries of replicas that were
// behind; movingRetryPause that between routing-table refreshes while a
// partition moves.
const (
	behindRetryPause = 20 * time.Millisecond
	movingRetryPause = 50 * time.Millisecond
)

// onlyBehind reports whether some replica refused for being behind and every
// other attempt was a skip of a host already known to be down.
func onlyBehind(tried []Attempt) bool {
	behind := false
	for _, a := range tried {
		switch {
		case errors.Is(a.Err, ErrBehind):
			behind = true
		case errors.Is(a.Err, errSuspect):
		default:
			var te *transportError
			if !errors.As(a.Err, &te) {
				return false
			}
		}
	}
	return behind
}

// lookupOnce tries every candidate of the key's partition under one routing
// table. retry says whether a newer table might do better.
func lookupOnce[T any](ctx context.Context, c *Client, m Metadata, store string, keyBytes []byte, o *queryOptions, ue *UnavailableError, path func(url.Values) string, decode decodeFn[T]) (T, bool, error) {
	var zero T
	n, err := m.partitionsOf(store)
	if errors.Is(err, ErrNotStarted) {
		ue.Cause = err
		return zero, true, ue
	}
	if err != nil {
		return zero, true, fmt.Errorf("%w: %q is not in the routing table", ErrUnknownStore, store)
	}
	if m.IsGlobal(store) {
		return globalLookup(ctx, c, m, store, o, ue, path, decode)
	}
	part := o.partition
	if !o.hasPartition {
		part = topology.Partition(keyBytes, n)
	}
	ue.Partition = part
	km, err := locate(m, store, part)
	if err != nil {
		ue.Cause = err
		return zero, true, ue
	}
	// The partition goes along only when the caller chose it: a server that
	// computes it from the key itself cannot be misled into reading the
	// wrong partition by a key written differently from how it was hashed.
	q := url.Values{"staleness": {o.bound.String()}, "route": {"false"}}
	if o.hasPartition {
		q.Set("partition", strconv.Itoa(int(part)))
	}
	c.setMinPosition(q, store, part, o)
	prefer := c.opts.Prefer
	if o.hasPrefer {
		prefer = o.prefer
	}
	pl := newRoutePlan(km, o.bound, "", nil, c.opts.ActiveFirstTimeout, memoFingerprint(m))
	ch, tried, ok := routeBy(ctx, c.rt, prefer, pl, path(q), decode)
	// (Decoders may run concurrently, so what is wrong with the query is
	// found after the fact.)
	fatal := queryFault(tried)
	if ok {
		if !c.opts.DisableMonotonic {
			c.saw(store, part, ch.prov.Position)
		}
		return ch.val, false, nil
	}
	if fatal != nil {
		return zero, false, fatal
	}
	ue.Tried = append(ue.Tried, tried...)
	if len(tried) == 0 {
		ue.Cause = fmt.Errorf("no host within staleness bound %s holds the partition (active %q)", o.bound, km.Active)
	}
	// Staleness and position refusals say nothing about the table; anything
	// else (no answer, not hosted, not started, moving) may mean it moved
	// on, and so does an active the table names that is still restoring.
	retry := partitionMoving(tried, "", o.bound)
	for _, a := range tried {
		if !errors.Is(a.Err, ErrTooStale) && !errors.Is(a.Err, ErrBehind) {
			retry = true
		}
	}
	return zero, retry, ue
}

// globalLookup asks for a key of a global store, which every instance holds
// whole: the instances the client was given first, in order, then the
// others in the table, until one answers. There is no partition to route
// by; the answer's provenance says RoleGlobal.
func globalLookup[T any](ctx context.Context, c *Client, m Metadata, store string, o *queryOptions, ue *UnavailableError, path func(url.Values) string, decode decodeFn[T]) (T, bool, error) {
	var zero T
	ue.Partition = 0
	q := url.Values{"staleness": {o.bound.String()}, "route": {"false"}}
	c.setMinPosition(q, store, 0, o)
	hosts := slices.Clone(c.seeds)
	for _, h := range m.Hosts {
		hosts = append(hosts, h.Host)
	}
	var (
		val  T
		prov Provenance
	)
	tried, ok := c.rt.try(ctx, dedupe(hosts), memoFingerprint(m), path(q), func(_ string, st int, body []byte) error {
		v, p, err := decode(st, body)
		if err == nil {
			val, prov = v, p
		}
		return err
	})
	if ok {
		if !c.opts.DisableMonotonic {
			c.saw(store, 0, prov.Position)
		}
		return val, false, nil
	}
	ue.Tried = append(ue.Tried, tried...)
	if fatal := queryFault(tried); fatal != nil {
		return zero, false, fatal
	}
	return zero, true, ue
}

// setMinPosition asks for a minimum position in q: the caller's, or,
// with monotonic reads, the highest the client saw for the partition if
// that is higher.
func (c *Client) setMinPosition(q url.Values, store string, part int32, o *queryOptions) {
	minPos, hasMin := o.minPosition, o.hasMin
	if !c.opts.DisableMonotonic {
		if last, ok := c.LastPosition(store, part); ok && (!hasMin || last > minPos) {
			minPos, hasMin = last, true
		}
	}
	if hasMin {
		q.Set("min_position", strconv.FormatInt(minPos, 10))
	}
}

// queryFault returns the first attempt's refusal of the query itself (an
// invalid query, an unknown store), or nil. What is wrong with the query
// is wrong everywhere: no other replica or table will do better.
func queryFault(tried []Attempt) error {
	for _, a := range tried {
		if errors.Is(a.Err, ErrInvalidQuery) || errors.Is(a.Err, ErrUnknownStore) {
			return a.Err
		}
	}
	return nil
}

// ClientGet looks up a typed key through a Client. The key is written in
// the URL with fmt.Sprint (what CodecFor's default key parser reads for
// string and integer keys) and serialized with keySerde to find its
// partition; the JSON value is decoded into V.
func ClientGet[K, V any](ctx context.Context, c *Client, store string, key K, keySerde serde.Serde[K], opts ...QueryOption) (Result[V], error) {
	kb, err := keySerde.Encode(key)
	if err != nil {
		return Result[V]{}, invalidf("encode key for store %q: %v", store, err)
	}
	raw, err := c.Get(ctx, store, fmt.Sprint(key), kb, opts...)
	if err != nil {
		return Result[V]{}, err
	}
	res := Result[V]{Found: raw.Found, Timestamp: raw.Timestamp, ValidFrom: raw.ValidFrom, ValidTo: raw.ValidTo, Provenance: raw.Provenance}
	if raw.Found {
		if err := json.Unmarshal(raw.Value, &res.Value); err != nil {
			return Result[V]{}, fmt.Errorf("iq: store %q partition %d: decode value: %w", store, raw.Provenance.Partition, err)
		}
	}
	return res, nil
}
