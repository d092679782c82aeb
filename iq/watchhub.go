package iq

// The hub between the writers of an instance's stores and its watches.
// Writers publish from their own paths (a stream thread's commit, a
// changelog reader's batch), so publishing costs them an append to a queue:
// the fan-out to the watches runs on a dispatching goroutine, which asks
// each partition's replica about itself once per round however many
// batches and watches the round holds, and hands each change of a watched
// key once to the subscription its watches share (keySub).

import (
	"fmt"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Hub hands the changes written to the local replicas of an instance to
// the watches that follow them. Watches of one key share one subscription,
// found with one map lookup per change; range, prefix and window watches
// are matched against every change of their partition. A store nobody
// watches costs the writers an atomic load per batch. Publishing never
// blocks: a watcher that does not keep up is coalesced or dropped (see
// WatchOptions). Whether a replica may still serve its watches is checked
// once per partition for all of them (see check). The zero value is ready
// to use.
type Hub struct {
	watching atomic.Int64 // feeds subscribed, for the writers' fast path
	// stores counts the feeds per store; it is replaced, never changed,
	// so that writers read it without a lock.
	stores atomic.Pointer[map[string]int]

	mu    sync.RWMutex
	parts map[partKey]*partWatches
	// checking is set while the check goroutine runs.
	checking bool

	qmu   sync.Mutex
	queue []published
	// dispatching is set while a goroutine empties queue.
	dispatching bool
	// rounds counts the rounds delivered; only the dispatcher (or a
	// test standing in for it) touches it.
	rounds uint64
}

// published is one Publish call waiting for the dispatcher.
type published struct {
	pk      partKey
	changes []Change
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
	// keys are the subscriptions of key watches, by key.
	keys map[string]*keySub
	// ranges are the feeds of range, prefix and window watches, which
	// every change of the partition is matched against.
	ranges []*feed
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
	m := h.stores.Load()
	return m != nil && (*m)[store] > 0
}

// Publish hands the changes of one store partition, in changelog order, to
// the watches of their keys and of the ranges holding them. It must be
// called once the changes are in the replica's store and its position
// (ReplicaInfo.Position) is past them, and the changes must not be
// modified afterwards. It queues them and returns: a watch subscribed
// before the call receives them, in the order of the calls; one
// subscribed later may too, and drops what its start position covers.
func (h *Hub) Publish(store string, partition int32, changes []Change) {
	if h.watching.Load() == 0 || len(changes) == 0 {
		return
	}
	h.qmu.Lock()
	h.queue = append(h.queue, published{partKey{store, partition}, changes})
	start := !h.dispatching
	h.dispatching = true
	h.qmu.Unlock()
	if start {
		go h.dispatch()
	}
}

// dispatch delivers the queued batches, round after round, until the
// queue is empty.
func (h *Hub) dispatch() {
	var spare []published
	for {
		h.qmu.Lock()
		round := h.queue
		if len(round) == 0 {
			h.dispatching = false
			h.qmu.Unlock()
			return
		}
		h.queue = spare
		h.qmu.Unlock()
		h.deliver(round)
		clear(round)
		spare = round[:0]
	}
}

// deliver hands batches to the feeds that follow their changes, with what
// each partition's replica says about itself now (once per partition for
// the updates' provenance, asked after the changes were in its store).
func (h *Hub) deliver(batches []published) {
	type hit struct {
		f    *feed   // a range feed, or nil
		s    *keySub // else the key's subscription
		c    Change
		info int // index in infos
	}
	type partInfo struct {
		pk   partKey
		r    Replica
		info ReplicaInfo
	}
	var hits []hit
	var infos []partInfo
	h.mu.RLock()
	for _, b := range batches {
		pw := h.parts[b.pk]
		if pw == nil {
			continue
		}
		i := slices.IndexFunc(infos, func(pi partInfo) bool { return pi.pk == b.pk })
		if i < 0 {
			i = len(infos)
			infos = append(infos, partInfo{pk: b.pk, r: pw.r})
		}
		for _, c := range b.changes {
			if s := pw.keys[string(c.Key)]; s != nil {
				hits = append(hits, hit{s: s, c: c, info: i})
			}
			for _, f := range pw.ranges {
				if f.holds(c.Key) {
					hits = append(hits, hit{f: f, c: c, info: i})
				}
			}
		}
	}
	h.mu.RUnlock()
	if len(hits) == 0 {
		return
	}
	for i := range infos {
		infos[i].info = infos[i].r.Info()
	}
	h.rounds++
	var woken []*keySub
	for _, x := range hits {
		if x.f != nil {
			x.f.offer(x.c, &infos[x.info].info)
		} else if x.s.add(x.c, infos[x.info].pk.partition, &infos[x.info].info, h.rounds) {
			woken = append(woken, x.s)
		}
	}
	// The readers are let run every readersPerYield wakes, rather than
	// once all are woken: a wake readies a reader on the hub's
	// processor, whose run queue holds 256 goroutines before it spills
	// them to the scheduler's global queue under its lock; and a reader
	// run soon after its wake finds its goroutine and its channel still
	// in the processor's caches, where the hub left them.
	poked := 0
	for _, s := range woken {
		poked += s.pokeReaders()
		if poked >= readersPerYield {
			goruntime.Gosched()
			poked = 0
		}
	}
}

// readersPerYield is how many readers the hub wakes (Hub.deliver) before it
// yields to them: well within a processor's run queue.
const readersPerYield = 128

// countStore adds n to the feeds of store, replacing the map writers read.
func (h *Hub) countStore(store string, n int) {
	next := map[string]int{}
	if m := h.stores.Load(); m != nil {
		for s, k := range *m {
			next[s] = k
		}
	}
	next[store] += n
	if next[store] <= 0 {
		delete(next, store)
	}
	h.stores.Store(&next)
}

func (h *Hub) subscribe(f *feed, r Replica) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.parts == nil {
		h.parts = make(map[partKey]*partWatches)
	}
	pw := h.parts[f.pk]
	if pw == nil {
		pw = &partWatches{feeds: make(map[*feed]struct{}), keys: make(map[string]*keySub)}
		h.parts[f.pk] = pw
	}
	if f.matched() {
		pw.ranges = append(pw.ranges, f)
	} else {
		s := pw.keys[f.key]
		if s == nil {
			s = newKeySub(f)
			pw.keys[f.key] = s
		}
		s.join(f)
	}
	pw.r = r
	pw.feeds[f] = struct{}{}
	h.countStore(f.pk.store, 1)
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
	if f.matched() {
		pw.ranges = slices.DeleteFunc(pw.ranges, func(g *feed) bool { return g == f })
	} else if f.sub.leave(f) == 0 {
		delete(pw.keys, f.key)
	}
	if len(pw.feeds) == 0 {
		delete(h.parts, f.pk)
	}
	h.countStore(f.pk.store, -1)
	h.watching.Add(-1)
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

// feed is one watch's place between the writers and its reader: for a
// key watch, where it stands in the subscription its key's watches share;
// for a range or window watch, a buffer of its own. It lives within its
// Watch.
type feed struct {
	// The fields the hub and the reader touch at every change come
	// first, within one cache line (the watch's second): the feeds of a
	// commit are many and out of the processor's caches by the next.

	// sub is the subscription a key watch shares, set when it
	// subscribes; next is the sequence number of the first change of
	// sub it has not read. next and slow are guarded by sub.mu.
	sub  *keySub
	next uint64
	// notify is signalled when failed is set, when the context of the
	// reader's wait ends, and when there may be changes to take.
	notify chan struct{}
	// failed is why the replica may no longer serve the watch (see
	// Hub.check). It is read at every take, outside mu, so that a key
	// watch's take locks its subscription alone.
	failed   atomic.Pointer[error]
	limit    int
	coalesce bool
	// slow is set when the buffer overflowed and the watch does not
	// coalesce: it ends with ErrWatcherTooSlow.
	slow bool
	// skipped is set when changes were dropped from buf for a slow
	// reader; the next change delivered says so.
	skipped bool
	// stopped is set when the watch is closed, so that a watch that
	// receives (Watch.Receive) has its function called no more. It
	// fills the line's last bytes, read with the others at every
	// delivery.
	stopped atomic.Bool
	// win is the windows a window watch follows, rng the keys a range
	// watch follows (both nil for a key watch); key is the key a key or
	// window watch follows.
	win   *windowSel
	pk    partKey
	rng   *KeyRange
	key   string
	bound Staleness
	// host and timestamped are how the watch describes its updates (see
	// updateOf), for the sub of a key watch to make them.
	host        string
	timestamped bool

	mu  sync.Mutex
	buf []buffered
	// spare is the array of the changes the reader of a range or window
	// watch took last, for the next take to reuse.
	spare []buffered
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

// init makes f the feed of a watch of key, or of the keys of rng, in
// partition pk.
func (f *feed) init(pk partKey, key []byte, rng *KeyRange, opts WatchOptions) {
	f.limit = opts.Buffer
	if f.limit <= 0 {
		f.limit = DefaultWatchBuffer
	}
	f.pk, f.key, f.rng, f.coalesce, f.bound = pk, string(key), rng, opts.Coalesce, opts.Staleness
	f.notify = make(chan struct{}, 1)
}

func (f *feed) failWith(err error) {
	f.failed.CompareAndSwap(nil, &err)
	f.poke()
	if f.sub != nil {
		f.sub.pokeReceivers()
	}
}

// failure returns why the feed failed, nil while it has not.
func (f *feed) failure() error {
	if err := f.failed.Load(); err != nil {
		return *err
	}
	return nil
}

// poke wakes the feed's reader if it waits, or makes its next wait return
// at once.
func (f *feed) poke() {
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
	f.poke()
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

// takeUpdates hands a key watch what it has not read of its key's
// subscription. The reader hands back spare, the updates it took last and
// no longer needs, for the read to reuse.
func (f *feed) takeUpdates(spare []*Update) (updates []*Update, skipped, slow bool, failed error) {
	clear(spare)
	updates, skipped, slow = f.sub.read(f, spare)
	return updates, skipped, slow, f.failure()
}

// take empties the buffer of a range or window watch. The reader hands
// back spare, the changes it took last and no longer needs, for the
// buffer to reuse.
func (f *feed) take(spare []buffered) (changes []buffered, skipped, slow bool, failed error) {
	clear(spare)
	f.mu.Lock()
	defer f.mu.Unlock()
	changes, skipped, slow, failed = f.buf, f.skipped, f.slow, f.failure()
	f.buf, f.skipped = spare[:0], false
	if f.slow {
		f.buf = nil
	}
	return changes, skipped, slow, failed
}
