package assignor

import (
	"fmt"
	"maps"
	"slices"

	"github.com/eddystreams/eddy/task"
)

// Kafka Streams asserts stickiness only of its assignor without state
// (StickyTaskAssignorTest): when a client joins, the old clients keep their
// tasks and only the joiner receives some, its share. Its high-availability
// assignor, whose migrations Eddy's follow, is held to no movement bound
// (TaskAssignorConvergenceTest checks validity, balance and the number of
// rounds) and places every stateless task on the least loaded client in
// every round, wherever it ran before. The simulation holds Eddy to
// Kafka Streams' bound where a migration keeps it, counting stateful
// actives, and to the joiner-only rule where nothing migrates.

// eventFirstRound checks the first round after a join or a leave. After a
// join no active, stateful or stateless, changes owner except to the
// joiner: the joiner has no state, so stateful actives reach it only
// through warmups in later rounds, and what it takes now is stateless work
// that balances the load. After a leave no stateful active of a remaining
// client changes owner: only the lost client's are placed (stateless tasks
// balance the total load again, as in Kafka Streams).
func (s *sim) eventFirstRound(before, after map[task.ID]string) error {
	for _, t := range slices.SortedFunc(maps.Keys(before), task.ID.Compare) {
		o := after[t]
		if o == before[t] {
			continue
		}
		if s.joined != "" && o != s.joined {
			return fmt.Errorf("join of %s: task %v moved from %s to %s in the first round", s.joined, t, before[t], o)
		}
		if s.left != "" && s.tasks[t].Stateful {
			return fmt.Errorf("leave of %s: stateful task %v moved from %s to %s in the first round", s.left, t, before[t], o)
		}
	}
	return nil
}

// stickiness compares the owners of actives before an event and once the
// group settled, stateful and stateless ones alike.
//
// A join moves at most the joiner's share of the stateful actives by
// capacity, rounded up, plus one (⌈T/(N+1)⌉+1 when N clients of equal
// capacity were there before). A leave moves no stateful active of the
// remaining clients: only the lost client's are placed, as in Kafka
// Streams.
//
// Stateless tasks balance the total load, as in Kafka Streams, and the
// stateful actives are balanced by themselves, so the two together can
// force a stateless task off a client that keeps its own: a one-thread
// client that must take a second stateful active beside a stateless task
// gives the stateless one up. On every join and leave the check holds the
// stateless tasks of the clients that stay to the fewest moves any such
// balance of the final stateful actives needs (forcedStatelessMoves), and
// so to no more than Kafka Streams' placement of them moves
// (checkKafkaStreamsStateless). It counts the joins that move more actives
// in all than the bound and the leaves that move other clients' stateless
// tasks.
func (s *sim) stickiness(before, after map[task.ID]string, handovers map[task.ID]int) error {
	if s.joined == "" && s.left == "" {
		return nil
	}
	moved, sfMoved, sfOthers, sfTasks, hand := 0, 0, 0, 0, 0
	for t, o := range before {
		if s.tasks[t].Stateful {
			sfTasks++
		}
		hand += handovers[t]
		if after[t] == o {
			continue
		}
		moved++
		if s.tasks[t].Stateful {
			sfMoved++
			if after[t] != s.joined {
				sfOthers++
			}
		}
	}
	slMoved := moved - sfMoved
	if forced := s.forcedStatelessMoves(before, after); slMoved > forced {
		return fmt.Errorf("%s moved %d stateless actives of the clients that stay, balance forces %d", s.eventName(), slMoved, forced)
	}
	if err := s.checkKafkaStreamsStateless(before, after); err != nil {
		return fmt.Errorf("%s %w", s.eventName(), err)
	}
	if s.left != "" {
		s.st.leaves++
		if sfOthers > 0 {
			return fmt.Errorf("leave of %s moved %d stateful actives of other clients", s.left, sfOthers)
		}
		if slMoved > 0 {
			s.st.leaveBad++
			s.st.leaveMoved = max(s.st.leaveMoved, slMoved)
			s.recordLeastForced(before, after)
		}
		return nil
	}
	s.st.joins++
	sum := 0
	for _, c := range s.clients {
		sum += c.cap
	}
	joinBound := func(n int) int { return (n*s.clients[s.joined].cap+sum-1)/sum + 1 }
	bound := joinBound(len(s.tasks))
	s.st.joinHandovers = max(s.st.joinHandovers, hand-bound)
	s.st.joinStatefulMax = max(s.st.joinStatefulMax, sfMoved-joinBound(sfTasks))
	if b := joinBound(sfTasks); sfMoved > b {
		return fmt.Errorf("join of %s moved %d stateful actives, bound %d", s.joined, sfMoved, b)
	}
	if moved > bound {
		s.st.joinBad++
		s.st.joinExcess = max(s.st.joinExcess, moved-bound)
		s.recordLeastForced(before, after)
	}
	return nil
}

// eventName names the join or leave that just settled.
func (s *sim) eventName() string {
	if s.joined != "" {
		return "join of " + s.joined
	}
	return "leave of " + s.left
}

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
// stateless moves.
func (s *sim) leastForcedStatelessMoves(before, after map[task.ID]string) int {
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
	best := l.total
	base := make([]int, len(l.ids))
	var choose func(x, left int)
	choose = func(x, left int) {
		if x == len(base) {
			if left == 0 {
				best = min(best, l.forced(base))
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

// recordLeastForced counts the events whose stateless moves another
// choice of stateful actives could have lowered.
func (s *sim) recordLeastForced(before, after map[task.ID]string) {
	forced, least := s.forcedStatelessMoves(before, after), s.leastForcedStatelessMoves(before, after)
	s.st.forcedChecked++
	if least < forced {
		s.st.forcedByChoice++
		s.st.forcedByChoiceGap = max(s.st.forcedByChoiceGap, forced-least)
	}
}
