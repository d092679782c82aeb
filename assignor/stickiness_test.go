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
// group settled.
//
// A join moves at most the joiner's share of the stateful actives by
// capacity, rounded up, plus one (⌈T/(N+1)⌉+1 when N clients of equal
// capacity were there before), and in a group with no stateful task at
// most that share of all actives, every one to the joiner. Stateless tasks
// in a group with stateful ones are not bound: every round balances the
// total load as the stateful actives run, so the joiner takes stateless
// work while its stateful actives warm up and hands it on as they arrive.
//
// A leave moves no stateful active of the remaining clients: only the lost
// client's are placed, as in Kafka Streams. Its stateful actives go at
// once to clients caught up on them, and the target of that first round,
// which chose which tasks move on to balance the load, is handed on to the
// rounds after. The figures, stateless tasks included, are logged by
// TestConvergence.
func (s *sim) stickiness(before, after map[task.ID]string, handovers map[task.ID]int) error {
	moved, others, hand, sfMoved, sfOthers, sfTasks := 0, 0, 0, 0, 0, 0
	for t, o := range before {
		if s.tasks[t].Stateful {
			sfTasks++
		}
		if after[t] == o {
			hand += handovers[t]
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
		hand += handovers[t]
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
		if moved > bound {
			s.st.joinBad++
			s.st.joinExcess = max(s.st.joinExcess, moved-bound)
		}
		s.st.joinHandovers = max(s.st.joinHandovers, hand-bound)
		s.st.joinStatefulMax = max(s.st.joinStatefulMax, sfMoved-joinBound(sfTasks))
		if b := joinBound(sfTasks); sfMoved > b {
			return fmt.Errorf("join of %s moved %d stateful actives, bound %d", s.joined, sfMoved, b)
		}
		if sfTasks == 0 && (moved > bound || others > 0) {
			return fmt.Errorf("join of %s moved %d stateless actives (%d not to it), bound %d", s.joined, moved, others, bound)
		}
	case s.left != "":
		s.st.leaves++
		if others > 0 {
			s.st.leaveBad++
			s.st.leaveMoved = max(s.st.leaveMoved, others)
		}
		if sfOthers > 0 {
			s.st.leaveStatefulBad++
			s.st.leaveStatefulMoved = max(s.st.leaveStatefulMoved, sfOthers)
			return fmt.Errorf("leave of %s moved %d stateful actives of other clients", s.left, sfOthers)
		}
	}
	return nil
}
