package assignor

// Placing stateless actives: sticky within the balance of total load that
// Kafka Streams reaches, and heading for one final placement through a
// migration.

import "slices"

// assignStatelessActives places stateless tasks so that the total active
// load is balanced as Kafka Streams' high-availability assignor balances
// it, given the stateful actives as they run this round: there is a level
// λ at or below which no client is (n ≥ λ·cap) and above which no client
// holding a stateless task is by more than one task (n ≤ λ·cap+1), which is
// what placing each stateless task on the least loaded client reaches.
// Within that, tasks stay where they ran: the level is the one that lets
// the most of them stay (stickyBounds), and a client below it takes tasks
// from those above.
//
// The final placement is the one balanced against the target's stateful
// loads, computed from where the tasks ran when the target was set (the
// event's first round) and handed on with the target, so that a migration
// heads for one placement: the old clients' tasks that balance lets stay
// end where they started, and a client that joins ends with its share
// taken from the most loaded. While the migration runs, a client that has
// room now and will not later (a joining one whose stateful actives warm
// up) takes stateless tasks and gives them back, to their final clients,
// as its actives arrive; the round that ends the migration puts every
// stateless task on its final client.
func (r *run) assignStatelessActives() {
	if len(r.clients) == 0 {
		return
	}
	prev := make([]int, len(r.sl))
	for i, t := range r.sl {
		prev[i] = t.prev
	}
	if !r.finalsHanded || !r.balancedTotal(r.finals(), r.targetLoad) {
		sp := r.statelessSpreader(prev, r.targetLoad)
		final, _ := sp.spread(prev, r.targetLoad)
		for i, c := range final {
			r.sl[i].final = c
		}
	}
	if !r.followup {
		for i := range r.sl {
			r.sl[i].owner = r.sl[i].final
		}
		return
	}
	r.setStatelessOwners(r.migratingSpreader(prev).spread(prev, r.activeLoad))
}

// statelessSpreader spreads stateless tasks over clients holding base
// stateful actives, sticky within the balance of total load.
func (r *run) statelessSpreader(prev, base []int) *spreader {
	groups := make([]int, len(r.sl))
	for i, t := range r.sl {
		groups[i] = t.group
	}
	kept := make([]int, len(r.clients))
	for _, c := range prev {
		if c >= 0 {
			kept[c]++
		}
	}
	lo, hi := stickyBounds(len(r.sl), r.caps, base, kept)
	return &spreader{
		caps: r.caps, lo: lo, hi: hi,
		keepRank: func(i int) int { return r.offRack(r.sl[i].racks, r.sl[i].prev) },
		affinity: func(i, c int) int { return r.offRack(r.sl[i].racks, c) },
		uniform:  func(i int) bool { return len(r.sl[i].racks) == 0 },
		group:    groups,
		groups:   r.groups,
		pref:     func(i, c int) uint64 { return rendezvous(r.sl[i].id, r.clients[c].hash) },
	}
}

// migratingSpreader is statelessSpreader for a round of a migration, given
// the stateful actives as they run: tasks whose final client has room now
// leave first, then those on their final client, and last those whose final
// client is full (moved now, they would only pass on to another temporary
// client); a task that moves goes to its final client where balance lets
// it, and tasks that moved already in the migration move last.
func (r *run) migratingSpreader(prev []int) *spreader {
	sp := r.statelessSpreader(prev, r.activeLoad)
	held := make([]int, len(r.clients))
	for _, c := range prev {
		if c >= 0 {
			held[c]++
		}
	}
	sp.uniform = nil
	// A task that moved in an earlier round of the migration is given up
	// after those that did not, so that the loans a client must make pass
	// from task to task rather than send one task back and forth.
	moved := func(i int) int {
		if r.sl[i].moved {
			return 0
		}
		return 2
	}
	sp.keepRank = func(i int) int {
		rank := moved(i) + r.offRack(r.sl[i].racks, r.sl[i].prev)
		switch f := r.sl[i].final; {
		case f == r.sl[i].prev:
			rank += 4
		case r.activeLoad[f]+held[f] < sp.hi[f]:
			rank += 8
		}
		return rank
	}
	sp.moveRank = moved
	sp.affinity = func(i, c int) int {
		aff := r.offRack(r.sl[i].racks, c)
		if c != r.sl[i].final {
			aff += 2
		}
		return aff
	}
	return sp
}

