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
// A join moves at most the joiner's share of all actives by capacity,
// rounded up, plus one (⌈T/(N+1)⌉+1 when N clients of equal capacity were
// there before), and at most that share of the stateful actives. A leave
// moves no active of the remaining clients: only the lost client's are
// placed, as in Kafka Streams.
//
// Stateless tasks balance the total load, as in Kafka Streams, and the
// stateful actives are balanced by themselves, so the two together can
// force a stateless task off a client that keeps its own: a one-thread
// client that must take a second stateful active beside a stateless task
// gives the stateless one up. Where they do, the check holds the event to
// the fewest stateless moves that any such balance of the final stateful
// actives needs (forcedStatelessMoves), and counts the event.
func (s *sim) stickiness(before, after map[task.ID]string, handovers map[task.ID]int) error {
	moved, others, hand, sfMoved, sfOthers, sfTasks := 0, 0, 0, 0, 0, 0
	for t, o := range before {
		if s.tasks[t].Stateful {
			sfTasks++
		}
		hand += handovers[t]
		if after[t] == o {
			continue
		}
		moved++
		if after[t] != s.joined {
			others++
		}
		if s.tasks[t].Stateful {
			sfMoved++
			if after[t] != s.joined {
				sfOthers++
			}
		}
	}
	switch {
	case s.joined != "":
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
			if forced := s.forcedStatelessMoves(before, after); moved-sfMoved > forced {
				return fmt.Errorf("join of %s moved %d actives (%d stateless), bound %d, and balance forces %d stateless moves", s.joined, moved, moved-sfMoved, bound, forced)
			}
		}
	case s.left != "":
		s.st.leaves++
		if sfOthers > 0 {
			s.st.leaveStatefulBad++
			s.st.leaveStatefulMoved = max(s.st.leaveStatefulMoved, sfOthers)
			return fmt.Errorf("leave of %s moved %d stateful actives of other clients", s.left, sfOthers)
		}
		if others > 0 {
			s.st.leaveBad++
			s.st.leaveMoved = max(s.st.leaveMoved, others)
			if forced := s.forcedStatelessMoves(before, after); others > forced {
				return fmt.Errorf("leave of %s moved %d stateless actives of other clients, balance forces %d", s.left, others, forced)
			}
		}
	}
	return nil
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
	ids := slices.Sorted(maps.Keys(s.clients))
	at := map[string]int{}
	for x, id := range ids {
		at[id] = x
	}
	caps := make([]int, len(ids))
	base := make([]int, len(ids))
	kept := make([]int, len(ids))
	total, free := 0, 0
	for x, id := range ids {
		caps[x] = s.clients[id].cap
	}
	for t, ti := range s.tasks {
		total++
		if ti.Stateful {
			base[at[after[t]]]++
		} else if o, ok := before[t]; ok {
			kept[at[o]]++
		} else {
			free++
		}
	}
	best := total
	for _, c := range slices.Compact(slices.Sorted(slices.Values(caps))) {
		for m := 0; m <= total; m++ {
			sumLo, sumHi, leave, arrive := 0, 0, 0, 0
			for x, cx := range caps {
				lo, hi := max(base[x], (m*cx+c-1)/c), max(base[x], m*cx/c+1)
				sumLo += lo
				sumHi += hi
				leave += max(0, base[x]+kept[x]-hi)
				arrive += max(0, lo-base[x]-kept[x])
			}
			if sumLo <= total && total <= sumHi {
				best = min(best, max(leave, arrive-free))
			}
		}
	}
	return best
}
