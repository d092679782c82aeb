package iq

// Live queries: a watch follows one key of a store and delivers every
// committed change of it, taken from the same path the replica's store is
// written on: an active hands the hub what its commit wrote (with the
// changelog offsets the broker gave the records), a standby or a restoring
// replica what it applied from the changelog. Either way a change reaches a
// watcher only once it is committed and in the replica's store.
//
// A change's position is the changelog offset of the record that carries
// it. Per key, the changelog's order is the order of the changes, so
// positions strictly increase along a watch; a watch resumed from position
// P delivers exactly the changes after P. What a replica missed between P
// and the moment it was asked (it was a standby elsewhere, it joined late)
// is read back from the changelog itself, committed records only.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Change is one committed write of a key, as its changelog record holds
// it.
type Change struct {
	Key []byte
	// Value is the stored value, nil for a deletion (a tombstone).
	Value []byte
	// Timestamp is the changelog record's timestamp, in milliseconds.
	Timestamp int64
	// Position is the changelog offset of the record.
	Position int64
}

// Hub hands the changes written to the local replicas of an instance to
// the watches that follow them. Watches of one key share one subscription,
// which the writers reach with one map lookup per change; a store nobody
// watches costs them an atomic load per batch. Publishing never blocks: a
// watcher that does not keep up is coalesced or dropped (see WatchOptions).
// Whether a replica may still serve its watches is checked once per
// partition for all of them (see check). The zero value is ready to use.
type Hub struct {
	watching atomic.Int64 // feeds subscribed, for the writers' fast path

	mu     sync.RWMutex
	stores map[string]int // feeds per store
	subs   map[subKey][]*feed
	parts  map[partKey]*partWatches
	// checking is set while the check goroutine runs.
	checking bool
}

type partKey struct {
	store     string
	partition int32
}

// partWatches are the feeds of one local store partition and the replica
// they are checked against: the one the latest watch found, which
// describes the partition as it is held here now.
type partWatches struct {
	r     Replica
	feeds map[*feed]struct{}
	// ranges are the feeds of range, prefix and window watches, which
	// every change of the partition is matched against.
	ranges []*feed
}

type subKey struct {
	store     string
	partition int32
	key       string
}

// HasWatchers reports whether any watch is subscribed, at the cost of one
// atomic load.
func (h *Hub) HasWatchers() bool { return h.watching.Load() > 0 }

// Watching reports whether any watch follows a key of store. Writers call
// it before building the changes of a batch.
func (h *Hub) Watching(store string) bool {
	if h.watching.Load() == 0 {
		return false
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.stores[store] > 0
}

// Publish hands the changes of one store partition, in changelog order, to
// the watches of their keys and of the ranges holding them. It must be
// called once the changes are in the replica's store and its position
// (ReplicaInfo.Position) is past them. The replica is asked about itself
// once for the whole batch, for the updates' provenance.
func (h *Hub) Publish(store string, partition int32, changes []Change) {
	if h.watching.Load() == 0 {
		return
	}
	type hit struct {
		f *feed
		c Change
	}
	var hits []hit
	var r Replica
	h.mu.RLock()
	if pw := h.parts[partKey{store, partition}]; pw != nil {
		r = pw.r
		for _, c := range changes {
			for _, f := range h.subs[subKey{store, partition, string(c.Key)}] {
				hits = append(hits, hit{f, c})
			}
			for _, f := range pw.ranges {
				if f.holds(c.Key) {
					hits = append(hits, hit{f, c})
				}
			}
		}
	}
	h.mu.RUnlock()
	if len(hits) == 0 || r == nil {
		return
	}
	info := r.Info()
	for _, x := range hits {
		x.f.offer(x.c, &info)
	}
}

func (h *Hub) subscribe(f *feed, r Replica) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = make(map[subKey][]*feed)
		h.stores = make(map[string]int)
		h.parts = make(map[partKey]*partWatches)
	}
	if !f.matched() {
		k := subKey{f.pk.store, f.pk.partition, f.key}
		h.subs[k] = append(h.subs[k], f)
	}
	h.stores[f.pk.store]++
	pw := h.parts[f.pk]
	if pw == nil {
		pw = &partWatches{feeds: make(map[*feed]struct{})}
		h.parts[f.pk] = pw
	}
	if f.matched() {
		pw.ranges = append(pw.ranges, f)
	}
	pw.r = r
	pw.feeds[f] = struct{}{}
	h.watching.Add(1)
	if !h.checking {
		h.checking = true
		go h.check()
	}
}

