package assignor

// Placing standbys: keeping, filling and balancing them over clients and zones.

import (
	"cmp"
	"container/heap"
	"slices"
)

// assignStandbys gives every stateful task r.k standbys in the target.
func (r *run) assignStandbys() {
	ns, nc := len(r.sf), len(r.clients)
	if nc == 0 {
		return
	}
	for c := range r.clients {
		r.clients[c].replicas = r.clients[c].targetLoad
	}
	for i := range r.sf {
		r.sf[i].holders = append(make([]int, 0, 1+r.k), r.sf[i].target)
	}
	if r.k == 0 {
		return
	}
	lo, hi := bounds(ns*(1+r.k), r.capacities(), ns)

	r.keepStandbys(hi)
	r.fillStandbys(hi)
	r.balanceStandbys(lo, hi)
}

// keepStandbys is the sticky pass: previous standbys, and the previous
// active if the active moved, keep their replica unless tags call for
// another client. Among equally fresh candidates one not over its limit
// keeps it, then the one that was least loaded, so that a replica kept on a
// busy client while another warmed up goes to the warmed client. Clients
// left over their share shed replicas in the balance pass, which moves no
// more of them than it must.
func (r *run) keepStandbys(hi []int) {
	var cands []int
	for i := range r.sf {
		cands = cands[:0]
		cands = append(cands, r.sf[i].prevStandby...)
		if p := r.sf[i].prevActive; p >= 0 && !slices.Contains(cands, p) {
			cands = append(cands, p)
		}
		key := func(c int) keepHolderKey {
			return keepHolderKey{lag: r.lag(i, c), over: r.clients[c].prevLoad > hi[c], load: ratio{r.clients[c].prevLoad, r.clients[c].capacity}, client: c}
		}
		slices.SortFunc(cands, func(a, b int) int { return key(a).compare(key(b)) })
		for len(cands) > 0 && len(r.sf[i].holders) < 1+r.k {
			best := r.maxTagScore(i)
			pick := -1
			for _, c := range cands {
				if !slices.Contains(r.sf[i].holders, c) && r.tagScore(i, c) == best {
					pick = c
					break
				}
			}
			if pick < 0 {
				break
			}
			r.addStandby(i, pick)
		}
	}
}

// keepHolderKey ranks a task's previous holders for keeping its replicas,
// the first kept lowest.
type keepHolderKey struct {
	lag    int64 // the holder's lag on the task
	over   bool  // its previous replicas are above its upper limit
	load   ratio // its previous replicas per capacity
	client int
}

func (k keepHolderKey) compare(o keepHolderKey) int {
	if c := cmp.Compare(k.lag, o.lag); c != 0 {
		return c
	}
	if c := cmpBool(k.over, o.over); c != 0 {
		return c
	}
	if c := k.load.compare(o.load); c != 0 {
		return c
	}
	return cmp.Compare(k.client, o.client)
}

// fillStandbys is the fill pass: tag spread first, then room, then warm
// state, then the least loaded client. A client's tag score depends only on
// its tag values, so clients with the same values form a class, each kept
// in a heap by room and load: the best client for a standby is among the
// classes' best that do not hold the task yet and the clients with state
// for it, which spares scanning every client per standby.
func (r *run) fillStandbys(hi []int) {
	better := func(i, c, pick int) bool {
		if pick < 0 {
			return true
		}
		if x, y := r.tagScore(i, c), r.tagScore(i, pick); x != y {
			return x > y
		}
		if full, pfull := r.clients[c].replicas >= hi[c], r.clients[pick].replicas >= hi[pick]; full != pfull {
			return !full
		}
		if x, y := r.stateRank(i, c), r.stateRank(i, pick); x != y {
			return x < y
		}
		if x := cmpRatio(r.clients[c].replicas+1, r.clients[c].capacity, r.clients[pick].replicas+1, r.clients[pick].capacity); x != 0 {
			return x < 0
		}
		return c < pick
	}
	classes := r.tagClasses(hi)
	var popped []int
	for i := range r.sf {
		for len(r.sf[i].holders) < 1+r.k {
			pick := -1
			for _, h := range classes.heaps {
				popped = popped[:0]
				for h.Len() > 0 && slices.Contains(r.sf[i].holders, h.clients[0]) {
					popped = append(popped, heap.Pop(h).(int))
				}
				if h.Len() > 0 && better(i, h.clients[0], pick) {
					pick = h.clients[0]
				}
				for _, c := range popped {
					heap.Push(h, c)
				}
			}
			for _, cl := range r.sf[i].state {
				if !slices.Contains(r.sf[i].holders, cl.client) && better(i, cl.client, pick) {
					pick = cl.client
				}
			}
			r.addStandby(i, pick)
			classes.fix(pick)
		}
	}
}

