package assignor

// Placing stateful actives: their balanced target, and where each runs this round.

import (
	"cmp"
	"slices"
)

// spreadStatefulActives computes the balanced target of every stateful
// active.
func (r *run) spreadStatefulActives() {
	ns, nc := len(r.sf), len(r.clients)
	if nc == 0 {
		return
	}
	caps := r.capacities()
	lo, hi := bounds(ns, caps, ns)
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
		caps: caps, lo: lo, hi: hi,
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
	r.spareStatelessMoves(target, targetLoad, lo, hi, sp.besides, sp.affinity)
	r.spareByOtherGivers(target, targetLoad, lo, hi, sp.besides, sp.affinity)
	for c := range r.clients {
		r.clients[c].targetLoad = targetLoad[c]
	}
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
	for i, t := range r.sf {
		if c := t.target; r.isEligible(i, c) {
			r.sf[i].active = c
			r.clients[c].activeLoad++
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
		r.clients[src].activeLoad++
	}
}

// betterSource reports whether a is a better temporary home than b for
// stateful task i, whose target is not caught up.
func (r *run) betterSource(i, a, b int) bool {
	la, lb := r.lag(i, a), r.lag(i, b)
	if la != lb {
		return la < lb
	}
	if c := cmpRatio(r.clients[a].activeLoad+1, r.clients[a].capacity, r.clients[b].activeLoad+1, r.clients[b].capacity); c != 0 {
		return c < 0
	}
	return a < b
}

// spareStatelessMoves re-targets stateful actives whose client left (or
// that are new) to clients as warm for them, within the stateful actives'
// limits lo and hi, where that lowers the stateless tasks the balance of
// the total load forces off the clients that ran them (statelessMovesAt,
// with kept the stateless tasks each client ran). Balance alone chooses
// which clients take such tasks among the warm ones, and a client that
// runs stateless tasks beside the one it takes may have to give a
// stateless task up where another as warm would not. A re-target is a
// chain (transferChains): the first client gives one such task up, each
// next one takes it and gives up another, the last only takes, so only the
// ends change load. Of the chains from every client the one of the lowest
// chainKey is made; each lowers the count, so there are at most as many
// chains as it was. The searches ask for at most a fixed number of
// affinities and counts per client and stateful task (spareBudget), so
// that a group where many clients restart at once does not search for
// ever.
func (r *run) spareStatelessMoves(target, load, lo, hi, kept []int, aff func(i, c int) int) {
	if len(r.sl) == 0 {
		return
	}
	budget := spareBudget * (len(r.clients) + len(r.sf))
	free := 0
	for _, t := range r.sl {
		if t.prev < 0 {
			free++
		}
	}
	caps := r.capacities()
	now := statelessCountAt(len(r.sl), caps, load, kept, free)
	for now.moves > 0 && budget > 0 {
		movable := make([][]int, len(r.clients)) // per client, its targets that move anyway
		for i, c := range target {
			if r.sf[i].prevActive < 0 {
				movable[c] = append(movable[c], i)
			}
		}
		slLo, slHi := loadBounds(len(r.sl), caps, load)
		short := 0
		for c := range r.clients {
			short += max(0, slLo[c]-load[c]-kept[c])
		}
		// A chain lowers the count only by unloading a client above its
		// upper limit into one it fits, or by loading one below its lower
		// limit; the others are not worth the count's computation.
		needy := short > free
		var best *transferChain
		for from := range r.clients {
			if len(movable[from]) == 0 || load[from] <= lo[from] || !needy && load[from]+kept[from] <= slHi[from] {
				continue
			}
			for _, ch := range r.transferChains(from, movable, load, hi, kept, slHi, aff, &budget) {
				if !needy && ch.end.over > 0 || budget <= 0 {
					continue
				}
				// Counting costs about as much as asking every client
				// for an affinity.
				budget -= len(r.clients)
				load[from]--
				load[ch.to]++
				ch.count = statelessCountAt(len(r.sl), caps, load, kept, free)
				load[from]++
				load[ch.to]--
				if ch.count.compare(now) < 0 && (best == nil || ch.key().compare(best.key()) < 0) {
					best = ch
				}
			}
		}
		if best == nil {
			return
		}
		load[best.from]--
		load[best.to]++
		for _, st := range best.steps {
			target[st.task] = st.to
		}
		now = best.count
	}
}

// spareBudget is how many affinities (or counts of stateless moves, each
// as dear as asking every client for one) spareStatelessMoves may ask for
// per client and stateful task of the group.
const spareBudget = 64

// transferChain is a chain of re-targets of stateful actives that moves
// one from client from to client to.
type transferChain struct {
	from, to int
	end      transferKey    // how to ranks as the chain's end
	steps    []transferStep // in order from the end at to
	count    spareCount     // statelessCountAt after the chain
}

type transferStep struct{ task, to int }

// key ranks the chain among those spareStatelessMoves weighs.
func (ch *transferChain) key() chainKey { return chainKey{count: ch.count, end: ch.end} }

// chainKey ranks chains of re-targets, the one made lowest.
type chainKey struct {
	count spareCount  // statelessCountAt after the chain
	end   transferKey // how its end ranks
}

func (k chainKey) compare(o chainKey) int {
	if c := k.count.compare(o.count); c != 0 {
		return c
	}
	return k.end.compare(o.end)
}

// endKind is what of a client decides how a chain ending at it changes
// the count of stateless moves: clients alike in it are alike as ends.
type endKind struct{ capacity, load, kept int }

// transferChains finds, breadth first from client from, the clients that
// a chain of re-targets of movable tasks (each to a client as warm for it
// as the one before) reaches, and returns, per endKind, the chain to the
// one below its limit hi that ranks first by transferKey; slHi is the
// upper limit of each client's total load as the stateless tasks balance
// it now. Each affinity it asks for spends one of budget; with none left
// it stops.
func (r *run) transferChains(from int, movable [][]int, load, hi, kept, slHi []int, aff func(i, c int) int, budget *int) []*transferChain {
	nc := len(r.clients)
	parent, via := filled(nc, -1), filled(nc, -1)
	parent[from] = from
	queue := []int{from}
	ends := map[endKind]int{} // per kind, its index in chains
	var chains []*transferChain
	for head := 0; head < len(queue) && *budget > 0; head++ {
		u := queue[head]
		for _, i := range movable[u] {
			was := aff(i, u)
			*budget -= nc
			for v := range nc {
				if parent[v] >= 0 || aff(i, v) > was {
					continue
				}
				parent[v], via[v] = u, i
				queue = append(queue, v)
				if load[v] >= hi[v] {
					continue
				}
				k := transferKey{
					over:  max(0, load[v]+1+kept[v]-slHi[v]),
					load:  ratio{load[v] + 1 + kept[v], r.clients[v].capacity},
					steps: len(queue),
				}
				kind := endKind{r.clients[v].capacity, load[v], kept[v]}
				if x, ok := ends[kind]; !ok {
					ends[kind] = len(chains)
					chains = append(chains, &transferChain{from: from, to: v, end: k})
				} else if k.compare(chains[x].end) < 0 {
					chains[x].to, chains[x].end = v, k
				}
			}
		}
	}
	for _, ch := range chains {
		for v := ch.to; v != from; v = parent[v] {
			ch.steps = append(ch.steps, transferStep{task: via[v], to: v})
		}
	}
	return chains
}

// transferKey ranks the clients a chain of re-targets could end at, the
// best lowest.
type transferKey struct {
	over  int   // how far the task takes the client's total load above its upper limit
	load  ratio // the client's stateful and stateless actives with the task, per capacity
	steps int   // how early the search reached it
}

func (k transferKey) compare(o transferKey) int {
	if c := cmp.Compare(k.over, o.over); c != 0 {
		return c
	}
	if c := k.load.compare(o.load); c != 0 {
		return c
	}
	return cmp.Compare(k.steps, o.steps)
}

// spareCount is what spareStatelessMoves lowers, compared in order: the
// stateless tasks the balance of the total load forces off the clients
// that ran them (moves), then the tasks clients above their upper limit
// must give up and those clients below their lower limit lack, together
// (excess). Where two chains together spare a stateless move that neither
// spares alone, the first lowers the excess.
type spareCount struct{ moves, excess int }

func (c spareCount) compare(o spareCount) int {
	if x := cmp.Compare(c.moves, o.moves); x != 0 {
		return x
	}
	return cmp.Compare(c.excess, o.excess)
}

// statelessMovesAt is statelessCountAt's count of moves.
func statelessMovesAt(items int, caps, base, kept []int, free int) int {
	return statelessCountAt(items, caps, base, kept, free).moves
}

// statelessCountAt counts how many of the stateless tasks that clients ran
// (kept per client; free more ran on no client of the group) the
// stateless spread moves over clients holding base stateful actives: at
// loadBounds' level, clients above their upper limit give up the excess
// and clients below their lower limit take the shortfall, from the free
// tasks and those given up first.
func statelessCountAt(items int, caps, base, kept []int, free int) spareCount {
	lo, hi := loadBounds(items, caps, base)
	give, short := 0, 0
	for c := range caps {
		give += max(0, base[c]+kept[c]-hi[c])
		short += max(0, lo[c]-base[c]-kept[c])
	}
	return spareCount{moves: max(give, short-free), excess: give + short}
}
