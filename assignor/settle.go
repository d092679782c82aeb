package assignor

// Chains of moves through caught-up clients, and settling each task's replicas and warmups.

import (
	"cmp"
	"slices"
)

// warmSinks returns a test of whether a chain of moves to caught-up clients
// could end at a client with sink(c): some such client is caught up on a
// task it does not hold. It spares the search for those chains where none
// can exist, as in a new group or when a client with no state joins.
func (r *run) warmSinks() func(sink func(int) bool) bool {
	spare := make([][]int, len(r.clients)) // per client, the tasks it is caught up on
	short := false
	for i, t := range r.sf {
		short = short || t.shortLog
		for _, cl := range t.state {
			if r.caughtUpLag(cl.lag) {
				spare[cl.client] = append(spare[cl.client], i)
			}
		}
	}
	return func(sink func(int) bool) bool {
		if short {
			return true
		}
		for c, tasks := range spare {
			if !sink(c) {
				continue
			}
			for _, i := range tasks {
				if !slices.Contains(r.sf[i].holders, c) {
					return true
				}
			}
		}
		return false
	}
}

// augment finds a chain of standby moves from a client with source(c) to a
// client with sink(c), where each step moves one task's standby to a client
// that does not yet hold that task, and applies it: the ends change load by
// one, the clients in between keep theirs. With warm, every step must go to
// a client caught up on the task: balance tries those chains first, so that
// a warmup that completed is used rather than traded for another, which is
// what lets probing rebalances settle. It reports whether it did.
func (r *run) augment(source, sink func(int) bool, warm bool) bool {
	nc := len(r.clients)
	parent := filled(nc, -1)
	via := make([]int, nc)
	var queue []int
	anySink := false
	for c := range nc {
		if source(c) {
			parent[c] = c
			queue = append(queue, c)
		} else if sink(c) {
			anySink = true
		}
	}
	if len(queue) == 0 || !anySink {
		return false
	}
	// reach records a step to y and reports whether it ends the chain.
	reach := func(x, y, i int) bool {
		parent[y], via[y] = x, i
		if sink(y) {
			return true
		}
		queue = append(queue, y)
		return false
	}
	steps := r.coldSteps
	if warm {
		steps = r.warmSteps
	}
	for head := 0; head < len(queue); head++ {
		if y := steps(queue[head], parent, reach); y >= 0 {
			return r.applyChain(y, parent, via)
		}
	}
	return false
}

// coldSteps offers reach every client not yet reached that can take one of
// x's standbys, and returns the first at which reach ends the chain, or -1.
// Whether tags allow a move to y depends only on y's tag class, so x's
// movable tasks are listed once per class.
func (r *run) coldSteps(x int, parent []int, reach func(x, y, i int) bool) int {
	movable := make([][]int, r.classes)
	listed := make([]bool, r.classes)
	for y := range r.clients {
		if parent[y] >= 0 {
			continue
		}
		k := r.clients[y].class
		if !listed[k] {
			for _, i := range r.clients[x].standbys {
				if r.tagsAllowMove(i, x, y) {
					movable[k] = append(movable[k], i)
				}
			}
			listed[k] = true
		}
		for _, i := range movable[k] {
			if slices.Contains(r.sf[i].holders, y) {
				continue
			}
			if reach(x, y, i) {
				return y
			}
			break
		}
	}
	return -1
}

// warmSteps is coldSteps for moves to clients caught up on the task: it
// visits only the clients with state for each of x's standbys (every
// client for a task whose changelog is short).
func (r *run) warmSteps(x int, parent []int, reach func(x, y, i int) bool) int {
	try := func(i, y int) bool {
		return parent[y] < 0 && !slices.Contains(r.sf[i].holders, y) && r.tagsAllowMove(i, x, y)
	}
	for _, i := range r.clients[x].standbys {
		if r.sf[i].shortLog {
			for y := range r.clients {
				if try(i, y) && reach(x, y, i) {
					return y
				}
			}
			continue
		}
		for _, cl := range r.sf[i].state {
			if r.caughtUpLag(cl.lag) && try(i, cl.client) && reach(x, cl.client, i) {
				return cl.client
			}
		}
	}
	return -1
}

