package iq

import (
	"slices"
	"sync"
)

// keySub is the subscription the key watches of one key of one partition
// share. The hub appends each change of the key to it once, however many
// watches follow the key, as the update every one of them delivers, and
// pokes each watch once per round; each watch then reads from the shared
// log at its own pace, from where it last stopped (feed.next), and a
// reader that falls further behind than its buffer is coalesced or ended
// when it reads again, as with a buffer of its own.
type keySub struct {
	mu sync.Mutex
	// log[head:] are the updates some watch may still read, oldest
	// first; the one at log[head] has sequence number first. Sequence
	// numbers count the updates appended since the sub was made. An
	// update is shared by the watches reading it and never changed: each
	// delivers a copy.
	log   []*Update
	head  int
	first uint64
	// feeds are the watches sharing the sub; readers are those of them
	// the hub pokes one by one, each read by a goroutine of its own
	// (Next, or a receiver moved off its key's delivery goroutine).
	// Both slices are replaced, never changed in place, so that
	// pokeReaders wakes its readers from a copy taken under mu but
	// without holding it: a reader woken takes mu at once, and would
	// otherwise wait for the wakes of all the others.
	feeds   []*feed
	readers []*feed
	// recv delivers to the watches that receive (Watch.Receive) on one
	// goroutine for all of them, poked once per round; nil while none
	// does.
	recv *receivers
	// round is the hub round that last appended (Hub.deliver), so that
	// the round wakes each sub once.
	round uint64
	// host and timestamped describe the updates as the sub's watches
	// deliver them (see updateOf); they hold for every watch of a key
	// of the instance's hub, so the first one's are taken.
	host        string
	timestamped bool
}

// newKeySub makes the sub of f's key.
func newKeySub(f *feed) *keySub {
	return &keySub{host: f.host, timestamped: f.timestamped}
}

// end is the sequence number the next change appended will have. Called
// with s.mu held.
func (s *keySub) end() uint64 { return s.first + uint64(len(s.log)-s.head) }

// join makes f read the changes appended from now on.
func (s *keySub) join(f *feed) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.sub, f.next = s, s.end()
	s.feeds = append(slices.Clip(s.feeds), f)
	s.readers = append(slices.Clip(s.readers), f)
}

// leave removes f and reports how many watches still share the sub.
func (s *keySub) leave(f *feed) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.feeds = without(s.feeds, f)
	s.readers = without(s.readers, f)
	if s.recv != nil {
		s.recv.leave(f)
	}
	return len(s.feeds)
}

// without returns a copy of feeds without f.
func without(feeds []*feed, f *feed) []*feed {
	return slices.DeleteFunc(slices.Clone(feeds), func(g *feed) bool { return g == f })
}

// add appends a change of partition p for the sub's watches, as the
// replica described itself in info, and reports whether it is the first
// of round, whose end pokes the readers (pokeReaders). The update is made
// here, once for all the watches, rather than by each reader at each
// wake.
func (s *keySub) add(c Change, p int32, info *ReplicaInfo, round uint64) bool {
	u := new(Update)
	*u = updateOf(c, s.host, p, info, s.timestamped)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, u)
	if len(s.log)-s.head >= trimAt {
		s.trim()
	}
	first := s.round != round
	s.round = round
	return first
}

// trimAt is how many changes a sub's log holds before add trims it. Trim
// looks at every reader's place, which the readers keep changing: once per
// change, those looks would cost the hub about as much as waking the
// readers does. What a reader finds behind it is decided when it reads
// (read), however late the log is trimmed.
const trimAt = 8

// trim drops the changes no watch will read: those every watch has read,
// and those beyond the largest buffer, which a watch that far behind
// skips (coalescing to the latest) or never reads (too slow). Called with
// s.mu held.
func (s *keySub) trim() {
	end := s.end()
	low, limit := end, 0
	for _, f := range s.feeds {
		low = min(low, f.next)
		limit = max(limit, f.limit)
	}
	if end-low > uint64(limit) {
		low = end - uint64(limit)
	}
	if low <= s.first {
		return
	}
	drop := int(low - s.first)
	clear(s.log[s.head : s.head+drop])
	s.head += drop
	s.first = low
	// The live changes move back to the start of the array once they
	// are at most half of it, so that a log whose readers keep up
	// reuses one small array.
	if live := len(s.log) - s.head; live <= s.head {
		copy(s.log, s.log[s.head:])
		clear(s.log[live:])
		s.log, s.head = s.log[:live], 0
	}
}

// pokeReaders tells the sub's readers it has changed. Each reader waits
// on its own feed's notify alone, not on a channel of the sub's as well:
// a wait on one channel costs a reader much less than a select, and the
// readers are many. The watches that receive are told with one poke of
// their delivery goroutine. It returns how many goroutines it poked.
func (s *keySub) pokeReaders() int {
	s.mu.Lock()
	readers, recv := s.readers, s.recv
	s.mu.Unlock()
	for _, f := range readers {
		f.poke()
	}
	if recv == nil {
		return len(readers)
	}
	recv.poke()
	return len(readers) + 1
}

// pokeReceivers wakes the delivery goroutine of the watches that receive,
// if any: a failure found by the hub's check reaches them through it.
func (s *keySub) pokeReceivers() {
	s.mu.Lock()
	recv := s.recv
	s.mu.Unlock()
	if recv != nil {
		recv.poke()
	}
}

// read hands f what it has not read yet, copied into spare: every update
// while it is within its buffer, else the latest one (skipped set) when it
// coalesces, else nothing and slow, for good.
func (s *keySub) read(f *feed, spare []*Update) (updates []*Update, skipped, slow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.slow {
		return nil, false, true
	}
	end := s.end()
	behind := end - f.next
	switch {
	case behind == 0:
		return spare[:0], false, false
	case behind > uint64(f.limit) || f.next < s.first:
		f.next = end
		if !f.coalesce {
			f.slow = true
			return nil, false, true
		}
		return append(spare[:0], s.log[len(s.log)-1]), true, false
	}
	from := s.head + int(f.next-s.first)
	f.next = end
	return append(spare[:0], s.log[from:]...), false, false
}
