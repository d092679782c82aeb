package assignor

import (
	"fmt"
	"maps"
	"slices"

	"github.com/eddystreams/eddy/task"
)

// forcedStatelessMoves is the fewest stateless tasks of before, the owners
// before an event, that must change client for the stateless tasks to
// balance the total load over the stateful actives of after, as Kafka
// Streams balances it: a level M = min n/cap over the clients below which
// no client is and above which no client holding a stateless task is by
// more than one task. At that level a client whose stateful actives and
// old stateless tasks exceed ⌊M·cap⌋+1 gives the excess up, and a client
// below ⌈M·cap⌉ takes the shortfall from the new tasks (the lost client's)
// or from moves, so the moves are at least the larger of the two; M is
// one of the levels m/cap, and the least over them bounds every balance.
func (s *sim) forcedStatelessMoves(before, after map[task.ID]string) int {
	l := s.statelessLoads(before, after)
	return l.forced(l.base)
}

// statelessLoads is what forcedStatelessMoves reads of an event, per
// client in ID order.
type statelessLoads struct {
	ids              []string
	caps, base, kept []int // capacity, stateful actives after, stateless tasks before
	sfBefore         []int // stateful actives before
	total, free, nsf int   // all tasks, stateless tasks without an owner before, stateful tasks
}

func (s *sim) statelessLoads(before, after map[task.ID]string) statelessLoads {
	ids := slices.Sorted(maps.Keys(s.clients))
	n := len(ids)
	l := statelessLoads{ids: ids, caps: make([]int, n), base: make([]int, n), kept: make([]int, n), sfBefore: make([]int, n)}
	at := map[string]int{}
	for x, id := range ids {
		at[id] = x
		l.caps[x] = s.clients[id].cap
	}
	for t, ti := range s.tasks {
		l.total++
		o, ok := before[t]
		switch {
		case ti.Stateful:
			l.nsf++
			l.base[at[after[t]]]++
			if ok {
				l.sfBefore[at[o]]++
			}
		case ok:
			l.kept[at[o]]++
		default:
			l.free++
		}
	}
	return l
}

// forced is forcedStatelessMoves with base stateful actives per client.
func (l statelessLoads) forced(base []int) int {
	best := l.total
	for _, c := range slices.Compact(slices.Sorted(slices.Values(l.caps))) {
		for m := 0; m <= l.total; m++ {
			sumLo, sumHi, leave, arrive := 0, 0, 0, 0
			for x, cx := range l.caps {
				lo, hi := max(base[x], (m*cx+c-1)/c), max(base[x], m*cx/c+1)
				sumLo += lo
				sumHi += hi
				leave += max(0, base[x]+l.kept[x]-hi)
				arrive += max(0, lo-base[x]-l.kept[x])
			}
			if sumLo <= l.total && l.total <= sumHi {
				best = min(best, max(leave, arrive-l.free))
			}
		}
	}
	return best
}

// leastForcedStatelessMoves is forcedStatelessMoves at its least over every
// count of stateful actives per client that the balance of stateful actives
// allows (bounds) and that keeps the event's stickiness: on a leave every
// remaining client keeps its stateful actives, on a join every old client
// only gives some up. Where it is below forcedStatelessMoves, another
// choice of the clients that take stateful actives would have forced fewer
// stateless moves. With homes other than anyHome, a leave's counts must
// also let each of the lost client's stateful actives go to a client as
// good for it as the one Assign chose (lostTaskHomes), and a join's must
// give the joiner actives it is as good a home for as those it took
// (joinHomes): it has no state, but a short changelog or its rack can
// make it a better home for some than for others.
func (s *sim) leastForcedStatelessMoves(before, after map[task.ID]string, homes homeRule) int {
	return s.leastOverCounts(before, after, homes, func(l statelessLoads, base []int) int { return l.forced(base) })
}

// homeRule says which clients may take a lost client's stateful active in
// leastForcedStatelessMoves.
type homeRule int

const (
	// anyHome allows every client.
	anyHome homeRule = iota
	// asWarm allows the clients as warm for the task as Assign's choice.
	asWarm
	// asWarmOnRack allows those as warm and, among as warm ones, as near
	// the task's input leaders' rack (ActiveRackTag), as Assign ranks them.
	asWarmOnRack
)

// leastJoinMoves is the fewest actives in all, stateful and stateless, a
// join moves over the counts leastForcedStatelessMoves ranges over with
// homes: the joiner's stateful actives (each one an old client gave up)
// and the stateless moves their balance forces.
func (s *sim) leastJoinMoves(before, after map[task.ID]string, homes homeRule) int {
	joiner := -1
	return s.leastOverCounts(before, after, homes, func(l statelessLoads, base []int) int {
		if joiner < 0 {
			joiner = slices.Index(l.ids, s.joined)
		}
		return base[joiner] + l.forced(base)
	})
}

