package assignor

// Placing stateful actives: their balanced target, and where each runs this round.

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
	// Stateless tasks stay where they run where balance lets them, so the
	// stateful actives placed anew go where the total load is least.
	sp.besides = make([]int, nc)
	for _, t := range r.sl {
		if t.prev >= 0 {
			sp.besides[t.prev]++
		}
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
