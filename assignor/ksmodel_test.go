package assignor

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/eddystreams/eddy/task"
	"github.com/stretchr/testify/require"
)

// Kafka Streams 3.9's HighAvailabilityTaskAssignor places stateless tasks in
// every round without looking at where they ran (assignStatelessActiveTasks):
// in task order, each goes to the client with the fewest actives per
// thread, stateful ones included, the least process ID among equals (its
// rack-aware optimisation of them runs only with rack-aware assignment
// enabled). Given the same stateful actives before and after an event, the
// stateless tasks it moves are those whose client in that placement
// differs before and after. The simulation holds Eddy to at most as many
// stateless moves on every join and leave.

// ksStatelessOwners places the stateless tasks of tasks as Kafka Streams
// does over clients of the given capacities that run stateful, the owners
// of the stateful actives.
func ksStatelessOwners(tasks map[task.ID]TaskInfo, caps map[string]int, stateful map[task.ID]string) map[task.ID]string {
	ids := slices.Sorted(maps.Keys(caps))
	load := map[string]int{}
	for t, c := range stateful {
		if tasks[t].Stateful {
			load[c]++
		}
	}
	out := map[task.ID]string{}
	for _, t := range slices.SortedFunc(maps.Keys(tasks), task.ID.Compare) {
		if tasks[t].Stateful {
			continue
		}
		least := ids[0]
		for _, c := range ids[1:] {
			if cmpRatio(load[c], caps[c], load[least], caps[least]) < 0 {
				least = c
			}
		}
		out[t] = least
		load[least]++
	}
	return out
}

// ksEvent is what Kafka Streams' placement of stateless tasks does on one
// join or leave, against Eddy's.
type ksEvent struct {
	// ours counts the stateless tasks of clients that were there before
	// and stay that Eddy moved over the event.
	ours int
	// ks counts those Kafka Streams moves: its placement over the
	// stateful actives before against its placement over those after.
	ks int
	// ksFromOurs counts those whose client in Kafka Streams' placement
	// after the event differs from Eddy's before it.
	ksFromOurs int
}

// ksStatelessMoves compares the stateless moves of the event that just
// settled, from before (the owners of the remaining clients' actives as
// the event's first round found them) to after (the settled owners), with
// Kafka Streams' on the same stateful actives. The lost client's actives
// come from what it ran when it left; a joiner is not among the clients
// before.
func (s *sim) ksStatelessMoves(before, after map[task.ID]string) ksEvent {
	capsAfter := map[string]int{}
	for id, c := range s.clients {
		capsAfter[id] = c.cap
	}
	capsBefore := maps.Clone(capsAfter)
	statefulBefore := maps.Clone(before)
	if s.joined != "" {
		delete(capsBefore, s.joined)
	}
	if s.left != "" {
		gone := s.gone[s.left]
		capsBefore[s.left] = gone.cap
		for _, t := range gone.prevActive {
			statefulBefore[t] = s.left
		}
	}
	ksBefore := ksStatelessOwners(s.tasks, capsBefore, statefulBefore)
	ksAfter := ksStatelessOwners(s.tasks, capsAfter, after)
	var ev ksEvent
	for t, ti := range s.tasks {
		if ti.Stateful {
			continue
		}
		if o, ok := before[t]; ok && after[t] != o {
			ev.ours++
		}
		if o, ok := before[t]; ok && ksAfter[t] != o {
			ev.ksFromOurs++
		}
		if o := ksBefore[t]; o != s.left && ksAfter[t] != o {
			ev.ks++
		}
	}
	return ev
}

// checkKafkaStreamsStateless records one event's stateless moves against
// Kafka Streams' and fails where Eddy moved more than Kafka Streams would
// from the same assignment; it returns the comparison.
func (s *sim) checkKafkaStreamsStateless(before, after map[task.ID]string) (ksEvent, error) {
	ev := s.ksStatelessMoves(before, after)
	st := &s.st.ks
	st.events++
	st.ours += ev.ours
	st.ks += ev.ks
	st.ksFromOurs += ev.ksFromOurs
	if ev.ours > ev.ks {
		st.above++
		st.worst = max(st.worst, ev.ours-ev.ks)
	}
	if ev.ours > ev.ksFromOurs {
		return ev, fmt.Errorf("moved %d stateless tasks of the clients that stay, Kafka Streams' placement from the same assignment %d", ev.ours, ev.ksFromOurs)
	}
	return ev, nil
}

// ksStats sums the comparison with Kafka Streams' stateless placement over
// the joins and leaves of a simulation.
type ksStats struct {
	events               int
	ours, ks, ksFromOurs int // stateless moves summed over the events
	// above counts the events where Eddy moved more than Kafka Streams'
	// placement from its own placement before, by at most worst.
	above, worst int
}

// The model places as Kafka Streams does in
// HighAvailabilityTaskAssignorTest.shouldDistributeStatelessTasksToBalanceTotalTaskLoad
// (p1 runs four stateful tasks, p2 none: p2 takes all three stateless
// ones), goes by actives per thread, and breaks ties by client ID in task
// order.
func TestKafkaStreamsStatelessModel(t *testing.T) {
	sf, sl := tasks(0, 4), tasks(1, 3)
	all := taskMap(sf, sl)
	stateful := map[task.ID]string{}
	for _, id := range sf {
		stateful[id] = "p1"
	}
	got := ksStatelessOwners(all, map[string]int{"p1": 1, "p2": 1}, stateful)
	require.Equal(t, map[task.ID]string{sl[0]: "p2", sl[1]: "p2", sl[2]: "p2"}, got)

	// p1 with four threads runs three stateful actives, p2 with one thread
	// one: p1 at 0.75 per thread takes the first stateless task, then at
	// 1 against 1 the second (the first ID), and p2 the third.
	got = ksStatelessOwners(all, map[string]int{"p1": 4, "p2": 1}, map[task.ID]string{sf[0]: "p1", sf[1]: "p1", sf[2]: "p1", sf[3]: "p2"})
	require.Equal(t, map[task.ID]string{sl[0]: "p1", sl[1]: "p1", sl[2]: "p2"}, got)
}