func (h *Hub) unsubscribe(f *feed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pw := h.parts[f.pk]
	if pw == nil {
		return
	}
	if _, ok := pw.feeds[f]; !ok {
		return
	}
	delete(pw.feeds, f)
	pw.ranges = slices.DeleteFunc(pw.ranges, func(g *feed) bool { return g == f })
	if len(pw.feeds) == 0 {
		delete(h.parts, f.pk)
	}
	h.stores[f.pk.store]--
	h.watching.Add(-1)
	if f.matched() {
		return
	}
	k := subKey{f.pk.store, f.pk.partition, f.key}
	fs := slices.DeleteFunc(h.subs[k], func(g *feed) bool { return g == f })
	if len(fs) == 0 {
		delete(h.subs, k)
	} else {
		h.subs[k] = fs
	}
}

// watchCheckEvery is how often the hub checks that the replicas watched
// may still serve their watches.
const watchCheckEvery = 200 * time.Millisecond

// check runs while any watch is subscribed: every watchCheckEvery it asks
// each watched partition's replica about itself once, and fails the feeds
// whose bound it no longer meets, or all of them when the replica closed
// or changed hands (its position went away). One look per partition, not
// per watch, keeps thousands of watches from weighing on the replica's
// bookkeeping, which stream threads share.
func (h *Hub) check() {
	t := time.NewTicker(watchCheckEvery)
	defer t.Stop()
	type look struct {
		pk    partKey
		r     Replica
		feeds []*feed
	}
	for range t.C {
		h.mu.Lock()
		if len(h.parts) == 0 {
			h.checking = false
			h.mu.Unlock()
			return
		}
		looks := make([]look, 0, len(h.parts))
		for pk, pw := range h.parts {
			l := look{pk: pk, r: pw.r, feeds: make([]*feed, 0, len(pw.feeds))}
			for f := range pw.feeds {
				l.feeds = append(l.feeds, f)
			}
			looks = append(looks, l)
		}
		h.mu.Unlock()
		for _, l := range looks {
			info := l.r.Info()
			for _, f := range l.feeds {
				if info.Position < 0 {
					f.failWith(fmt.Errorf("%w: store %q partition %d closed or moved", ErrNotHostedHere, l.pk.store, l.pk.partition))
				} else if err := f.bound.Check(info); err != nil {
					f.failWith(err)
				}
			}
		}
	}
}

// buffered is a change waiting for its reader, with what the replica said
// about itself when it was published.
type buffered struct {
	c    Change
	info *ReplicaInfo
}

// feed is one watch's buffer between the writers and its reader.
type feed struct {
	pk partKey
	// key is the key a key or window watch follows; rng the keys a
	// range watch follows, win the windows a window watch follows (both
	// nil for a key watch).
	key string
	rng *KeyRange
	win *windowSel

	limit    int
	coalesce bool
	bound    Staleness

	mu  sync.Mutex
	buf []buffered
	// skipped is set when changes were dropped from buf for a slow
	// reader; the next change delivered says so.
	skipped bool
	// slow is set when the buffer overflowed and the watch does not
	// coalesce: it ends with ErrWatcherTooSlow.
	slow bool
	// failed is why the replica may no longer serve the watch (see
	// Hub.check).
	failed error
	notify chan struct{}
}

