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
}

// spread returns each item's bin and each bin's final load, base included.
// prev gives each item's previous bin or -1. With no bins, every item gets
// -1.
func (s *spreader) spread(prev []int, base []int) (owner, load []int) {
	n, nb := len(prev), len(s.caps)
	owner = filled(n, -1)
	load = slices.Clone(base)
	if nb == 0 {
		return owner, load
	}
	count := make([]int, nb) // items of this spread per bin
	aff := func(i, b int) int {
		if s.affinity == nil {
			return 0
		}
		return s.affinity(i, b)
	}
	var gload []int32 // per group and bin
	if s.group != nil {
		gload = make([]int32, nb*s.groups)
	}
	pref := func(i, b int) uint64 {
		if s.pref == nil {
			return 0
		}
		return s.pref(i, b)
	}
	gl := func(i, b int) int {
		if gload == nil {
			return 0
		}
		return int(gload[s.group[i]*nb+b])
	}
	put := func(i, b int) {
		owner[i] = b
		load[b]++
		count[b]++
		if gload != nil {
			gload[s.group[i]*nb+b]++
		}
	}
	take := func(i int) {
		b := owner[i]
		owner[i] = -1
		load[b]--
		count[b]--
		if gload != nil {
			gload[s.group[i]*nb+b]--
		}
	}

	// Keep. Within a rank, a bin keeps the first item of each group before
	// the second of any, so that what it must give up spreads groups.
	byBin := make([][]int, nb)
	for i, b := range prev {
		if b >= 0 && b < nb {
			byBin[b] = append(byBin[b], i)
		}
	}
	seen := map[int]int{}
	nth := make([]int, n)
	for b, items := range byBin {
		if len(items) == 0 {
			continue
		}
		if s.group != nil {
			clear(seen)
			for _, i := range items {
				nth[i] = seen[s.group[i]]
				seen[s.group[i]]++
			}
		}
		slices.SortStableFunc(items, func(x, y int) int {
			if s.keepRank != nil {
				if d := s.keepRank(x) - s.keepRank(y); d != 0 {
					return d
				}
			}
			if d := nth[x] - nth[y]; d != 0 {
				return d
			}
			return cmp.Compare(pref(y, b), pref(x, b))
		})
	}
	for b, items := range byBin {
		for _, i := range items {
			if load[b] >= s.hi[b] {
				break
			}
			put(i, b)
		}
	}

	// A bin's share of a group is the group's size times the bin's part of
	// the capacity, rounded up. An item goes to a bin within its group's
	// share before one above it, and among those to the least loaded, so
	// each group spreads while the bins fill evenly.
	var share func(b, g int) int // nil without groups
	if s.group != nil {
		size := make([]int, s.groups)
		for _, g := range s.group {
			size[g]++
		}
		sum := 0
		for _, c := range s.caps {
			sum += c
		}
		share = func(b, g int) int { return (size[g]*s.caps[b] + sum - 1) / sum }
	}

	// Place the rest: first every item that has a bin of the best affinity
	// with room, then the others wherever is best. Doing the first kind
	// first keeps the others from filling the bins they need.
	place := func(i int, onlyBest bool) {
		same, sameAff := s.uniform != nil && s.uniform(i), 0
		if same {
			sameAff = aff(i, 0)
			if onlyBest && sameAff != 0 {
				return
			}
		}
		// The best bin so far and what ranks it, kept to compare each bin
		// against without asking for the best's again.
		best, bestFull, bestAff, bestOver, bestLoad, bestGL := -1, false, 0, 0, 0, 0
		g := -1
		if s.group != nil {
			g = s.group[i]
		}
		for b := range nb {
			a := sameAff
			if !same {
				a = aff(i, b)
			}
			full := load[b] >= s.hi[b]
			gn, ov := 0, 0
			if g >= 0 {
				gn = int(gload[g*nb+b])
				ov = max(0, gn+1-share(b, g))
			}
			if best >= 0 {
				if full != bestFull {
					if full {
						continue
					}
				} else if a != bestAff {
					if a > bestAff {
						continue
					}
				} else if ov != bestOver {
					if ov > bestOver {
						continue
					}
				} else if c := cmpRatio(load[b]+1, s.caps[b], bestLoad+1, s.caps[best]); c != 0 {
					if c > 0 {
						continue
					}
				} else if cmpRatio(gn+1, s.caps[b], bestGL+1, s.caps[best]) >= 0 {
					continue
				}
			}
			best, bestFull, bestAff, bestOver, bestLoad, bestGL = b, full, a, ov, load[b], gn
		}
		if onlyBest && (bestAff != 0 || bestFull) {
			return
		}
		put(i, best)
	}
	order := s.order
	if order == nil {
		order = interleave(n, s.group)
	}
	for _, onlyBest := range []bool{true, false} {
		for _, i := range order {
			if owner[i] < 0 {
				place(i, onlyBest)
			}
		}
	}

	// Raise bins below their lower limit, taking from the fullest bins
	// that are above theirs.
	for {
		low := -1
		for b := range nb {
			if load[b] < s.lo[b] && (low < 0 || cmpRatio(load[b], s.caps[b], load[low], s.caps[low]) < 0) {
				low = b
			}
		}
		if low < 0 {
			break
		}
		pick := -1
		for i, b := range owner {
			if b == low || load[b] <= s.lo[b] {
				continue
			}
			if pick >= 0 {
				pb := owner[pick]
				// A bin over its upper limit must give items up anyway.
				if over, pover := load[b] > s.hi[b], load[pb] > s.hi[pb]; over != pover {
					if !over {
						continue
					}
				} else if a, pa := aff(i, low), aff(pick, low); a != pa {
					if a > pa {
						continue
					}
				} else if d, pd := gl(i, b)-gl(i, low), gl(pick, pb)-gl(pick, low); d != pd {
					if d < pd {
						continue
					}
				} else if c := cmpRatio(load[b], s.caps[b], load[pb], s.caps[pb]); c != 0 {
					if c < 0 {
						continue
					}
				} else if pref(i, low) <= pref(pick, low) {
					continue
				}
			}
			pick = i
		}
		if pick < 0 {
			break
		}
		take(pick)
		put(pick, low)
	}

	// Drain bins above their upper limit, which only a heavy base causes.
	for {
		high := -1
		for b := range nb {
			if load[b] > s.hi[b] && count[b] > 0 && (high < 0 || cmpRatio(load[b], s.caps[b], load[high], s.caps[high]) > 0) {
				high = b
			}
		}
		if high < 0 {
			break
		}
		low := -1
		for b := range nb {
			if load[b] < s.hi[b] && (low < 0 || cmpRatio(load[b]+1, s.caps[b], load[low]+1, s.caps[low]) < 0) {
				low = b
			}
		}
		if low < 0 {
			break
		}
		pick := -1
		for i, b := range owner {
			if b != high {
				continue
			}
			if pick >= 0 {
				if a, pa := aff(i, low), aff(pick, low); a != pa {
					if a > pa {
						continue
					}
				} else if d, pd := gl(i, high)-gl(i, low), gl(pick, high)-gl(pick, low); d != pd {
					if d < pd {
						continue
					}
				} else if pref(i, low) <= pref(pick, low) {
					continue
				}
			}
			pick = i
		}
		take(pick)
		put(pick, low)
	}
	if share != nil {
		s.swapGroups(prev, owner, gload, share, aff)
	}
	return owner, load
}

