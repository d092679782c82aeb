package assignor

// Choosing which clients give up the stateful actives that move to another
// client, so that fewer stateless tasks must move.

import "cmp"

// spareByOtherGivers re-chooses which clients give up the stateful actives
// the target moves off the clients that ran them (a joining client's
// share, or a client's excess), where that lowers the stateless tasks the
// balance of the total load forces off the clients that ran them
// (statelessMovesAt, with kept the stateless tasks each client ran). The
// spread picks givers by their stateful load alone, and a giver that runs
// few stateless tasks beside them can leave a client that runs many above
// the level the total load allows. An exchange keeps one given-up task i
// on client a, which ran it, and has another client b, above its lower
// limit, give up instead one of its own that i's new client is as good a
// home for: as many stateful actives move, to the same client and as warm,
// and only a and b change load. Each exchange lowers the count, and the
// loads of at most giverBudget pairs of kinds of client are tried per
// Assign.
func (r *run) spareByOtherGivers(target, load, lo, hi, kept []int, aff func(i, c int) int) {
	if len(r.sl) == 0 {
		return
	}
	free := 0
	for _, t := range r.sl {
		if t.prev < 0 {
			free++
		}
	}
	g := &giverSearch{r: r, target: target, load: load, lo: lo, hi: hi, kept: kept, aff: aff, free: free, caps: r.capacities(), budget: giverBudget}
	moves := statelessMovesAt(len(r.sl), g.caps, load, kept, free)
	for moves > 0 && g.budget > 0 {
		ex, ok := g.best(moves)
		if !ok {
			return
		}
		a, b := r.sf[ex.keep].prevActive, r.sf[ex.give].prevActive
		target[ex.give] = target[ex.keep]
		target[ex.keep] = a
		load[a]++
		load[b]--
		moves = ex.key.moves
	}
}

// giverBudget is how many pairs of a kind of client that keeps a task and
// one that gives another up spareByOtherGivers may weigh per Assign, each
// at the cost of one statelessMovesAt.
const giverBudget = 256

// giverSearch is the state of one spareByOtherGivers.
type giverSearch struct {
	r                          *run
	target, load, lo, hi, kept []int
	caps                       []int
	aff                        func(i, c int) int
	free, budget               int
	keptBy                     [][]int            // per client, the stateful actives it keeps
	tried                      map[[2]endKind]int // statelessMovesAt per kind of keeper and giver
	found                      int                // exchanges weighed
}

// giverExchange is one candidate exchange: task keep stays on the client
// that ran it and task give moves in its stead.
type giverExchange struct {
	keep, give int
	key        giverKey
}

// giverKey ranks exchanges, the best lowest.
type giverKey struct {
	moves int // statelessMovesAt after the exchange
	aff   int // the receiving client's affinity for the task given instead
	order int // how early the search found it
}

func (k giverKey) compare(o giverKey) int {
	if c := cmp.Compare(k.moves, o.moves); c != 0 {
		return c
	}
	if c := cmp.Compare(k.aff, o.aff); c != 0 {
		return c
	}
	return cmp.Compare(k.order, o.order)
}

// best returns the exchange of the lowest giverKey that brings the count
// below moves, if any.
func (g *giverSearch) best(moves int) (giverExchange, bool) {
	r := g.r
	slLo, slHi := loadBounds(len(r.sl), g.caps, g.load)
	short := 0
	for c := range r.clients {
		short += max(0, slLo[c]-g.load[c]-g.kept[c])
	}
	// Unless clients lack load, an exchange lowers the count only by
	// unloading a client above its upper limit into one it fits.
	needy := short > g.free
	g.keptBy = make([][]int, len(r.clients))
	for i, c := range g.target {
		if r.sf[i].prevActive == c {
			g.keptBy[c] = append(g.keptBy[c], i)
		}
	}
	g.tried = map[[2]endKind]int{}
	var best giverExchange
	found := false
	for i, c := range g.target {
		a := r.sf[i].prevActive
		if a < 0 || a == c || g.load[a] >= g.hi[a] || !needy && g.load[a]+1+g.kept[a] > slHi[a] {
			continue
		}
		for b := range r.clients {
			if b == a || b == c || g.load[b] <= g.lo[b] || !needy && g.load[b]+g.kept[b] <= slHi[b] {
				continue
			}
			m, ok := g.movesAfter(a, b)
			if !ok {
				return best, found
			}
			if m >= moves || found && m > best.key.moves {
				continue
			}
			j, aff := g.replacement(b, c, g.aff(i, c))
			if j < 0 {
				continue
			}
			g.found++
			ex := giverExchange{keep: i, give: j, key: giverKey{moves: m, aff: aff, order: g.found}}
			if !found || ex.key.compare(best.key) < 0 {
				best, found = ex, true
			}
		}
	}
	return best, found
}

// movesAfter is statelessMovesAt with one stateful active more on a and
// one fewer on b; false once the budget is spent. Pairs of clients alike
// (endKind) are alike, so a large group of few kinds of client weighs few.
func (g *giverSearch) movesAfter(a, b int) (int, bool) {
	pair := [2]endKind{g.kind(a), g.kind(b)}
	if m, ok := g.tried[pair]; ok {
		return m, true
	}
	if g.budget == 0 {
		return 0, false
	}
	g.budget--
	g.load[a]++
	g.load[b]--
	m := statelessMovesAt(len(g.r.sl), g.caps, g.load, g.kept, g.free)
	g.load[a]--
	g.load[b]++
	g.tried[pair] = m
	return m, true
}

func (g *giverSearch) kind(c int) endKind {
	return endKind{g.caps[c], g.load[c], g.kept[c]}
}

// replacement returns the task client b keeps that client c is the best
// home for, no worse than limit, with c's affinity for it, or -1.
func (g *giverSearch) replacement(b, c, limit int) (int, int) {
	pick, pickAff := -1, 0
	for _, j := range g.keptBy[b] {
		if a := g.aff(j, c); a <= limit && (pick < 0 || a < pickAff) {
			pick, pickAff = j, a
		}
	}
	return pick, pickAff
}
