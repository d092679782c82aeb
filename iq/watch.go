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

	// lateReadBack, set by the HTTP server, leaves a start position's
	// read back of the changelog to finishStart, so that the stream's
	// headers go out first: a long read back would otherwise look like a
	// host that does not answer.
	lateReadBack bool
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
	// be read back. Those records' keys are not known: changes of the
	// watched keys may be missing before this update.
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
	// (inclusive) to to (exclusive), in order, and the offset from which
	// the log held every record of the range: above from when retention
	// or compaction removed records after from, changes of the keys may
	// be missing before it.
	ReadChangelog(ctx context.Context, store string, partition int32, match func(key []byte) bool, from, to int64) (changes []Change, heldFrom int64, err error)
}

// Watch is a live query of one key, or of the keys of a range in one
// partition. Next is called from one goroutine at a time; Close from any.
type Watch struct {
	// The fields Next reads at every wake come first, followed by the
	// feed's, whose own come first: with thousands of watches each woken
	// once per commit, a reader finds its watch out of the processor's
	// caches, and each line it touches costs a miss. Those fields fill
	// the first two lines of the watch, which its size keeps aligned to
	// lines (TestWatchHotFieldsFillTwoLines).
	ended *WatchEndedError
	last  int64 // position of the last update delivered, or the start
	// live are the updates Next last took from the feed, the first
	// liveNext of them delivered. The take reuses their array.
	live     []*Update
	liveNext int32
	// truncated and coalesced mark the next update delivered (see
	// Update).
	truncated, coalesced bool
	// waitFirst is set once Next has taken the feed: until the feed's
	// next poke, it holds nothing Next has not taken.
	waitFirst bool
	// wakeCtx is the context whose end wakes a waiting Next (wakeOn);
	// only Next sets it, so that it compares it without wakeMu.
	wakeCtx context.Context
	// inline is live's array while a take finds at most two updates, as
	// it does for a reader that keeps up.
	inline [2]*Update
	f      feed

	q *Querier
	// matched are the updates a range or window watch's take made last
	// (live points into it), reused by the next.
	matched []Update

	hub *Hub
	r   Replica

	closeOnce sync.Once
	// wakeMu guards the registration that wakes a waiting Next when
	// its context ends (wakeOn), which Close stops.
	// (closed sits in the padding after wakeMu.)
	wakeMu   sync.Mutex
	closed   bool
	stopWake func() bool

	// readBack is the read back of the changelog a watch started with
	// WatchOptions.lateReadBack still owes (finishStart), nil otherwise.
	readBack func(context.Context) error
}