// swapGroups lowers the groups' excess over their shares by swapping the
// bins of two items that move in this spread anyway (new, or not on their
// previous bin), of different groups, where each is as good on the other's
// bin: the loads stay, no item moves that would have stayed, and each
// swap takes one group of one bin back within its share without taking any
// other above it.
func (s *spreader) swapGroups(prev, owner []int, gload []int32, share func(b, g int) int, aff func(i, b int) int) {
	nb := len(s.caps)
	movers := make([][]int, nb) // per bin, items that move to it
	for i, b := range owner {
		if b >= 0 && prev[i] != b {
			movers[b] = append(movers[b], i)
		}
	}
	at := func(b, g int) int { return g*nb + b }
	overAt := func(b, g int) bool { return int(gload[at(b, g)]) > share(b, g) }
	roomAt := func(b, g int) bool { return int(gload[at(b, g)]) < share(b, g) }
	for b := range nb {
		for x := 0; x < len(movers[b]); x++ {
			i := movers[b][x]
			g := s.group[i]
			if !overAt(b, g) {
				continue
			}
		search:
			for b2 := range nb {
				if b2 == b || !roomAt(b2, g) || aff(i, b2) != aff(i, b) {
					continue
				}
				for y, j := range movers[b2] {
					h := s.group[j]
					if h == g || !roomAt(b, h) || aff(j, b) != aff(j, b2) {
						continue
					}
					owner[i], owner[j] = b2, b
					gload[at(b, g)]--
					gload[at(b2, g)]++
					gload[at(b2, h)]--
					gload[at(b, h)]++
					movers[b][x], movers[b2][y] = j, i
					break search
				}
			}
		}
	}
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
