package assignor

// Placing actives: the balanced target of stateful actives, and stateless actives spread by total load.

import "slices"

// spreadStatefulActives computes the balanced target of every stateful
// active.
func (r *run) spreadStatefulActives() {
	ns, nc := len(r.sf), len(r.clients)
	if nc == 0 {
		return
	}
	lo, hi := bounds(ns, r.caps, ns)
	groups := make([]int, ns)
	prev := make([]int, ns)
	for i, t := range r.sf {
		groups[i], prev[i] = t.group, t.prevActive
	}
	order := interleave(ns, groups)
	// Tasks with few warm clients choose first, while those clients still
	// have room.
	slices.SortStableFunc(order, func(a, b int) int { return r.numEligible(a) - r.numEligible(b) })
	sp := spreader{
		caps: r.caps, lo: lo, hi: hi,
		// A client over its share gives up first the tasks that have other
		// warm homes, so the moves it must make need no warmup, and then
		// those off their leaders' rack.
		keepRank: func(i int) int { return 2*r.numEligible(i) + r.offRack(r.sf[i].racks, r.sf[i].prevActive) },
		order:    order,
		affinity: func(i, c int) int {
			warmth := 3 + r.stateRank(i, c)
			if r.isEligible(i, c) {
				switch lag := r.lag(i, c); lag {
				case LagRunning, 0:
					warmth = 0
				case lagUnknown:
					// Caught up only because the changelog is short:
					// a client with state restores less.
					warmth = 2
				default:
					// Within the acceptable lag but behind: a standby
					// that has everything is a better home.
					warmth = 1
				}
			}
			return 2*warmth + r.offRack(r.sf[i].racks, c)
		},
		uniform: func(i int) bool { return len(r.sf[i].state) == 0 && len(r.sf[i].racks) == 0 },
		group:   groups,
		groups:  r.groups,
		pref:    func(i, c int) uint64 { return rendezvous(r.sf[i].id, r.clients[c].hash) },
	}
	target, targetLoad := sp.spread(prev, make([]int, nc))
	r.targetLoad = targetLoad
	for i, c := range target {
		r.sf[i].target = c
	}
}

// placeStatefulActives decides where each stateful active goes this round:
// to its target when that client is caught up, else where it ran or to the
// freshest client.
func (r *run) placeStatefulActives() {
	if len(r.clients) == 0 {
		return
	}
	r.activeLoad = make([]int, len(r.clients))
	for i, t := range r.sf {
		if c := t.target; r.isEligible(i, c) {
			r.sf[i].active = c
			r.activeLoad[c]++
		}
	}
	for i := range r.sf {
		if r.sf[i].active >= 0 {
			continue
		}
		r.followup = true
		src := r.sf[i].prevActive
		if src < 0 || !r.isEligible(i, src) {
			src = -1
			for _, e := range r.sf[i].eligible {
				if src < 0 || r.betterSource(i, e, src) {
					src = e
				}
			}
		}
		r.sf[i].active = src
		r.activeLoad[src]++
	}
}

// betterSource reports whether a is a better temporary home than b for
// stateful task i, whose target is not caught up.
func (r *run) betterSource(i, a, b int) bool {
	la, lb := r.lag(i, a), r.lag(i, b)
	if la != lb {
		return la < lb
	}
	if c := cmpRatio(r.activeLoad[a]+1, r.caps[a], r.activeLoad[b]+1, r.caps[b]); c != 0 {
		return c < 0
	}
	return a < b
}

// assignStatelessActives places stateless tasks so that the total active
// load is balanced given the stateful actives as they run this round.
//
// The limits come from loadBounds over the stateful actives as they run.
// While a migration runs (some stateful active waits on a warmup), the
// stateless tasks that must move go where the final placement (balanced
// against the target's stateful loads) wants them, so that most move to
// their final owner once. A client short of load while its stateful
// actives warm up (a joining one) takes stateless tasks now that it gives
// up as its actives arrive, so those move twice or more. A task whose
// final client is full is the last its temporary client gives up, so that
// it waits there rather than pass from one temporary client to the next.
func (r *run) assignStatelessActives() {
	if len(r.clients) == 0 {
		return
	}
	groups := make([]int, len(r.sl))
	prev := make([]int, len(r.sl))
	for i, t := range r.sl {
		groups[i], prev[i] = t.group, t.prev
	}
	lo, hi := loadBounds(len(r.sl), r.caps, r.activeLoad)
	spreaderWith := func(lo, hi []int, keepRank func(int) int, affinity func(int, int) int) spreader {
		return spreader{
			caps: r.caps, lo: lo, hi: hi,
			keepRank: keepRank,
			affinity: affinity,
			group:    groups,
			groups:   r.groups,
			pref:     func(i, c int) uint64 { return rendezvous(r.sl[i].id, r.clients[c].hash) },
		}
	}
	sp := spreaderWith(lo, hi,
		func(i int) int { return r.offRack(r.sl[i].racks, r.sl[i].prev) },
		func(i, c int) int { return r.offRack(r.sl[i].racks, c) })
	sp.uniform = func(i int) bool { return len(r.sl[i].racks) == 0 }
	if !r.followup {
		r.setStatelessOwners(sp.spread(prev, r.activeLoad))
		return
	}
	// The final placement keeps first the tasks that already moved in
	// this migration where they run, so that it follows them instead of
	// sending them on; it moves tasks still on their first client. Without
	// that order it could send away a task that had just reached its
	// final client, and the task passed back and forth between two.
	moved := func(i int) int {
		if r.sl[i].moved {
			return 0
		}
		return 2
	}
	flo, fhi := loadBounds(len(r.sl), r.caps, r.targetLoad)
	sp = spreaderWith(flo, fhi,
		func(i int) int { return moved(i) + r.offRack(r.sl[i].racks, r.sl[i].prev) },
		func(i, c int) int { return r.offRack(r.sl[i].racks, c) })
	final, _ := sp.spread(prev, r.targetLoad)
	for i, c := range final {
		r.sl[i].final = c
	}
	sp.uniform = nil
	// held counts each client's stateless tasks as they ran.
	held := make([]int, len(r.clients))
	for _, t := range r.sl {
		if t.prev >= 0 {
			held[t.prev]++
		}
	}
	sp = spreaderWith(lo, hi,
		func(i int) int {
			// Tasks whose final client has room now go first, then
			// those the final placement keeps, and last those whose
			// final client is full: moved now, they would only pass on
			// to another temporary client.
			rank := r.offRack(r.sl[i].racks, r.sl[i].prev)
			switch f := final[i]; {
			case f == r.sl[i].prev:
				rank += 2
			case r.activeLoad[f]+held[f] < hi[f]:
				rank += 4
			}
			return rank
		},
		func(i, c int) int {
			aff := r.offRack(r.sl[i].racks, c)
			if c != final[i] {
				aff += 2
			}
			return aff
		})
	r.setStatelessOwners(sp.spread(prev, r.activeLoad))
}

func (r *run) setStatelessOwners(owner, _ []int) {
	for i, c := range owner {
		r.sl[i].owner = c
	}
}
