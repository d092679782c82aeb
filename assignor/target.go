package assignor

import (
	"slices"

	"github.com/eddystreams/eddy/task"
)

// Target is the placement a migration heads for: per stateful task, the
// clients of its target active and standbys, and per stateless task the
// client of the final placement, balanced against the target's stateful
// loads, and whether it moved in the migration.
//
// Assign recomputes its target in every round from where tasks run, and
// the replicas that move shift the loads and the ties that chose it, so a
// target computed anew can point a replica elsewhere while the warmup
// towards the old one is done. Handing the target from one round to the
// next keeps the migration on one placement: every round then places the
// target's caught-up replicas, starts at least one warmup towards the
// others, and so has one replica fewer to wait on than the round before.
// Stateless tasks' final clients are handed on for a like reason and one
// more: computed from where the tasks ran before the event, the final
// placement leaves each where it started unless balance moves it, while
// one recomputed each round from where they run would keep the moves the
// migration made on the way (a task lent to a joining client and handed on
// to another).
type Target map[task.ID]TargetReplicas

// TargetReplicas is one task's target.
type TargetReplicas struct {
	// Active is the client the task's active heads for.
	Active string
	// Standby lists the clients of a stateful task's standbys, sorted;
	// it is empty for a stateless task.
	Standby []string
	// Moved tells whether a stateless task changed owner in a round of
	// the migration.
	Moved bool
}

// target returns the run's target.
func (r *run) target() Target {
	t := make(Target, len(r.sf)+len(r.sl))
	for _, st := range r.sl {
		t[st.id] = TargetReplicas{Active: r.clients[st.final].id, Moved: st.moved || st.owner != st.prev}
	}
	for _, st := range r.sf {
		standby := make([]string, 0, len(st.holders)-1)
		for _, c := range st.holders[1:] {
			standby = append(standby, r.clients[c].id)
		}
		slices.Sort(standby)
		t[st.id] = TargetReplicas{Active: r.clients[st.target].id, Standby: standby}
	}
	return t
}

// assignTarget computes the target of every stateful task, its active's
// and standbys' clients, and then keeps prev, the previous round's target,
// instead where prev still fits the group at least as well: it names every
// stateful task with an active and the run's number of standbys on
// distinct clients of the group, and the new target is not closer to
// balance (how far stateful actives per client lie outside their bounds,
// then how far replicas do). A client that joined or left, a change of
// capacity that unbalances prev, or a change of tasks therefore make the
// new target count. Since a target is dropped only for one closer to
// balance, a group without events changes target finitely often.
func (r *run) assignTarget(prev Target) {
	if len(r.clients) == 0 {
		return
	}
	r.spreadStatefulActives()
	r.assignStandbys()
	kept, ok := r.readTarget(prev)
	if !ok {
		return
	}
	ns := len(r.sf)
	caps := r.capacities()
	aLo, aHi := bounds(ns, caps, ns)
	rLo, rHi := bounds(ns*(1+r.k), caps, ns)
	newActives, newReplicas := r.targetCounts(nil)
	keptActives, keptReplicas := r.targetCounts(kept)
	keptGap := [2]int{outside(keptActives, aLo, aHi), outside(keptReplicas, rLo, rHi)}
	newGap := [2]int{outside(newActives, aLo, aHi), outside(newReplicas, rLo, rHi)}
	if slices.Compare(newGap[:], keptGap[:]) < 0 {
		return
	}
	for c := range r.clients {
		r.clients[c].standbys = r.clients[c].standbys[:0]
		r.clients[c].replicas = keptActives[c]
		r.clients[c].targetLoad = keptActives[c]
	}
	for i := range r.sf {
		r.sf[i].target = kept[i][0]
		r.sf[i].holders = kept[i][:1]
		for _, c := range kept[i][1:] {
			r.addStandby(i, c)
		}
	}
	r.finalsHanded = r.readFinals(prev)
}

// readTarget returns prev's replicas of each stateful task as client
// indexes, its active first, or false when prev does not name every
// stateful task with an active and r.k standbys on distinct clients of the
// group, or names a task that is not the group's.
func (r *run) readTarget(prev Target) ([][]int, bool) {
	if len(prev) < len(r.sf) || len(prev) > len(r.sf)+len(r.sl) {
		return nil, false
	}
	index := make(map[string]int, len(r.clients))
	for c, cl := range r.clients {
		index[cl.id] = c
	}
	stateless := 0
	for _, t := range r.sl {
		if _, ok := prev[t.id]; ok {
			stateless++
		}
	}
	if len(prev) != len(r.sf)+stateless {
		return nil, false
	}
	holders := make([][]int, len(r.sf))
	for i, st := range r.sf {
		tr, ok := prev[st.id]
		if !ok || len(tr.Standby) != r.k {
			return nil, false
		}
		hs := make([]int, 0, 1+r.k)
		for j := -1; j < len(tr.Standby); j++ {
			id := tr.Active
			if j >= 0 {
				id = tr.Standby[j]
			}
			c, ok := index[id]
			if !ok || slices.Contains(hs, c) {
				return nil, false
			}
			hs = append(hs, c)
		}
		holders[i] = hs
	}
	return holders, true
}

// readFinals reads each stateless task's final client from prev, the kept
// target, and whether it moved in the migration, and reports whether prev
// names a client of the group for every one.
func (r *run) readFinals(prev Target) bool {
	index := make(map[string]int, len(r.clients))
	for c, cl := range r.clients {
		index[cl.id] = c
	}
	for i, t := range r.sl {
		c, ok := index[prev[t.id].Active]
		if !ok {
			for j := range r.sl {
				r.sl[j].final, r.sl[j].moved = -1, false
			}
			return false
		}
		r.sl[i].final = c
		r.sl[i].moved = prev[t.id].Moved
	}
	return true
}

// targetCounts counts stateful actives and replicas per client in holders,
// per task its active first, or in the run's target when holders is nil.
func (r *run) targetCounts(holders [][]int) (actives, replicas []int) {
	actives, replicas = make([]int, len(r.clients)), make([]int, len(r.clients))
	for i := range r.sf {
		hs := r.sf[i].holders
		if holders != nil {
			hs = holders[i]
		}
		actives[hs[0]]++
		for _, c := range hs {
			replicas[c]++
		}
	}
	return actives, replicas
}

// outside sums how far counts lie outside their bounds.
func outside(counts []int, lo, hi []int) int {
	d := 0
	for c, n := range counts {
		d += max(0, lo[c]-n, n-hi[c])
	}
	return d
}