// newWatch makes the watch of the keys its feed follows (see
// feed.init).
func newWatch(pk partKey, key []byte, rng *KeyRange, opts WatchOptions) *Watch {
	w := new(Watch)
	w.f.init(pk, key, rng, opts)
	w.live = w.inline[:0]
	return w
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
	return q.watch(ctx, wb, newWatch(partKey{store, p}, key, nil, opts), opts)
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

// watch starts w, made by newWatch, on the local replica of its
// partition.
func (q *Querier) watch(ctx context.Context, wb WatchBackend, w *Watch, opts WatchOptions) (*Watch, error) {
	f := &w.f
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
	f.host, f.timestamped = q.b.Self(), timestamped
	w.q, w.hub, w.r = q, wb.Hub(), r
	// Subscribed before the position is read: a change the subscription
	// misses is one whose replica position was already past it, so the
	// read back below covers it.
	w.hub.subscribe(f, r)
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
			updates := make([]Update, 0, len(current))
			for _, c := range current {
				found := c.Value != nil
				c.Position = w.last
				u := w.update(c, after)
				u.Current, u.Deleted = true, !found
				updates = append(updates, u)
			}
			w.startWith(updates)
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
	from := w.last + 1
	readBack := func(ctx context.Context) error {
		changes, heldFrom, err := wb.ReadChangelog(ctx, store, part, w.match, from, pos)
		if err != nil {
			return fmt.Errorf("iq: watch of store %q partition %d: reading back the changelog from %d: %w", store, part, from, err)
		}
		w.truncated = heldFrom > from
		info := w.r.Info()
		updates := make([]Update, 0, len(changes))
		for _, c := range changes {
			updates = append(updates, w.update(c, info))
		}
		w.startWith(updates)
		return nil
	}
	if opts.lateReadBack {
		w.readBack = readBack
		return nil
	}
	return readBack(ctx)
}

// finishStart reads back what a watch started with lateReadBack owes, if
// anything: the changes from its start position to where the replica
// stood then, which Next delivers before the live ones. A failed read
// back ends the watch, whose Next then returns the *WatchEndedError, with
// the start position to resume from. Called from Next's goroutine.
func (w *Watch) finishStart(ctx context.Context) {
	if w.readBack == nil {
		return
	}
	rb := w.readBack
	w.readBack = nil
	if err := rb(ctx); err != nil {
		w.end(err)
	}
}

// startWith makes updates, made as the watch started, the first that Next
// delivers, before any it takes from the feed.
func (w *Watch) startWith(updates []Update) {
	for i := range updates {
		w.live = append(w.live, &updates[i])
	}
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

// updateOf describes a change of partition p as the instance host
// delivers it from a replica that said info about itself; timestamped is
// set for a store that keeps each value's timestamp beside it.
func updateOf(c Change, host string, p int32, info *ReplicaInfo, timestamped bool) Update {
	v, ts := splitValue(c.Value, timestamped)
	if !timestamped || ts == 0 {
		ts = c.Timestamp
	}
	return Update{Key: c.Key, Value: v, Deleted: c.Value == nil, Timestamp: ts, Position: c.Position,
		Provenance: provenanceOf(host, p, *info)}
}

// update describes a change as delivered from a replica that said info.
func (w *Watch) update(c Change, info ReplicaInfo) Update {
	u := updateOf(c, w.f.host, w.f.pk.partition, &info, w.f.timestamped)
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
		// The updates taken last are delivered on a path of their
		// own, as short as it can be: a reader woken with an update
		// finds its stack out of the processor's caches too.
		for int(w.liveNext) < len(w.live) {
			u := w.live[w.liveNext]
			w.liveNext++
			// A change read back and delivered live both is
			// delivered once; the current values a watch starts
			// with are at the position it starts after.
			if u.Position > w.last || u.Current {
				return w.deliver(u), nil
			}
		}
		// A parked reader waits here rather than in a call of its
		// own: each collection scans every parked reader's stack,
		// frame by frame.
		if w.ended == nil && w.waitFirst {
			// The feed was taken since the last wake: whatever
			// reached it since was followed by a poke, so a take
			// now would most likely find nothing, at the price of
			// the subscription's lock, which the other readers of
			// the key and the hub contend for.
			if ctx != w.wakeCtx {
				w.wakeOn(ctx)
			}
			if err := ctx.Err(); err != nil {
				return Update{}, err
			}
			<-w.f.notify
		}
		if err := w.refill(); err != nil {
			return Update{}, err
		}
	}
}

// refill makes what the feed holds the updates Next delivers. It returns
// why the watch cannot go on.
func (w *Watch) refill() error {
	if w.ended != nil {
		return w.ended
	}
	var skipped, slow bool
	var failed error
	if w.f.sub != nil {
		w.live, skipped, slow, failed = w.f.takeUpdates(w.live)
	} else {
		skipped, slow, failed = w.takeMatched()
	}
	// A failure found with changes still to deliver is returned by a
	// take after them: its poke is spent.
	w.liveNext, w.waitFirst = 0, failed == nil
	if slow {
		return w.end(ErrWatcherTooSlow)
	}
	w.coalesced = w.coalesced || skipped
	if len(w.live) == 0 && failed != nil {
		var se *StaleError
		if errors.As(failed, &se) {
			se.Store, se.Partition, se.Host = w.f.pk.store, w.f.pk.partition, w.q.b.Self()
		}
		return w.end(failed)
	}
	return nil
}

// takeMatched takes the changes of a range or window watch's feed and
// makes them the updates live points to.
func (w *Watch) takeMatched() (skipped, slow bool, failed error) {
	var changes []buffered
	changes, skipped, slow, failed = w.f.take(w.f.spare)
	w.matched = w.matched[:0]
	for _, b := range changes {
		w.matched = append(w.matched, w.update(b.c, *b.info))
	}
	w.f.spare = changes
	clear(w.live)
	w.live = w.live[:0]
	for i := range w.matched {
		w.live = append(w.live, &w.matched[i])
	}
	return skipped, slow, failed
}

// deliver marks u as the update Next returns.
func (w *Watch) deliver(u *Update) Update {
	d := *u
	d.Truncated, d.Coalesced = w.truncated, w.coalesced
	w.truncated, w.coalesced = false, false
	w.last = d.Position
	return d
}

// wakeOn makes the end of ctx wake a waiting Next (through the feed's
// notify) rather than having Next wait on ctx.Done: thousands of watches
// read under one context would otherwise all lock its channel at each
// wait and each wake. The registration is made once per context, the
// same one being passed to Next after Next; only Next sets wakeCtx, so
// that it compares it without the lock.
func (w *Watch) wakeOn(ctx context.Context) {
	w.wakeMu.Lock()
	defer w.wakeMu.Unlock()
	if w.closed {
		return
	}
	if w.stopWake != nil {
		w.stopWake()
	}
	w.wakeCtx = ctx
	w.stopWake = context.AfterFunc(ctx, w.f.poke)
}

func (w *Watch) end(err error) *WatchEndedError {
	w.ended = &WatchEndedError{Store: w.f.pk.store, Partition: w.f.pk.partition, Host: w.q.b.Self(), Resume: w.last, Err: err}
	w.Close()
	return w.ended
}

// Close ends the watch and frees its subscription.
func (w *Watch) Close() {
	w.closeOnce.Do(func() {
		w.f.stopped.Store(true)
		w.hub.unsubscribe(&w.f)
		// A watch that receives on a goroutine of its own waits there.
		w.f.poke()
		w.wakeMu.Lock()
		defer w.wakeMu.Unlock()
		w.closed = true
		if w.stopWake != nil {
			w.stopWake()
		}
	})
}

// Resume returns the position to resume the watch from elsewhere: that of
// the last update delivered, or the start position before any was.
func (w *Watch) Resume() int64 { return w.last }

// Partition returns the partition the watch follows.
func (w *Watch) Partition() int32 { return w.f.pk.partition }