func (r *run) setStatelessOwners(owner, _ []int) {
	for i, c := range owner {
		r.sl[i].owner = c
	}
}

// finals returns each stateless task's final client.
func (r *run) finals() []int {
	out := make([]int, len(r.sl))
	for i, t := range r.sl {
		out[i] = t.final
	}
	return out
}

// balancedTotal reports whether owner, each stateless task's client, is a
// placement of them balanced as Kafka Streams balances the total load over
// clients holding base stateful actives: no client holding a stateless task
// is more than one task above the least loaded, per capacity.
func (r *run) balancedTotal(owner, base []int) bool {
	load := slices.Clone(base)
	holds := make([]bool, len(r.clients))
	for _, c := range owner {
		if c < 0 || c >= len(r.clients) {
			return false
		}
		load[c]++
		holds[c] = true
	}
	least := 0
	for c := range r.clients {
		if cmpRatio(load[c], r.caps[c], load[least], r.caps[least]) < 0 {
			least = c
		}
	}
	for c := range r.clients {
		if holds[c] && cmpRatio(load[c]-1, r.caps[c], load[least], r.caps[least]) > 0 {
			return false
		}
	}
	return true
}

// stickyBounds returns limits for items added to bins holding base, of
// which kept[b] are on bin b already, as loadBounds does but at the level
// that lets the most items stay. Any level λ gives limits Kafka Streams'
// balance meets (every bin at λ·cap or above, every bin that takes an item
// at most at λ·cap+1), between loadBounds' level, the lowest, and the
// highest whose lower limits the items can still fill, at most one task
// per thread above it. Bins above their upper limit must give items up
// and bins below their lower limit take them; items not kept fill the
// latter first. Of the levels that move the fewest items, the lowest.
func stickyBounds(items int, caps, base, kept []int) (lo, hi []int) {
	num, den := loadLevel(items, caps, base)
	total, free := items, items
	for b := range caps {
		total += base[b]
		free -= kept[b]
	}
	type candidate struct {
		num, den int
		above    bool
	}
	cands := []candidate{{num, den, false}}
	var seen []int
	for _, c := range caps {
		if slices.Contains(seen, c) {
			continue
		}
		seen = append(seen, c)
		for m := num * c / den; m <= num*c/den+c+1; m++ {
			if cmpRatio(m, c, num, den) >= 0 {
				cands = append(cands, candidate{m, c, false}, candidate{m, c, true})
			}
		}
	}
	slices.SortStableFunc(cands, func(a, b candidate) int {
		if x := cmpRatio(a.num, a.den, b.num, b.den); x != 0 {
			return x
		}
		return cmpBool(a.above, b.above)
	})
	best, bestMoves := -1, 0
	for x, cd := range cands {
		l, h := limitsAt(cd.num, cd.den, cd.above, caps, base)
		sumLo, sumHi, leave, arrive := 0, 0, 0, 0
		for b := range caps {
			sumLo += l[b]
			sumHi += h[b]
			leave += max(0, base[b]+kept[b]-h[b])
			arrive += max(0, l[b]-base[b]-kept[b])
		}
		if sumLo > total || sumHi < total {
			continue
		}
		if moves := max(leave, arrive-free); best < 0 || moves < bestMoves {
			best, bestMoves = x, moves
			lo, hi = l, h
		}
	}
	if best < 0 {
		return loadBounds(items, caps, base)
	}
	return lo, hi
}