// applyChain performs the moves that end at y, last move first. Each move is
// checked again against the current replicas, since a task can appear twice
// in one chain; if any fails the chain is undone and balancing stops.
func (r *run) applyChain(y int, parent, via []int) bool {
	type move struct{ i, from, to int }
	var done []move
	for c := y; parent[c] != c; c = parent[c] {
		m := move{via[c], parent[c], c}
		if !slices.Contains(r.sf[m.i].holders, m.from) || !r.canMove(m.i, m.from, m.to) {
			for _, d := range slices.Backward(done) {
				r.moveStandby(d.i, d.to, d.from)
			}
			return false
		}
		r.moveStandby(m.i, m.from, m.to)
		done = append(done, m)
	}
	return true
}

// settleReplicas decides this round's standbys from the target's: each task
// keeps its replicas on caught-up clients first (the target's, then others,
// best tag spread, freshest and least loaded first), restores on the
// target's other clients only what caught-up clients cannot hold, and asks
// for warmups on the target clients it could not use yet.
func (r *run) settleReplicas() {
	if len(r.clients) == 0 {
		return
	}
	load := r.activeLoads()
	var want []warmup
	for i := range r.sf {
		picks := r.settleTask(i, load)
		r.sf[i].standby = picks[1:]
		for _, c := range r.sf[i].standby {
			load[c]++
		}
		for _, c := range r.sf[i].holders {
			if !slices.Contains(picks, c) {
				r.followup = true
				want = append(want, warmup{task: i, client: c, lag: r.lag(i, c), active: c == r.sf[i].target})
			}
		}
	}
	r.warmups = r.chooseWarmups(want, load)
}

// settleTask returns stateful task i's replicas this round, its active
// first, given the replicas per client placed so far.
func (r *run) settleTask(i int, load []int) []int {
	picks := make([]int, 0, 1+r.k)
	picks = append(picks, r.sf[i].active)
	for _, c := range r.sf[i].holders {
		if len(picks) == 1+r.k {
			break
		}
		if !slices.Contains(picks, c) && r.caught(i, c) {
			picks = append(picks, c)
		}
	}
	for len(picks) < 1+r.k {
		c := r.caughtOutside(i, picks, load)
		if c < 0 {
			break
		}
		picks = append(picks, c)
	}
	// Too few clients are caught up: the target's clients restore, placed
	// by Kafka Streams' rule around the replicas as they run this round.
	// The target spread its replicas around the target active, which may
	// not run the task yet; this round's active shares its tag values with
	// at most one of them.
	for len(picks) < 1+r.k {
		c := r.restoringHolder(i, picks, load)
		if c < 0 {
			break
		}
		picks = append(picks, c)
	}
	return picks
}

// restoringHolder returns the client that restores the next replica of task
// i beside picks, its replicas so far, or -1. While the task's active runs
// away from its target client, the target's standbys are spread around a
// client that does not run it, so, as Kafka Streams places a standby, it
// goes to a client whose value is new among picks on every tag key that
// has values picks do not use (spreadsRule), ranked by restoringKey: one
// with room for it first, then a client of the target, then the least
// loaded. Otherwise (the target's spread is around the active as it runs),
// without tags, or where no client meets the rule, it goes to the
// target's client that adds the most valuable tag values (the first in the
// target's order among equals): a new value of an earlier key of
// RackAwareTags outweighs new values of all later ones, so a restoring
// standby first leaves the zone of the active as it runs.
func (r *run) restoringHolder(i int, picks, load []int) int {
	best, bestKey := -1, restoringKey{}
	for c := range r.clients {
		if len(r.cfg.RackAwareTags) == 0 || r.sf[i].active == r.sf[i].target {
			break
		}
		if slices.Contains(picks, c) || !r.spreadsRule(picks, c) {
			continue
		}
		k := restoringKey{
			full:  load[c] >= r.clients[c].replicas,
			other: !slices.Contains(r.sf[i].holders, c),
			load:  ratio{load[c] + 1, r.clients[c].capacity},
		}
		if best < 0 || k.compare(bestKey) < 0 {
			best, bestKey = c, k
		}
	}
	if best >= 0 {
		return best
	}
	bestScore := -1
	for _, c := range r.sf[i].holders {
		if slices.Contains(picks, c) {
			continue
		}
		if score := r.rankedTagScore(picks, c); score > bestScore {
			best, bestScore = c, score
		}
	}
	return best
}

// restoringKey ranks the clients that may restore a replica of a task, the
// best lowest. A client of the target keeps the replica once it is caught
// up; another one restores it now and hands it to the target later
// through a warmup.
type restoringKey struct {
	full  bool  // the client holds this round as many replicas as the target gives it
	other bool  // the client holds none of the task's target replicas
	load  ratio // its replicas this round with this one, per capacity
}