// balanceStandbys is the balance pass: greedy choices can leave a client
// over its share with every underloaded client already holding its tasks;
// chains of moves fix that.
func (r *run) balanceStandbys(lo, hi []int) {
	warm := r.warmSinks()
	over := func(c int) bool { return r.clients[c].replicas > hi[c] }
	underHi := func(c int) bool { return r.clients[c].replicas < hi[c] }
	for (warm(underHi) && r.augment(over, underHi, true)) || r.augment(over, underHi, false) {
	}
	aboveLo := func(c int) bool { return r.clients[c].replicas > lo[c] }
	under := func(c int) bool { return r.clients[c].replicas < lo[c] }
	for (warm(under) && r.augment(aboveLo, under, true)) || r.augment(aboveLo, under, false) {
	}
	if len(r.cfg.RackAwareTags) > 1 {
		r.respread(lo, hi)
	}
}

// tagClasses groups clients by their tag values, each group in a heap that
// puts first the client with the most room below hi and then the least
// loaded for its capacity, lowest index on ties.
func (r *run) tagClasses(hi []int) *classHeaps {
	ch := &classHeaps{of: make([]*clientHeap, len(r.clients))}
	pos := make([]int, len(r.clients)) // each client is in one heap
	byClass := make([]*clientHeap, r.classes)
	for c := range r.clients {
		h := byClass[r.clients[c].class]
		if h == nil {
			h = &clientHeap{r: r, hi: hi, pos: pos}
			byClass[r.clients[c].class] = h
			ch.heaps = append(ch.heaps, h)
		}
		h.clients = append(h.clients, c)
		ch.of[c] = h
	}
	for _, h := range ch.heaps {
		for x, c := range h.clients {
			h.pos[c] = x
		}
		heap.Init(h)
	}
	return ch
}

// classHeaps are the clients grouped by tag values, in order of each
// group's lowest client.
type classHeaps struct {
	heaps []*clientHeap
	of    []*clientHeap // per client
}

// fix restores client c's heap after its load changed.
func (ch *classHeaps) fix(c int) { heap.Fix(ch.of[c], ch.of[c].pos[c]) }

type clientHeap struct {
	r       *run
	hi      []int
	clients []int
	pos     []int
}

func (h *clientHeap) Len() int { return len(h.clients) }
func (h *clientHeap) Less(x, y int) bool {
	a, b, r := h.clients[x], h.clients[y], h.r
	if fa, fb := r.clients[a].replicas >= h.hi[a], r.clients[b].replicas >= h.hi[b]; fa != fb {
		return !fa
	}
	if c := cmpRatio(r.clients[a].replicas+1, r.clients[a].capacity, r.clients[b].replicas+1, r.clients[b].capacity); c != 0 {
		return c < 0
	}
	return a < b
}
func (h *clientHeap) Swap(x, y int) {
	h.clients[x], h.clients[y] = h.clients[y], h.clients[x]
	h.pos[h.clients[x]], h.pos[h.clients[y]] = x, y
}
func (h *clientHeap) Push(v any) {
	h.pos[v.(int)] = len(h.clients)
	h.clients = append(h.clients, v.(int))
}
func (h *clientHeap) Pop() any {
	c := h.clients[len(h.clients)-1]
	h.clients = h.clients[:len(h.clients)-1]
	return c
}

// respread re-places whole standby sets where moving one standby at a time
// cannot reach balance. With several tag keys a task's replicas can be
// pinned: no single standby can move without repeating a zone or a rack,
// while its two standbys can trade places with another pair (from zone b
// rack 2 and zone c rack 3 to zone b rack 3 and zone c rack 2). Each
// accepted re-placement keeps every key's spread and strictly lowers the
// total distance of clients from their limits, so the loop ends. Only
// tasks whose re-placement could lower that distance (mayGain) are tried:
// where a key has no more values than a task has replicas, each value's
// clients hold a fixed number of replicas, the limits can be out of reach,
// and trying every task each pass would cost as much as the rest of Assign
// many times over.
func (r *run) respread(lo, hi []int) {
	off := func(c int) int { return max(0, r.clients[c].replicas-hi[c]) + max(0, lo[c]-r.clients[c].replicas) }
	pinned := r.pinnedKey()
	budget := exchangeBudget
	for {
		total := 0
		for c := range r.clients {
			total += off(c)
		}
		if total == 0 {
			return
		}
		room := r.roomByValue(lo, hi, pinned)
		if room.settled() {
			return
		}
		improved := false
		for i := range r.sf {
			if room.mayGain(i, lo, hi) && r.replaceStandbys(i, lo, hi, off) {
				improved = true
			}
		}
		if !improved && !r.exchange(lo, hi, &budget) {
			return
		}
	}
}