// matched reports whether the feed's changes are found by matching every
// change of its partition rather than by looking its key up.
func (f *feed) matched() bool { return f.rng != nil || f.win != nil }

// holds reports whether a matched feed follows the changelog key k.
func (f *feed) holds(k []byte) bool {
	if f.win != nil {
		return f.win.holds(k)
	}
	return f.rng.Contains(k)
}

func newFeed(pk partKey, key []byte, rng *KeyRange, opts WatchOptions) *feed {
	limit := opts.Buffer
	if limit <= 0 {
		limit = DefaultWatchBuffer
	}
	return &feed{pk: pk, key: string(key), rng: rng, limit: limit, coalesce: opts.Coalesce, bound: opts.Staleness, notify: make(chan struct{}, 1)}
}

func (f *feed) failWith(err error) {
	f.mu.Lock()
	if f.failed == nil {
		f.failed = err
	}
	f.mu.Unlock()
	select {
	case f.notify <- struct{}{}:
	default:
	}
}

func (f *feed) offer(c Change, info *ReplicaInfo) {
	f.mu.Lock()
	switch {
	case f.slow:
	case len(f.buf) < f.limit:
		f.buf = append(f.buf, buffered{c, info})
	case f.coalesce:
		// The newest change of a key supersedes every buffered one of
		// it. A range whose reader is behind on more keys than the
		// buffer holds cannot be coalesced any further.
		f.buf = latestPerKey(append(f.buf, buffered{c, info}))
		f.skipped = true
		if len(f.buf) > f.limit {
			f.slow = true
			f.buf = nil
		}
	default:
		f.slow = true
		f.buf = nil
	}
	f.mu.Unlock()
	select {
	case f.notify <- struct{}{}:
	default:
	}
}

// latestPerKey keeps the last change of each key in buf, in the order of
// those changes, reusing buf's array.
func latestPerKey(buf []buffered) []buffered {
	seen := make(map[string]struct{}, len(buf))
	keep := len(buf)
	for i := len(buf) - 1; i >= 0; i-- {
		k := string(buf[i].c.Key)
		if _, ok := seen[k]; ok {
			continue
		}
		seen[k] = struct{}{}
		keep--
		buf[keep] = buf[i]
	}
	n := copy(buf, buf[keep:])
	clear(buf[n:])
	return buf[:n]
}

// take empties the buffer.
func (f *feed) take() (changes []buffered, skipped, slow bool, failed error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	changes, skipped, slow, failed = f.buf, f.skipped, f.slow, f.failed
	f.buf, f.skipped = nil, false
	return changes, skipped, slow, failed
}

// ErrWatcherTooSlow ends a watch whose reader fell further behind than its
// buffer holds, when it did not ask for coalescing. The *WatchEndedError
// carrying it says where to resume.
var ErrWatcherTooSlow = errors.New("iq: watcher too slow: its buffer overflowed")

// WatchEndedError ends a watch that cannot go on where it is served: the
// replica moved away or fell outside the staleness bound, or the reader was
// too slow. Resume is the position of the last update delivered (of the
// start position when none was): a watch of the same key from Resume, on
// any replica, goes on without a gap or a duplicate.
type WatchEndedError struct {
	Store     string
	Partition int32
	Host      string
	Resume    int64
	// Range is where a range watch resumes (Client.WatchRange): every
	// partition's position, Partition's being Resume.
	Range RangeResume
	Err   error
}

func (e *WatchEndedError) Error() string {
	return fmt.Sprintf("iq: watch of store %q partition %d ended%s (resume from position %d): %v", e.Store, e.Partition, onHost(e.Host), e.Resume, e.Err)
}

func (e *WatchEndedError) Unwrap() error { return e.Err }

// Start positions of a watch (WatchOptions.From) other than a position.
const (
	// FromStart delivers every change the changelog holds.
	FromStart int64 = -1
	// FromNow starts at the serving replica's position: the first
	// change delivered is the first written after the watch began.
	FromNow int64 = -2
)

