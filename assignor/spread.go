package assignor

import (
	"cmp"
	"container/heap"
	"slices"

	"github.com/eddystreams/eddy/task"
)

// bounds returns per-bin load limits for spreading total items over bins
// with the given capacities, where no bin can take more than limit items.
// With λ the smallest level at which the bins can hold them all, bin b may
// hold between min(⌈λ·caps[b]⌉, limit) and min(⌊λ·caps[b]⌋+1, limit). Any
// spread within the limits is one a greedy spread that always feeds the bin
// with the least load per capacity could end in: every bin is within one
// item of its proportional share at level λ, so every thread is within one
// item of every other thread, and a bin of small capacity gets an item
// before a big one gets two more than its share.
func bounds(total int, caps []int, limit int) (lo, hi []int) {
	n := len(caps)
	lo, hi = make([]int, n), make([]int, n)
	if total <= 0 || n == 0 || limit <= 0 {
		return lo, hi
	}
	// room(λ) = Σ min(⌊λ·cap⌋+1, limit) steps up by one at each λ = m/cap
	// where the bin is not yet at its limit; walk those steps in order.
	room := n
	num, den := 0, 1 // λ = num/den
	h := &levelHeap{caps: caps}
	if limit > 1 {
		for b := range caps {
			h.items = append(h.items, level{m: 1, bin: b})
		}
		heap.Init(h)
	}
	for room < total && h.Len() > 0 {
		top := h.items[0]
		num, den = top.m, caps[top.bin]
		// Every bin whose step falls at this same level steps now.
		for h.Len() > 0 && h.items[0].m*den == num*caps[h.items[0].bin] {
			l := heap.Pop(h).(level)
			room++
			if l.m+1 < limit {
				heap.Push(h, level{m: l.m + 1, bin: l.bin})
			}
		}
	}
	for b, c := range caps {
		lo[b] = min((num*c+den-1)/den, limit)
		hi[b] = min(num*c/den+1, limit)
	}
	return lo, hi
}

// loadBounds is bounds for items added to bins that already hold base
// (with no limit per bin): the lowest level λ at which max(base, ⌊λ·cap⌋+1)
// summed over the bins holds the total, with lo = max(base, ⌈λ·cap⌉) and
// hi = max(base, ⌊λ·cap⌋+1). A bin whose base alone is above the level
// takes no item; every bin is then at λ·cap or above, and one that takes an
// item at most at λ·cap+1.
func loadBounds(items int, caps, base []int) (lo, hi []int) {
	num, den := loadLevel(items, caps, base)
	return limitsAt(num, den, false, caps, base)
}

// loadLevel returns loadBounds' level λ as num/den.
func loadLevel(items int, caps, base []int) (num, den int) {
	total, room := items, 0
	h := &levelHeap{caps: caps}
	for b := range caps {
		total += base[b]
		room += max(base[b], 1)
		// A bin's room passes its base at the level base/cap.
		h.items = append(h.items, level{m: max(base[b], 1), bin: b})
	}
	heap.Init(h)
	num, den = 0, 1
	for room < total && h.Len() > 0 {
		top := h.items[0]
		num, den = top.m, caps[top.bin]
		for h.Len() > 0 && h.items[0].m*den == num*caps[h.items[0].bin] {
			l := heap.Pop(h).(level)
			room++
			heap.Push(h, level{m: l.m + 1, bin: l.bin})
		}
	}
	return num, den
}

// limitsAt returns the limits of bins holding base at the level num/den:
// lo = max(base, ⌈λ·cap⌉) and hi = max(base, ⌊λ·cap⌋+1), or, with above,
// both at max(base, ⌊λ·cap⌋+1), the limits at any level just above λ.
func limitsAt(num, den int, above bool, caps, base []int) (lo, hi []int) {
	lo, hi = make([]int, len(caps)), make([]int, len(caps))
	for b, c := range caps {
		hi[b] = max(base[b], num*c/den+1)
		lo[b] = max(base[b], (num*c+den-1)/den)
		if above {
			lo[b] = hi[b]
		}
	}
	return lo, hi
}

// level is the level m/caps[bin] at which a bin's room grows to m+1.
type level struct{ m, bin int }

type levelHeap struct {
	caps  []int
	items []level
}