// pinnedKey returns a tag key with exactly as many values in the group as a
// task has replicas, or -1. Every task whose replicas span all of that key's
// values holds one replica on each value, and keeps doing so through any
// re-placement that keeps the spread.
func (r *run) pinnedKey() int {
	for j := range r.cfg.RackAwareTags {
		var seen []int
		for _, members := range r.classMembers {
			if v := r.clients[members[0]].tags[j]; !slices.Contains(seen, v) {
				seen = append(seen, v)
			}
		}
		if len(seen) == 1+r.k {
			return j
		}
	}
	return -1
}

// valueRoom counts the clients below and above their lower and their
// upper limits, per value of the pinned key (all in one count without
// one).
type valueRoom struct {
	r                *run
	pinned           int
	belowLo, belowHi map[int]int
	aboveLo, aboveHi map[int]int
}

func (r *run) roomByValue(lo, hi []int, pinned int) valueRoom {
	vr := valueRoom{r: r, pinned: pinned,
		belowLo: map[int]int{}, belowHi: map[int]int{}, aboveLo: map[int]int{}, aboveHi: map[int]int{}}
	for c := range r.clients {
		v, n := vr.value(c), r.clients[c].replicas
		switch {
		case n < lo[c]:
			vr.belowLo[v]++
		case n > lo[c]:
			vr.aboveLo[v]++
		}
		switch {
		case n < hi[c]:
			vr.belowHi[v]++
		case n > hi[c]:
			vr.aboveHi[v]++
		}
	}
	return vr
}

// settled reports that no re-placement, nor any chain of them, can lower
// the clients' distance from their limits: every task's replicas span every
// value of the pinned key, so each value's clients keep the replicas they
// hold between them, and within no value does a client above a limit face
// one below it. The distance of each value's clients is then the least
// their total allows.
func (vr valueRoom) settled() bool {
	if vr.pinned < 0 {
		return false
	}
	for v := range vr.aboveHi {
		if vr.belowHi[v] > 0 {
			return false
		}
	}
	for v := range vr.aboveLo {
		if vr.belowLo[v] > 0 {
			return false
		}
	}
	for i := range vr.r.sf {
		if vr.r.spreadOf(vr.r.sf[i].holders)[vr.pinned] != len(vr.r.sf[i].holders) {
			return false
		}
	}
	return true
}

func (vr valueRoom) value(c int) int {
	if vr.pinned < 0 {
		return 0
	}
	return vr.r.clients[c].tags[vr.pinned]
}

// mayGain reports whether re-placing task i's standbys could lower the
// clients' distance from their limits. A re-placement moves each standby
// that leaves a client x to a client y, and lowers the distance only if
// some such pair does: x above its upper limit and y below it, or x above
// its lower limit and y below that. Where the task's replicas span every
// value of the pinned key, they keep doing so, so y has x's value. Trying
// only those tasks matters where a pinned key fixes how many replicas each
// of its values holds: the limits can then be out of reach, and trying
// every task in every pass would cost many times the rest of Assign.
func (vr valueRoom) mayGain(i int, lo, hi []int) bool {
	r := vr.r
	holders := r.sf[i].holders
	pinnedSet := vr.pinned >= 0 && r.spreadOf(holders)[vr.pinned] == len(holders)
	for _, x := range holders[1:] {
		v := vr.value(x)
		n := r.clients[x].replicas
		// Holders below a limit cannot take the standby: discount them.
		free := func(count map[int]int, limit []int) int {
			if pinnedSet {
				return count[v]
			}
			f := 0
			for _, n := range count {
				f += n
			}
			for _, h := range holders {
				if r.clients[h].replicas < limit[h] {
					f--
				}
			}
			return f
		}
		if (n > hi[x] && free(vr.belowHi, hi) > 0) || (n > lo[x] && free(vr.belowLo, lo) > 0) {
			return true
		}
	}
	return false
}