// DefaultWatchBuffer is the number of changes a watch buffers for a reader
// that is not waiting, when WatchOptions leaves Buffer 0.
const DefaultWatchBuffer = 1024

// WatchOptions say where a watch starts, which replicas may serve it and
// what happens to a reader that does not keep up.
type WatchOptions struct {
	// Staleness bounds the replicas that may serve the watch; a replica
	// that falls outside it ends the watch (a *WatchEndedError wrapping
	// the *StaleError). The zero value is ActiveOnly.
	Staleness Staleness
	// From is the position to start after: every change at a position
	// greater than From is delivered. FromStart delivers the changelog's
	// every change, FromNow starts at the serving replica's position. A
	// watch that ended resumes from its WatchEndedError.Resume (or
	// Watch.Resume).
	From int64
	// Current, with From FromNow, delivers the key's current value
	// first (an Update with Current set).
	Current bool
	// Buffer is how many changes wait for a reader before the watch
	// coalesces or ends; 0 is DefaultWatchBuffer.
	Buffer int
	// Coalesce keeps a slow watch going by skipping to the key's latest
	// change (delivered with Coalesced set) instead of ending it with
	// ErrWatcherTooSlow.
	Coalesce bool
	// Prefer is how a routing Client chooses the serving replica.
	Prefer Preference
}

// Update is one change delivered by a watch.
type Update struct {
	Key []byte
	// Value is the key's value after the change; nil when Deleted. From
	// a RemoteWatch, it is the JSON the server rendered.
	Value   []byte
	Deleted bool
	// Timestamp is the value's timestamp as the store keeps it beside
	// the value, else the changelog record's, in milliseconds.
	Timestamp int64
	// Position is the changelog offset of the change's record; for a
	// Current update, the offset before the serving replica's position,
	// through which the value reflects every change.
	Position int64
	// Current marks the value the replica held when the watch started
	// (WatchOptions.Current), not a change.
	Current bool
	// Window is the window a window watch's update is of (Key is the
	// record key); nil for other watches.
	Window *WatchedWindow
	// Coalesced is set when changes of the key before this one were
	// skipped because the reader was slow (WatchOptions.Coalesce).
	Coalesced bool
	// Truncated is set when the changelog no longer held some of the
	// records between the previous update (or the start position) and
	// this one: compaction or retention removed them before they could
	// be read back.
	Truncated bool
	// Provenance is the serving replica as it described itself when the
	// update was delivered.
	Provenance Provenance
	// json is set when Value is already the JSON a server rendered (an
	// update received over HTTP).
	json bool
}

// WatchBackend is what a Backend offers for watches.
type WatchBackend interface {
	// Hub returns the instance's hub, which its replicas publish to.
	Hub() *Hub
	// ReadChangelog reads back the committed changes of the keys match
	// accepts in the changelog of a store partition at positions from
	// (inclusive) to to (exclusive), in order, and the log start offset
	// it found: changes before it are gone.
	ReadChangelog(ctx context.Context, store string, partition int32, match func(key []byte) bool, from, to int64) (changes []Change, logStart int64, err error)
}

// Watch is a live query of one key, or of the keys of a range in one
// partition. Next is called from one goroutine at a time; Close from any.
type Watch struct {
	q         *Querier
	hub       *Hub
	f         *feed
	r         Replica
	timestamp bool

	pending []Update
	last    int64 // position of the last update delivered, or the start
	// truncated and coalesced mark the next update delivered (see
	// Update).
	truncated, coalesced bool
	closeOnce            sync.Once
	ended                error
}

// WatchBytes watches a serialized key of a key-value store on the local
// replica of its partition. It fails as GetBytes does when that replica
// cannot serve within the bound, and with a *BehindError when a From
// position is at or past the replica's position (the changes after it have
// not reached the replica yet).
func (q *Querier) WatchBytes(ctx context.Context, store string, key []byte, opts WatchOptions) (*Watch, error) {
	wb, _, err := q.watchable(store, KindKeyValue)
	if err != nil {
		return nil, err
	}
	p, err := q.b.KeyPartition(store, key)
	if err != nil {
		return nil, err
	}
	return q.watch(ctx, wb, newFeed(partKey{store, p}, key, nil, opts), opts)
}