// leastOverCounts is the least of cost over the counts of stateful actives
// per client that leastForcedStatelessMoves ranges over.
func (s *sim) leastOverCounts(before, after map[task.ID]string, homes homeRule, cost func(l statelessLoads, base []int) int) int {
	l := s.statelessLoads(before, after)
	lo, hi := bounds(l.nsf, l.caps, l.nsf)
	for x, id := range l.ids {
		switch {
		case s.left != "":
			lo[x] = max(lo[x], l.sfBefore[x])
		case id != s.joined:
			hi[x] = min(hi[x], l.sfBefore[x])
		}
	}
	var lost [][]int // per lost stateful task, the clients it may go to
	var join *joinHomes
	switch {
	case homes == anyHome:
	case s.left != "":
		lost = s.lostTaskHomes(l.ids, before, after, homes == asWarmOnRack)
	case s.joined != "":
		h := s.joinHomes(l.ids, before, after, homes == asWarmOnRack)
		join = &h
	}
	best := l.total
	base := make([]int, len(l.ids))
	var choose func(x, left int)
	choose = func(x, left int) {
		if x == len(base) {
			if left == 0 {
				if f := cost(l, base); f < best && (lost == nil || placeable(lost, base, l.sfBefore)) && (join == nil || join.allows(base, l.sfBefore)) {
					best = f
				}
			}
			return
		}
		for n := lo[x]; n <= hi[x] && n <= left; n++ {
			base[x] = n
			choose(x+1, left-n)
		}
	}
	choose(0, l.nsf)
	return best
}

// lostTaskHomes lists, per stateful task the lost client ran, the clients
// (indexes into ids) as good a home for it as the one it settled on
// (homeKey).
func (s *sim) lostTaskHomes(ids []string, before, after map[task.ID]string, rack bool) [][]int {
	var homes [][]int
	for _, t := range slices.SortedFunc(maps.Keys(s.tasks), task.ID.Compare) {
		if _, ok := before[t]; ok || !s.tasks[t].Stateful {
			continue
		}
		var h []int
		for x, id := range ids {
			if s.homeKey(id, t, rack) <= s.homeKey(after[t], t, rack) {
				h = append(h, x)
			}
		}
		homes = append(homes, h)
	}
	return homes
}

// homeKey ranks client id as a home for stateful task t, the best lowest,
// as the event's first round found it and as Assign ranks warmth: running
// it or without lag, then within the acceptable lag, then caught up only
// by a short changelog, then with some state, then any. With rack, of
// clients exactly as warm one on the task's input leaders' rack ranks
// first.
func (s *sim) homeKey(id string, t task.ID, rack bool) int {
	cfg := s.cfg.WithDefaults()
	warmth := 3
	lag, ok := effectiveLag(s.eventIn.Clients[id], t)
	switch {
	case !ok:
		warmth = 4
		if end, known := s.eventIn.Ends[t]; known && max(end, 0) <= cfg.AcceptableRecoveryLag {
			warmth = 2
		}
	case lag == LagRunning || lag == 0:
		warmth = 0
	case lag <= cfg.AcceptableRecoveryLag:
		warmth = 1
	}
	if !rack {
		return warmth
	}
	return 2*warmth + s.offRack(id, t)
}

// joinHomes is what a join's counts of stateful actives per client must
// keep in leastForcedStatelessMoves: every stateful active an old client
// gives up goes to the joiner, and the joiner must be as good a home
// (homeKey) for those as for the ones it took in Assign's.
type joinHomes struct {
	// given lists, per old client (indexes into ids), the joiner's keys
	// for the stateful actives the client ran before the join, best first.
	given [][]int
	// took lists the joiner's keys for those it took, best first.
	took []int
}

func (s *sim) joinHomes(ids []string, before, after map[task.ID]string, rack bool) joinHomes {
	h := joinHomes{given: make([][]int, len(ids))}
	for t, o := range before {
		if !s.tasks[t].Stateful {
			continue
		}
		k := s.homeKey(s.joined, t, rack)
		x := slices.Index(ids, o)
		h.given[x] = append(h.given[x], k)
		if after[t] == s.joined {
			h.took = append(h.took, k)
		}
	}
	for _, g := range h.given {
		slices.Sort(g)
	}
	slices.Sort(h.took)
	return h
}