func (h *levelHeap) Len() int { return len(h.items) }
func (h *levelHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if x, y := a.m*h.caps[b.bin], b.m*h.caps[a.bin]; x != y {
		return x < y
	}
	return a.bin < b.bin
}
func (h *levelHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *levelHeap) Push(x any)    { h.items = append(h.items, x.(level)) }
func (h *levelHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}

// cmpRatio compares a/ca with b/cb.
func cmpRatio(a, ca, b, cb int) int {
	x, y := int64(a)*int64(cb), int64(b)*int64(ca)
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// spreader places items on bins within per-bin load limits, keeping items on
// their previous bins where it can.
type spreader struct {
	caps   []int
	lo, hi []int
	// keepRank orders a bin's previous items: lower ranks stay first.
	// Nil ranks all alike.
	keepRank func(item int) int
	// order is the order in which unplaced items choose a bin; it must
	// list every item, or be nil for the order of interleave.
	order []int
	// affinity ranks bins for an item, lower is better, 0 best; it
	// outweighs load within the limits. Nil treats all bins alike.
	affinity func(item, bin int) int
	// uniform, if set, reports items whose affinity is the same for every
	// bin, which spares asking for each bin.
	uniform func(item int) bool
	// group gives each item's group (its sub-topology), of groups in all;
	// nil for none. Among bins of equal affinity an item goes to the one
	// with the fewest items of its group for its capacity, and a bin
	// over its limit gives up items of its most repeated groups first.
	group  []int
	groups int
	// pref, if set, is how much item i likes bin b, the last criterion
	// for which items a bin keeps and which it gives up. A fixed, pseudo-
	// random preference (rendezvous hashing) makes the items a bin takes
	// in the ones it would give up last, so that an item moved in one
	// round is not the one moved on in the next.
	pref func(item, bin int) uint64
	// moveRank, if set, ranks the items a bin gives up to a bin below its
	// lower limit, lower first, among items alike kept or not.
	moveRank func(item int) int
	// besides, if set, is load each bin carries that the limits do not
	// count (the stateless tasks a client runs, when stateful actives are
	// spread): an item placed anew goes, among bins otherwise as good, to
	// the one with the least load in all, and a bin below its lower limit
	// takes, among items otherwise alike, from the bin with the most load
	// in all, so that fewer of those other loads must move.
	besides []int
}

// spread returns each item's bin and each bin's final load, base included.
// prev gives each item's previous bin or -1. With no bins, every item gets
// -1. It runs five phases, each a method of spreading: previous bins keep
// what their limits allow, the rest is placed, bins below their lower limit
// are raised and bins above their upper limit drained; then items that move
// anyway swap bins where that spreads their groups.
func (s *spreader) spread(prev []int, base []int) (owner, load []int) {
	sp := s.begin(prev, base)
	if len(s.caps) > 0 {
		sp.keep()
		sp.place()
		sp.raiseLow()
		sp.drainHigh()
		if sp.shares != nil {
			sp.swapGroups()
		}
	}
	load = make([]int, len(sp.bins))
	for b := range sp.bins {
		load[b] = sp.bins[b].load
	}
	return sp.owner, load
}

// spreading is the working state of one spread.
type spreading struct {
	*spreader
	prev  []int
	owner []int   // per item: its bin, or -1
	bins  []bin   // per bin, in the spreader's order
	gload []int32 // per group and bin (group·bins+bin); nil without groups
	// shares holds each group's share of a bin (see share) per capacity
	// kind: group·kinds+bin.kind. Nil without groups.
	shares []int
	kinds  int
}

// bin is what one spread knows of one bin. The phases read a bin's limits
// and load together, so they sit in one value.
type bin struct {
	cap    int // capacity, at least 1
	lo, hi int // the spreader's limits
	load   int // base plus the items placed on it
	count  int // the items of this spread placed on it
	kind   int // index of its capacity among the kinds; 0 without groups
}

// share is bin b's share of group g: the group's size times the bin's part
// of the capacity, rounded up.
func (sp *spreading) share(b, g int) int { return sp.shares[g*sp.kinds+sp.bins[b].kind] }

func (s *spreader) begin(prev, base []int) *spreading {
	nb := len(s.caps)
	sp := &spreading{spreader: s, prev: prev, owner: filled(len(prev), -1), bins: make([]bin, nb)}
	for b := range sp.bins {
		sp.bins[b] = bin{cap: s.caps[b], lo: s.lo[b], hi: s.hi[b], load: base[b]}
	}
	if s.group == nil || nb == 0 {
		return sp
	}
	sp.gload = make([]int32, nb*s.groups)
	size := make([]int, s.groups)
	for _, g := range s.group {
		size[g]++
	}
	// A share depends on a bin only through its capacity, and capacities
	// are few, so shares are computed once per group and capacity: placing
	// asks for one per item and bin.
	sum := 0
	var kinds []int
	for b, c := range s.caps {
		sum += c
		k := slices.Index(kinds, c)
		if k < 0 {
			k = len(kinds)
			kinds = append(kinds, c)
		}
		sp.bins[b].kind = k
	}
	sp.kinds = len(kinds)
	sp.shares = make([]int, s.groups*len(kinds))
	for g, n := range size {
		for k, c := range kinds {
			sp.shares[g*len(kinds)+k] = (n*c + sum - 1) / sum
		}
	}
	return sp
}

func (sp *spreading) rankMove(i int) int {
	if sp.moveRank == nil {
		return 0
	}
	return sp.moveRank(i)
}

func (sp *spreading) beside(b int) int {
	if sp.besides == nil {
		return 0
	}
	return sp.besides[b]
}

func (sp *spreading) aff(i, b int) int {
	if sp.affinity == nil {
		return 0
	}
	return sp.affinity(i, b)
}

func (sp *spreading) prefer(i, b int) uint64 {
	if sp.pref == nil {
		return 0
	}
	return sp.pref(i, b)
}

// gl is how many items of item i's group bin b holds.
func (sp *spreading) gl(i, b int) int {
	if sp.gload == nil {
		return 0
	}
	return int(sp.gload[sp.group[i]*len(sp.bins)+b])
}

// perCap is bin b's load plus extra, per capacity.
func (sp *spreading) perCap(b, extra int) ratio {
	return ratio{sp.bins[b].load + extra, sp.bins[b].cap}
}

func (sp *spreading) put(i, b int) {
	sp.owner[i] = b
	sp.bins[b].load++
	sp.bins[b].count++
	if sp.gload != nil {
		sp.gload[sp.group[i]*len(sp.bins)+b]++
	}
}

func (sp *spreading) take(i int) {
	b := sp.owner[i]
	sp.owner[i] = -1
	sp.bins[b].load--
	sp.bins[b].count--
	if sp.gload != nil {
		sp.gload[sp.group[i]*len(sp.bins)+b]--
	}
}

// keep puts items back on their previous bins up to each bin's upper
// limit, in keepKey order. Within a rank, a bin keeps the first item of
// each group before the second of any, so that what it must give up
// spreads groups.
func (sp *spreading) keep() {
	byBin := make([][]int, len(sp.bins))
	for i, b := range sp.prev {
		if b >= 0 && b < len(sp.bins) {
			byBin[b] = append(byBin[b], i)
		}
	}
	seen := map[int]int{}
	nth := make([]int, len(sp.prev))
	for b, items := range byBin {
		if len(items) == 0 {
			continue
		}
		if sp.group != nil {
			clear(seen)
			for _, i := range items {
				nth[i] = seen[sp.group[i]]
				seen[sp.group[i]]++
			}
		}
		key := func(i int) keepKey {
			k := keepKey{nth: nth[i], pref: sp.prefer(i, b)}
			if sp.keepRank != nil {
				k.rank = sp.keepRank(i)
			}
			return k
		}
		slices.SortStableFunc(items, func(x, y int) int { return key(x).compare(key(y)) })
		for _, i := range items {
			if sp.bins[b].load >= sp.bins[b].hi {
				break
			}
			sp.put(i, b)
		}
	}
}

// keepKey ranks a bin's previous items, the one kept first lowest.
type keepKey struct {
	rank int    // keepRank
	nth  int    // how many items of its group the bin had before it
	pref uint64 // the item's preference for the bin, higher kept first
}

func (k keepKey) compare(o keepKey) int {
	if c := cmp.Compare(k.rank, o.rank); c != 0 {
		return c
	}
	if c := cmp.Compare(k.nth, o.nth); c != 0 {
		return c
	}
	return cmp.Compare(o.pref, k.pref)
}

// place puts every unplaced item on a bin: first every item that has a bin
// of the best affinity with room, then the others wherever is best. Doing
// the first kind first keeps the others from filling the bins they need.
func (sp *spreading) place() {
	order := sp.order
	if order == nil {
		order = interleave(len(sp.prev), sp.group)
	}
	for _, onlyBest := range []bool{true, false} {
		for _, i := range order {
			if sp.owner[i] < 0 {
				sp.placeOne(i, onlyBest)
			}
		}
	}
}

// placeOne puts item i on the bin of the lowest placeKey, first on ties;
// with onlyBest, only if that bin has room and the best affinity.
func (sp *spreading) placeOne(i int, onlyBest bool) {
	uniform := sp.uniform != nil && sp.uniform(i)
	sameAff := 0
	if uniform {
		sameAff = sp.aff(i, 0)
		if onlyBest && sameAff != 0 {
			return
		}
	}
	g := -1
	if sp.group != nil {
		g = sp.group[i]
	}
	nb := len(sp.bins)
	best, bestKey := -1, placeKey{}
	// The key is built here rather than by a method: this loop runs for
	// every item and bin of a new group.
	for b := range nb {
		bn := &sp.bins[b]
		k := placeKey{full: bn.load >= bn.hi, aff: sameAff, load: ratio{bn.load + 1 + sp.beside(b), bn.cap}}
		if !uniform {
			k.aff = sp.aff(i, b)
		}
		gn := 0
		if g >= 0 {
			gn = int(sp.gload[g*nb+b])
			k.over = max(0, gn+1-sp.share(b, g))
		}
		k.groupLoad = ratio{gn + 1, bn.cap}
		if best < 0 || k.compare(&bestKey) < 0 {
			best, bestKey = b, k
		}
	}
	if onlyBest && (bestKey.aff != 0 || bestKey.full) {
		return
	}
	sp.put(i, best)
}

// placeKey ranks the bins for an item to go to, the best lowest.
type placeKey struct {
	full      bool  // the bin is at its upper limit
	aff       int   // the item's affinity for the bin
	over      int   // how far the item takes its group above the bin's share
	load      ratio // the bin's load with the item, per capacity
	groupLoad ratio // the bin's items of the group with the item, per capacity
}

func (k *placeKey) compare(o *placeKey) int {
	if c := cmpBool(k.full, o.full); c != 0 {
		return c
	}
	if c := cmp.Compare(k.aff, o.aff); c != 0 {
		return c
	}
	if c := cmp.Compare(k.over, o.over); c != 0 {
		return c
	}
	if c := k.load.compare(o.load); c != 0 {
		return c
	}
	return k.groupLoad.compare(o.groupLoad)
}

// raiseLow raises bins below their lower limit, the least loaded first,
// each time moving to it the item of the lowest raiseKey from a bin above
// its lower limit.
func (sp *spreading) raiseLow() {
	for {
		low := -1
		for b, bn := range sp.bins {
			if bn.load < bn.lo && (low < 0 || sp.perCap(b, 0).compare(sp.perCap(low, 0)) < 0) {
				low = b
			}
		}
		if low < 0 {
			return
		}
		pick, pickKey := -1, raiseKey{}
		for i, b := range sp.owner {
			if b == low || sp.bins[b].load <= sp.bins[b].lo {
				continue
			}
			k := raiseKey{
				within: sp.bins[b].load <= sp.bins[b].hi,
				kept:   b == sp.prev[i],
				rank:   sp.rankMove(i),
				aff:    sp.aff(i, low),
				gain:   sp.gl(i, b) - sp.gl(i, low),
				load:   sp.perCap(b, sp.beside(b)),
				pref:   sp.prefer(i, low),
			}
			if pick < 0 || k.compare(pickKey) < 0 {
				pick, pickKey = i, k
			}
		}
		if pick < 0 {
			return
		}
		sp.take(pick)
		sp.put(pick, low)
	}
}

// raiseKey ranks the items that could move to a bin below its lower limit,
// the one to move lowest.
type raiseKey struct {
	within bool   // its bin is within its upper limit (one over must give items up anyway)
	kept   bool   // it is on its previous bin: moving one that moves anyway changes no more owners
	rank   int    // moveRank
	aff    int    // its affinity for the low bin
	gain   int    // its group's items on its bin less those on the low bin, higher first
	load   ratio  // its bin's load per capacity, besides included, higher first
	pref   uint64 // its preference for the low bin, higher first
}

func (k raiseKey) compare(o raiseKey) int {
	if c := cmpBool(k.within, o.within); c != 0 {
		return c
	}
	if c := cmpBool(k.kept, o.kept); c != 0 {
		return c
	}
	if c := cmp.Compare(k.rank, o.rank); c != 0 {
		return c
	}
	if c := cmp.Compare(k.aff, o.aff); c != 0 {
		return c
	}
	if c := cmp.Compare(o.gain, k.gain); c != 0 {
		return c
	}
	if c := o.load.compare(k.load); c != 0 {
		return c
	}
	return cmp.Compare(o.pref, k.pref)
}

// drainHigh drains bins above their upper limit, which only a heavy base
// causes: the most loaded first, each time moving the item of the lowest
// drainKey to the bin with room that is least loaded with it.
func (sp *spreading) drainHigh() {
	for {
		high := -1
		for b, bn := range sp.bins {
			if bn.load > bn.hi && bn.count > 0 && (high < 0 || sp.perCap(b, 0).compare(sp.perCap(high, 0)) > 0) {
				high = b
			}
		}
		if high < 0 {
			return
		}
		low := -1
		for b, bn := range sp.bins {
			if bn.load < bn.hi && (low < 0 || sp.perCap(b, 1).compare(sp.perCap(low, 1)) < 0) {
				low = b
			}
		}
		if low < 0 {
			return
		}
		pick, pickKey := -1, drainKey{}
		for i, b := range sp.owner {
			if b != high {
				continue
			}
			k := drainKey{aff: sp.aff(i, low), gain: sp.gl(i, high) - sp.gl(i, low), pref: sp.prefer(i, low)}
			if pick < 0 || k.compare(pickKey) < 0 {
				pick, pickKey = i, k
			}
		}
		sp.take(pick)
		sp.put(pick, low)
	}
}

// drainKey ranks the items of a bin above its upper limit, the one to move
// lowest.
type drainKey struct {
	aff  int    // its affinity for the receiving bin
	gain int    // its group's items on its bin less those on the receiving bin, higher first
	pref uint64 // its preference for the receiving bin, higher first
}

func (k drainKey) compare(o drainKey) int {
	if c := cmp.Compare(k.aff, o.aff); c != 0 {
		return c
	}
	if c := cmp.Compare(o.gain, k.gain); c != 0 {
		return c
	}
	return cmp.Compare(o.pref, k.pref)
}

// ratio is a load per capacity, compared exactly.
type ratio struct{ n, d int }

func (r ratio) compare(o ratio) int { return cmpRatio(r.n, r.d, o.n, o.d) }

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// interleave returns the items 0..n-1 in the order in which they should
// choose bins when nothing else ranks them: the first item of every group,
// then the second of every group, and so on, so that bins filling up
// evenly receive every group evenly.
func interleave(n int, group []int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	if group == nil {
		return order
	}
	nth := make([]int, n)
	seen := map[int]int{}
	for i := range n {
		nth[i] = seen[group[i]]
		seen[group[i]]++
	}
	// Item nth of a group of m sits at (2·nth+1)/(2m) of the way through
	// the order, so every part of the order mixes the groups in
	// proportion to their sizes.
	slices.SortStableFunc(order, func(a, b int) int {
		return cmpRatio(2*nth[a]+1, 2*seen[group[a]], 2*nth[b]+1, 2*seen[group[b]])
	})
	return order
}

// rendezvous returns a fixed pseudo-random weight for the pair of a task and
// a client, the same in every round and on every leader.
func rendezvous(t task.ID, client uint64) uint64 {
	x := client ^ (uint64(uint32(t.SubTopology))<<32 | uint64(uint32(t.Partition)))
	// splitmix64's finalizer.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// clientHash is the FNV-1a hash of a client's ID.
func clientHash(id string) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(id) {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return h
}
