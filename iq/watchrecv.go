package iq

// Receiving watches: a watch whose updates are handed to a function
// rather than read with Next. A watch read with Next costs its reader a
// goroutine of its own, woken at every commit that changes its key, and
// that goroutine's stack, which every garbage collection scans: with
// thousands of watches, those wakes and scans are most of what watching
// costs an instance. The key watches of one key that receive share one
// delivery goroutine instead, poked once per hub round however many they
// are; a function that holds that goroutine too long is moved off it (see
// ReceiveBudget), so that it delays the others once and briefly.

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ReceiveBudget is how long the function a watch receives with
// (Watch.Receive) may hold up a round of the goroutine its key's receiving
// watches share, in one call or several, before the watch is moved off it
// to a goroutine of its own: the other watches of the key then wait at
// most about twice this for it, once.
const ReceiveBudget = 20 * time.Millisecond

// Receive hands the watch's updates to fn, in the order and with the
// guarantees Next has, instead of Next: fn is called with each update and
// a nil error, or once with the error that ended the watch (a
// *WatchEndedError), and then no more. fn returning false closes the
// watch. Receive returns at once, and is called at most once, with no
// Next before or after it; once Close has returned, fn is called no more,
// save a call already under way.
//
// The receiving key watches of one key share one goroutine of the
// instance's, which calls their functions one after the other at each
// commit, so a function should return quickly: one that holds the others
// up beyond ReceiveBudget is moved, with its watch, to a goroutine of its
// own for good. Different watches' functions may run at the same time,
// one watch's never. A range or window watch receives on a goroutine of
// its own.
func (w *Watch) Receive(fn func(Update, error) bool) {
	if w.f.sub == nil {
		go w.receiveAlone(fn)
		return
	}
	w.f.sub.receive(receiver{w, fn})
}

// receiver is a watch that receives, and the function it receives with.
type receiver struct {
	w  *Watch
	fn func(Update, error) bool
}

// receive makes the sub's delivery goroutine deliver w's updates, starting
// the goroutine if none runs.
func (s *keySub) receive(w receiver) {
	s.mu.Lock()
	// A watch closed already has left the sub, or leaves it once mu
	// is free.
	if w.w.f.stopped.Load() {
		s.mu.Unlock()
		return
	}
	s.readers = without(s.readers, &w.w.f)
	r := s.recv
	start := r == nil
	if start {
		r = &receivers{sub: s, notify: make(chan struct{}, 1)}
		s.recv = r
	}
	r.watches = append(slices.Clip(r.watches), w)
	s.mu.Unlock()
	if start {
		go r.run()
	}
	// What reached w before it joined may have poked its feed alone.
	r.poke()
}

// receivers is the delivery goroutine of the receiving watches of one key
// (keySub.recv). A watch whose function holds a round up beyond
// ReceiveBudget is noticed by a timer armed while the round runs (tick),
// which hands the other watches to a new goroutine and leaves the slow one
// to the goroutine running its function.
type receivers struct {
	sub    *keySub
	notify chan struct{}
	// watches are the watches delivered to; guarded by sub.mu, replaced
	// rather than changed in place.
	watches []receiver

	// delivering is the watch the round delivers to now, nil between
	// watches. A move off (tick) swaps it from the watch to nil, which
	// tells the goroutine delivering to it that the watch is all it has
	// left: the goroutine swaps it back to nil itself after each watch,
	// and looks at it after each call of the watch's function.
	delivering atomic.Pointer[Watch]

	mu sync.Mutex
	// busy is set while a round runs; seen is the watch delivered to at
	// the timer's last look.
	busy  bool
	seen  *Watch
	timer *time.Timer
}

func (r *receivers) poke() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// leave stops delivering to the watch of f. Called with sub.mu held.
func (r *receivers) leave(f *feed) {
	r.watches = slices.DeleteFunc(slices.Clone(r.watches), func(v receiver) bool { return &v.w.f == f })
}

