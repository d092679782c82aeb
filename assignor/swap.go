package assignor

import "cmp"

// swapGroups lowers the groups' excess over their shares by swapping the
// bins of two items that move in this spread anyway (new, or not on their
// previous bin), of different groups, where each is as good on the other's
// bin: the loads stay, no item moves that would have stayed, and each
// swap takes one group of one bin back within its share without taking any
// other above it. For an item whose group is over its share, the first
// swapCandidates swaps found (bins in order, then the movers on each) are
// ranked by swapKey and the lowest is made; ranking every pair would be
// quadratic in the movers of a large group.
func (sp *spreading) swapGroups() {
	movers := make([][]int, len(sp.bins)) // per bin, items that move to it
	for i, b := range sp.owner {
		if b >= 0 && sp.prev[i] != b {
			movers[b] = append(movers[b], i)
		}
	}
	for b := range sp.bins {
		for x := 0; x < len(movers[b]); x++ {
			i := movers[b][x]
			if sp.groupAt(b, sp.group[i]) <= sp.share(b, sp.group[i]) {
				continue
			}
			b2, y, ok := sp.bestSwap(i, movers)
			if !ok {
				continue
			}
			j := movers[b2][y]
			sp.exchange(i, j)
			movers[b][x], movers[b2][y] = j, i
		}
	}
}

// swapCandidates bounds the swaps swapGroups ranks for one item.
const swapCandidates = 8

// bestSwap returns the bin and the position among its movers of the
// partner of the lowest swapKey for item i among the first swapCandidates
// found, or false when there is none.
func (sp *spreading) bestSwap(i int, movers [][]int) (bin, pos int, ok bool) {
	b := sp.owner[i]
	found, best := 0, swapKey{}
	for b2 := range sp.bins {
		if !sp.canTake(i, b, b2) {
			continue
		}
		for y, j := range movers[b2] {
			if sp.group[j] == sp.group[i] || !sp.canTake(j, b2, b) {
				continue
			}
			k := sp.swapKeyOf(i, j)
			if found == 0 || k.compare(best) < 0 {
				bin, pos, best = b2, y, k
			}
			if found++; found == swapCandidates {
				return bin, pos, true
			}
		}
	}
	return bin, pos, found > 0
}

// swapKey ranks the swaps of an item over its group's share with partners
// on other bins, the one to make lowest.
type swapKey struct {
	// relief is 1, or 2 when the partner's group is over its share on
	// the partner's bin too and the swap takes both back, higher first.
	relief int
	// room is how far below their shares the two groups stay on their new
	// bins after the swap, higher first: the swap that spreads them most.
	room int
	// bin and item are the partner's bin and the partner, lower first:
	// the order in which they are found.
	bin, item int
}

func (sp *spreading) swapKeyOf(i, j int) swapKey {
	b, b2 := sp.owner[i], sp.owner[j]
	g, h := sp.group[i], sp.group[j]
	k := swapKey{relief: 1, bin: b2, item: j}
	if sp.groupAt(b2, h) > sp.share(b2, h) {
		k.relief = 2
	}
	k.room = sp.share(b2, g) - sp.groupAt(b2, g) - 1 + sp.share(b, h) - sp.groupAt(b, h) - 1
	return k
}

func (k swapKey) compare(o swapKey) int {
	if c := cmp.Compare(o.relief, k.relief); c != 0 {
		return c
	}
	if c := cmp.Compare(o.room, k.room); c != 0 {
		return c
	}
	if c := cmp.Compare(k.bin, o.bin); c != 0 {
		return c
	}
	return cmp.Compare(k.item, o.item)
}

// groupAt is how many items of group g bin b holds.
func (sp *spreading) groupAt(b, g int) int { return int(sp.gload[g*len(sp.bins)+b]) }

// canTake reports whether item i, on bin from, could go to bin to in a
// swap: to is another bin, as good for i, and still below its share of
// i's group.
func (sp *spreading) canTake(i, from, to int) bool {
	g := sp.group[i]
	return to != from && sp.groupAt(to, g) < sp.share(to, g) && sp.aff(i, to) == sp.aff(i, from)
}

// exchange swaps the bins of items i and j; the bins' loads stay.
func (sp *spreading) exchange(i, j int) {
	b, b2 := sp.owner[i], sp.owner[j]
	nb := len(sp.bins)
	g, h := sp.group[i], sp.group[j]
	sp.owner[i], sp.owner[j] = b2, b
	sp.gload[g*nb+b]--
	sp.gload[g*nb+b2]++
	sp.gload[h*nb+b2]--
	sp.gload[h*nb+b]++
}
