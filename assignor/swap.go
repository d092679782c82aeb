package assignor

// swapGroups lowers the groups' excess over their shares by swapping the
// bins of two items that move in this spread anyway (new, or not on their
// previous bin), of different groups, where each is as good on the other's
// bin: the loads stay, no item moves that would have stayed, and each
// swap takes one group of one bin back within its share without taking any
// other above it.
func (sp *spreading) swapGroups() {
	nb := len(sp.bins)
	movers := make([][]int, nb) // per bin, items that move to it
	for i, b := range sp.owner {
		if b >= 0 && sp.prev[i] != b {
			movers[b] = append(movers[b], i)
		}
	}
	for b := range nb {
		for x := 0; x < len(movers[b]); x++ {
			i := movers[b][x]
			if sp.groupAt(b, sp.group[i]) <= sp.share(b, sp.group[i]) {
				continue
			}
		search:
			for b2 := range nb {
				if !sp.canTake(i, b, b2) {
					continue
				}
				for y, j := range movers[b2] {
					if sp.group[j] == sp.group[i] || !sp.canTake(j, b2, b) {
						continue
					}
					sp.exchange(i, j)
					movers[b][x], movers[b2][y] = j, i
					break search
				}
			}
		}
	}
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