// watchable checks that store is of the kind a watch follows, want, and
// can be watched here.
func (q *Querier) watchable(store string, want StoreKind) (WatchBackend, StoreLayout, error) {
	wb, ok := q.b.(WatchBackend)
	if !ok {
		return nil, StoreLayout{}, fmt.Errorf("%w: this backend serves no watches", ErrInvalidQuery)
	}
	l, err := q.watchKind(store, want)
	return wb, l, err
}

// watchKind checks that store is of the kind a watch follows, want, and
// says which watch follows it if another does.
func (q *Querier) watchKind(store string, want StoreKind) (StoreLayout, error) {
	l, err := q.layout(store)
	if err != nil || l.Kind == want {
		return l, err
	}
	switch l.Kind {
	case KindKeyValue:
		return l, invalidf("store %q is a key-value store, not a %s store: watch it by key, range or prefix", store, want)
	case KindWindow:
		return l, invalidf("store %q is a window store, not a %s store: watch a key's windows (WatchWindowBytes, /keys/{key}/windows/watch)", store, want)
	}
	return l, invalidf("store %q is a %s store: watches follow key-value and window stores only", store, l.Kind)
}

// watch starts the watch of f's keys on the local replica of its
// partition.
func (q *Querier) watch(ctx context.Context, wb WatchBackend, f *feed, opts WatchOptions) (*Watch, error) {
	timestamped, err := q.timestamped(f.pk.store)
	if err != nil {
		return nil, err
	}
	o := queryOptions{bound: opts.Staleness}
	r, info, err := q.replica(f.pk.store, f.pk.partition, &o)
	if err != nil {
		return nil, err
	}
	if info.Position < 0 {
		return nil, fmt.Errorf("%w: store %q partition %d is rebuilding and has no position to watch from", ErrRebalancing, f.pk.store, f.pk.partition)
	}
	w := &Watch{q: q, hub: wb.Hub(), f: f, r: r, timestamp: timestamped}
	// Subscribed before the position is read: a change the subscription
	// misses is one whose replica position was already past it, so the
	// read back below covers it.
	w.hub.subscribe(w.f, r)
	if err := w.start(ctx, wb, opts); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// match reports whether the watch follows key.
func (w *Watch) match(key []byte) bool {
	if w.f.matched() {
		return w.f.holds(key)
	}
	return string(key) == w.f.key
}

func (w *Watch) start(ctx context.Context, wb WatchBackend, opts WatchOptions) error {
	store, part := w.f.pk.store, w.f.pk.partition
	if opts.From == FromNow {
		if !opts.Current {
			w.last = w.r.Info().Position - 1
			return nil
		}
		// The values and the position they reflect are read together:
		// a commit between the two reads makes them disagree, and the
		// read is taken again.
		for {
			before := w.r.Info()
			current, err := w.current()
			if err != nil {
				return movedErr(store, part, err)
			}
			after := w.r.Info()
			if after.Position != before.Position {
				continue
			}
			w.last = after.Position - 1
			for _, c := range current {
				found := c.Value != nil
				c.Position = w.last
				u := w.update(c, after)
				u.Current, u.Deleted = true, !found
				w.pending = append(w.pending, u)
			}
			return nil
		}
	}
	if opts.From < FromStart {
		return invalidf("watch from position %d: want a position, FromStart or FromNow", opts.From)
	}
	w.last = opts.From
	pos := w.r.Info().Position
	if w.last >= pos {
		return &BehindError{Store: store, Partition: part, Host: w.q.b.Self(), Role: w.r.Info().Role, Position: pos, MinPosition: w.last + 1}
	}
	if w.last+1 == pos {
		return nil
	}
	changes, logStart, err := wb.ReadChangelog(ctx, store, part, w.match, w.last+1, pos)
	if err != nil {
		return fmt.Errorf("iq: watch of store %q partition %d: reading back the changelog from %d: %w", store, part, w.last+1, err)
	}
	w.truncated = logStart > w.last+1
	info := w.r.Info()
	for _, c := range changes {
		w.pending = append(w.pending, w.update(c, info))
	}
	return nil
}

// current reads what the replica holds of the watched keys: the key's
// value (nil when absent), or every entry of the range.
func (w *Watch) current() ([]Change, error) {
	s := w.r.Store()
	if w.f.win != nil {
		return w.f.win.current(s)
	}
	if w.f.rng == nil {
		key := []byte(w.f.key)
		v, found, err := s.Get(key)
		if err != nil {
			return nil, err
		}
		if !found {
			v = nil
		}
		return []Change{{Key: key, Value: v}}, nil
	}
	from, to := w.f.rng.bounds()
	it, err := s.Range(from, to)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []Change
	for it.Next() {
		out = append(out, Change{Key: slices.Clone(it.Key()), Value: slices.Clone(it.Value())})
	}
	return out, it.Err()
}

// update describes a change as delivered from a replica that said info.
func (w *Watch) update(c Change, info ReplicaInfo) Update {
	v, ts := splitValue(c.Value, w.timestamp)
	if !w.timestamp || ts == 0 {
		ts = c.Timestamp
	}
	u := Update{Key: c.Key, Value: v, Deleted: c.Value == nil, Timestamp: ts, Position: c.Position,
		Provenance: provenanceOf(w.q.b.Self(), w.f.pk.partition, info)}
	if w.f.win != nil {
		u.Key, u.Window = []byte(w.f.key), w.f.win.window(c.Key)
	}
	return u
}

// Next returns the next update, waiting for it as long as ctx allows. A
// watch that cannot go on returns a *WatchEndedError, and so does every
// later call.
func (w *Watch) Next(ctx context.Context) (Update, error) {
	for {
		if w.ended != nil {
			return Update{}, w.ended
		}
		for len(w.pending) > 0 {
			u := w.pending[0]
			w.pending = w.pending[1:]
			if u.Position <= w.last && !u.Current {
				continue // read back and delivered live both
			}
			u.Truncated, u.Coalesced = w.truncated, w.coalesced
			w.truncated, w.coalesced = false, false
			w.last = u.Position
			return u, nil
		}
		changes, skipped, slow, failed := w.f.take()
		if slow {
			return Update{}, w.end(ErrWatcherTooSlow)
		}
		w.coalesced = w.coalesced || skipped
		if len(changes) > 0 {
			for _, b := range changes {
				w.pending = append(w.pending, w.update(b.c, *b.info))
			}
			continue
		}
		if failed != nil {
			var se *StaleError
			if errors.As(failed, &se) {
				se.Store, se.Partition, se.Host = w.f.pk.store, w.f.pk.partition, w.q.b.Self()
			}
			return Update{}, w.end(failed)
		}
		select {
		case <-ctx.Done():
			return Update{}, ctx.Err()
		case <-w.f.notify:
		}
	}
}

func (w *Watch) end(err error) error {
	w.ended = &WatchEndedError{Store: w.f.pk.store, Partition: w.f.pk.partition, Host: w.q.b.Self(), Resume: w.last, Err: err}
	w.Close()
	return w.ended
}

// Close ends the watch and frees its subscription.
func (w *Watch) Close() {
	w.closeOnce.Do(func() { w.hub.unsubscribe(w.f) })
}

// Resume returns the position to resume the watch from elsewhere: that of
// the last update delivered, or the start position before any was.
func (w *Watch) Resume() int64 { return w.last }

// Partition returns the partition the watch follows.
func (w *Watch) Partition() int32 { return w.f.pk.partition }
