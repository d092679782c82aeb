package assignor

import (
	"fmt"
	"maps"
	"slices"

	"github.com/eddystreams/eddy/task"
)

// joinFirstRound checks the first round after a client joins: no active,
// stateful or stateless, changes owner except to the joining client. The
// joiner has no state, so stateful actives reach it only through warmups in
// later rounds; what it takes now is stateless work that balances the load.
func (s *sim) joinFirstRound(before, after map[task.ID]string) error {
	if s.joined == "" {
		return nil
	}
	for _, t := range slices.SortedFunc(maps.Keys(before), task.ID.Compare) {
		if o := after[t]; o != before[t] && o != s.joined {
			return fmt.Errorf("join of %s: task %v moved from %s to %s in the first round", s.joined, t, before[t], o)
		}
	}
	return nil
}

// stickiness compares the owners of actives before an event and once the
// group settled with Kafka Streams' bound on a join: the joiner's share of
// the T actives by capacity, rounded up, plus one (ceil(T/(N+1))+1 when N
// clients of equal capacity were there before). In a group with no
// stateful task a join must meet it, and only the joiner receives tasks.
// Otherwise it is recorded, for the stateful actives alone and for all: a
// migration of stateful actives to the joiner takes several rounds, each
// recomputing the target from where tasks run then, and now and then the
// clients that gave up tasks early end below their share and take one back
// from another old client. Stateless tasks in such a group are not bound: every round balances the total load as the stateful actives
// run, so the joiner takes stateless work while its stateful actives warm
// up and hands it on as they arrive, to whichever clients are then lowest
// (Assign keeps no memory of where a task ran before the event). Leaves
// are recorded, not checked: a leaver's stateful actives go to the clients
// caught up on them, which may then be above their share and hand over
// tasks of their own. The figures are logged by TestConvergence.
func (s *sim) stickiness(before, after map[task.ID]string, handovers map[task.ID]int) error {
	moved, others, hand, sfMoved, sfTasks := 0, 0, 0, 0, 0
	for t, o := range before {
		if s.tasks[t].Stateful {
			sfTasks++
		}
		if after[t] != o {
			moved++
			if s.tasks[t].Stateful {
				sfMoved++
			}
			if o != s.left && after[t] != s.joined {
				others++
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
		if b := joinBound(sfTasks); sfMoved > b {
			s.st.joinStatefulBad++
			s.st.joinStatefulExcess = max(s.st.joinStatefulExcess, sfMoved-b)
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
	}
	return nil
}