// run delivers, at each poke, what each watch holds. It returns when no
// watch is left, or goes on with the one watch moved to it (tick).
func (r *receivers) run() {
	for range r.notify {
		watches := r.round()
		if watches == nil {
			return
		}
		for _, v := range watches {
			if r.deliver(v) {
				v.w.receiveAlone(v.fn)
				return
			}
		}
		r.mu.Lock()
		r.busy, r.seen = false, nil
		r.mu.Unlock()
	}
}

// round starts a round, returning the watches to deliver to, or nil when
// none is left and the goroutine is to end.
func (r *receivers) round() []receiver {
	s := r.sub
	s.mu.Lock()
	watches := r.watches
	if len(watches) == 0 && s.recv == r {
		s.recv = nil
	}
	s.mu.Unlock()
	if len(watches) == 0 {
		return nil
	}
	r.mu.Lock()
	r.busy = true
	if r.timer == nil {
		r.timer = time.AfterFunc(ReceiveBudget, r.tick)
	} else {
		r.timer.Reset(ReceiveBudget)
	}
	r.mu.Unlock()
	return watches
}

// deliver hands v's function what its watch holds now, and reports
// whether the watch was moved to this goroutine, the others to another,
// while it was delivered to.
func (r *receivers) deliver(v receiver) (moved bool) {
	w := v.w
	r.delivering.Store(w)
	// The goroutine was poked: anything appended since w's last take
	// was followed by this poke.
	w.waitFirst = false
	for {
		if w.f.stopped.Load() {
			break
		}
		// An end is handed over although the watch is closed by now:
		// ending closed it.
		u, ok, err := w.poll()
		if !ok || (err == nil && w.f.stopped.Load()) {
			break
		}
		more := v.fn(u, err)
		if err != nil {
			break
		}
		if !more {
			w.Close()
			break
		}
		if r.delivering.Load() != w {
			return true
		}
	}
	return !r.delivering.CompareAndSwap(w, nil)
}

// tick looks at a running round every ReceiveBudget: a watch that was
// delivered to at the previous look too has held the round up beyond its
// budget, in one call of its function or many, and is moved off the
// shared goroutine, which a new goroutine takes over.
func (r *receivers) tick() {
	s := r.sub
	s.mu.Lock()
	defer s.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.busy {
		return
	}
	w := r.delivering.Load()
	if w == nil || w != r.seen || !r.delivering.CompareAndSwap(w, nil) {
		r.seen = w
		r.timer.Reset(ReceiveBudget)
		return
	}
	r.busy, r.seen = false, nil
	// From now on the hub pokes the moved watch's feed itself, unless
	// the watch was closed (its function may close it and go on).
	if slices.ContainsFunc(r.watches, func(v receiver) bool { return v.w == w }) {
		r.watches = slices.DeleteFunc(slices.Clone(r.watches), func(v receiver) bool { return v.w == w })
		s.readers = append(slices.Clip(s.readers), &w.f)
	}
	go r.run()
	r.poke()
}

// receiveAlone delivers w's updates to fn on the calling
// goroutine, waking at its feed's pokes, until the watch ends, is closed
// or fn returns false.
func (w *Watch) receiveAlone(fn func(Update, error) bool) {
	// Taken again at once: pokes before the watch was read here may
	// have gone elsewhere.
	w.waitFirst = false
	for {
		if w.f.stopped.Load() {
			return
		}
		u, ok, err := w.poll()
		if err == nil && w.f.stopped.Load() {
			return
		}
		if !ok {
			<-w.f.notify
			w.waitFirst = false
			continue
		}
		if more := fn(u, err); err != nil || !more {
			w.Close()
			return
		}
	}
}

// poll returns the next update, as Next does but without waiting: ok is
// false when the watch holds none until its feed's next poke. An error is
// returned with ok set.
func (w *Watch) poll() (u Update, ok bool, err error) {
	for {
		for int(w.liveNext) < len(w.live) {
			u := w.live[w.liveNext]
			w.liveNext++
			if u.Position > w.last || u.Current {
				return w.deliver(u), true, nil
			}
		}
		if w.ended == nil && w.waitFirst {
			return Update{}, false, nil
		}
		if err := w.refill(); err != nil {
			return Update{}, true, err
		}
	}
}