// allows reports whether the old clients can give up the stateful actives
// base leaves them without, each its best for the joiner, so that the
// joiner is as good a home for them as for those it took: the k-th worst
// of them no worse than the k-th worst it took, and any beyond their
// number no worse than the best it took.
func (h joinHomes) allows(base, kept []int) bool {
	var gave []int
	for x, g := range h.given {
		gave = append(gave, g[:max(0, kept[x]-base[x])]...)
	}
	slices.Sort(gave)
	for k := range gave {
		key := gave[len(gave)-1-k]
		if n := len(h.took); n > 0 && key > h.took[max(0, n-1-k)] {
			return false
		}
	}
	return true
}

// offRack is 1 where actives prefer their input leaders' rack and client
// id is on none of task t's, else 0.
func (s *sim) offRack(id string, t task.ID) int {
	racks := s.taskRacks[t]
	if s.cfg.ActiveRackTag == "" || len(racks) == 0 || slices.Contains(racks, s.clients[id].tags[s.cfg.ActiveRackTag]) {
		return 0
	}
	return 1
}

// placeable reports whether the lost tasks can go each to one of its homes
// so that every client x takes base[x]-kept[x] of them: a matching of tasks
// to client slots, found by augmenting paths.
func placeable(homes [][]int, base, kept []int) bool {
	room := make([]int, len(base))
	for x := range base {
		room[x] = base[x] - kept[x]
	}
	holder := make([][]int, len(base)) // per client, the tasks placed on it
	var try func(j int, seen []bool) bool
	try = func(j int, seen []bool) bool {
		for _, x := range homes[j] {
			if seen[x] {
				continue
			}
			seen[x] = true
			if len(holder[x]) < room[x] {
				holder[x] = append(holder[x], j)
				return true
			}
			for k, other := range holder[x] {
				if try(other, seen) {
					holder[x][k] = j
					return true
				}
			}
		}
		return false
	}
	for j := range homes {
		if !try(j, make([]bool, len(base))) {
			return false
		}
	}
	return true
}

// recordLeastForced counts the events whose stateless moves another
// choice of stateful actives could have lowered, and those where it could
// without a colder home for any stateful active, and sorts the leaves that
// moved other clients' stateless tasks by what could have spared them. It
// fails a leave whose lost stateful actives could have gone to clients as
// warm and as near their racks as Assign's without any such move.
func (s *sim) recordLeastForced(before, after map[task.ID]string) error {
	forced := s.forcedStatelessMoves(before, after)
	s.st.forcedChecked++
	least := s.leastForcedStatelessMoves(before, after, anyHome)
	if least < forced {
		s.st.forcedByChoice++
		s.st.forcedByChoiceGap = max(s.st.forcedByChoiceGap, forced-least)
	}
	warm := s.leastForcedStatelessMoves(before, after, asWarm)
	if warm < forced {
		s.st.forcedByWarmChoice++
		if s.joined != "" {
			s.st.forcedByWarmChoiceJoins++
		}
	}
	if s.left != "" {
		onRack := warm
		if warm < forced {
			onRack = s.leastForcedStatelessMoves(before, after, asWarmOnRack)
		}
		s.st.leaveSplit.add(forced, least, warm, onRack)
		if onRack < forced {
			return fmt.Errorf("leave of %s moved %d stateless actives of other clients, a placement of its stateful actives as warm and as near their racks would move %d", s.left, forced, onRack)
		}
	}
	return nil
}

// leaveSplit sorts the leaves that moved another client's stateless task
// by the least stateless moves of the remaining clients' tasks over the
// balanced counts of stateful actives that keep every remaining client's
// own (leastForcedStatelessMoves).
type leaveSplit struct {
	// forced counts the leaves where every such count moves one.
	forced int
	// restoring counts those where only counts that put a lost stateful
	// active on a colder client than Assign's (one that restores more)
	// move none.
	restoring int
	// offRack counts those where counts that keep every lost stateful
	// active on a client as warm as Assign's move none, but only with one
	// off its input leaders' rack where Assign's is on it: actives prefer
	// that rack among equally warm clients (ActiveRackTag).
	offRack int
	// equalWarmth counts those where counts that keep every lost stateful
	// active on a client as warm and as near its rack as Assign's move
	// none: Assign should have found them, and the simulation fails them.
	equalWarmth int
	// someOffRack counts, across the others, those where counts as warm
	// as Assign's move some but fewer than it: all such counts put an
	// active off its input leaders' rack where Assign keeps it on it (the
	// simulation fails those that move fewer at equal warmth and rack).
	someOffRack int
}

func (l *leaveSplit) add(forced, least, warm, onRack int) {
	if warm > 0 && warm < forced {
		l.someOffRack++
	}
	switch {
	case least > 0:
		l.forced++
	case warm > 0:
		l.restoring++
	case onRack > 0:
		l.offRack++
	default:
		l.equalWarmth++
	}
}