func (k restoringKey) compare(o restoringKey) int {
	if c := cmpBool(k.full, o.full); c != 0 {
		return c
	}
	if c := cmpBool(k.other, o.other); c != 0 {
		return c
	}
	return k.load.compare(o.load)
}

// spreadsRule reports whether client c may hold the next replica beside
// picks by Kafka Streams' rule for standbys over client tags: on every tag
// key with values no replica in picks has, c's value is one of those. Kafka
// Streams stops applying a key once the replicas are as many as its values;
// counting the values they use instead keeps a key whose values two
// replicas share, so a restoring standby still leaves its active's zone
// where a zone is unused.
func (r *run) spreadsRule(picks []int, c int) bool {
	for j, v := range r.clients[c].tags {
		used, dup := 0, false
		for x, h := range picks {
			w := r.clients[h].tags[j]
			dup = dup || w == v
			if !slices.ContainsFunc(picks[:x], func(g int) bool { return r.clients[g].tags[j] == w }) {
				used++
			}
		}
		if used < r.keyValues[j] && dup {
			return false
		}
	}
	return true
}

// rankedTagScore is tagScoreAmong with key j weighted 2^(keys-1-j).
func (r *run) rankedTagScore(holders []int, c int) int {
	score := 0
	for j, v := range r.clients[c].tags {
		score <<= 1
		used := slices.ContainsFunc(holders, func(h int) bool { return r.clients[h].tags[j] == v })
		if !used {
			score |= 1
		}
	}
	return score
}

// caughtOutside returns the best client caught up on task i that holds none
// of picks, by outsideKey, or -1. With a short changelog every client is
// caught up and the target's clients were enough, so only clients with
// state qualify.
func (r *run) caughtOutside(i int, picks, load []int) int {
	best, bestKey := -1, outsideKey{}
	for _, cl := range r.sf[i].state {
		c := cl.client
		if slices.Contains(picks, c) || !r.caughtUpLag(cl.lag) {
			continue
		}
		k := outsideKey{spread: r.tagScoreAmong(picks, c), lag: cl.lag, load: ratio{load[c] + 1, r.clients[c].capacity}}
		if best < 0 || k.compare(bestKey) < 0 {
			best, bestKey = c, k
		}
	}
	return best
}

// outsideKey ranks caught-up clients outside a task's target for one of its
// replicas this round, the best lowest.
type outsideKey struct {
	spread int   // tag keys on which the client adds a value, more first
	lag    int64 // its lag on the task
	load   ratio // its replicas with this one, per capacity
}

func (k outsideKey) compare(o outsideKey) int {
	if c := cmp.Compare(o.spread, k.spread); c != 0 {
		return c
	}
	if c := cmp.Compare(k.lag, o.lag); c != 0 {
		return c
	}
	return k.load.compare(o.load)
}

// chooseWarmups keeps the first MaxWarmups of the wanted warmups by
// warmupKey. Warmups for actives come first: once one completes, its task
// has one more caught-up client and is the one its client gives up, which
// keeps the target where the warmup went, while a standby's warmup on a
// third client can make the target move another task instead. Then
// warmups to clients holding fewer replicas than the target gives them: a
// warmup that only lets a replica pass through a client on its way to
// another leaves the imbalance as it is, and given the slot every round it
// would starve the ones that end a migration. Then partly restored state,
// as it costs least to finish.
func (r *run) chooseWarmups(want []warmup, load []int) []warmup {
	key := func(w warmup) warmupKey {
		return warmupKey{full: load[w.client] >= r.clients[w.client].replicas, lag: w.lag, standby: !w.active}
	}
	slices.SortStableFunc(want, func(a, b warmup) int { return key(a).compare(key(b)) })
	return want[:min(len(want), r.cfg.MaxWarmups)]
}

// warmupKey ranks wanted warmups, the first started lowest.
type warmupKey struct {
	standby bool  // the warmup is for a standby, not the active
	full    bool  // the client holds as many replicas as the target gives it
	lag     int64 // its lag on the task
}

func (k warmupKey) compare(o warmupKey) int {
	if c := cmpBool(k.standby, o.standby); c != 0 {
		return c
	}
	if c := cmpBool(k.full, o.full); c != 0 {
		return c
	}
	return cmp.Compare(k.lag, o.lag)
}
