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
// Within that, tasks stay where they ran: at the lowest such level
// (loadBounds), clients above their upper limit give tasks up, clients
// below their lower limit take them, the lost client's first, and the
// rest stay.
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
	if targetLoads := r.targetLoads(); !r.finalsHanded || !r.balancedTotal(r.finals(), targetLoads) {
		sp := r.statelessSpreader(targetLoads)
		final, _ := sp.spread(prev, targetLoads)
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
	activeLoads := r.activeLoads()
	r.setStatelessOwners(r.migratingSpreader(prev, activeLoads).spread(prev, activeLoads))
}

// statelessSpreader spreads stateless tasks over clients holding base
// stateful actives, sticky within the balance of total load.
func (r *run) statelessSpreader(base []int) *spreader {
	groups := make([]int, len(r.sl))
	for i, t := range r.sl {
		groups[i] = t.group
	}
	caps := r.capacities()
	lo, hi := loadBounds(len(r.sl), caps, base)
	return &spreader{
		caps: caps, lo: lo, hi: hi,
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
func (r *run) migratingSpreader(prev, activeLoads []int) *spreader {
	sp := r.statelessSpreader(activeLoads)
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
		case r.clients[f].activeLoad+held[f] < sp.hi[f]:
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
		if cmpRatio(load[c], r.clients[c].capacity, load[least], r.clients[least].capacity) < 0 {
			least = c
		}
	}
	for c := range r.clients {
		if holds[c] && cmpRatio(load[c]-1, r.clients[c].capacity, load[least], r.clients[least].capacity) > 0 {
			return false
		}
	}
	return true
}
