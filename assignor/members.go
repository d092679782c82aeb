package assignor

import (
	"slices"

	"github.com/eddystreams/eddy/task"
)

// Member is one group member of a client, one stream thread or a few, as
// SpreadOverMembers sees it.
type Member struct {
	// Capacity is the number of stream threads the member stands for;
	// values below 1 count as 1.
	Capacity int
	// OwnedActive and OwnedStandby are the member's share of its client's
	// last assignment.
	OwnedActive, OwnedStandby []task.ID
}

// SpreadOverMembers splits a client's assignment over its group members
// (its stream threads, in a stable order): stateful actives by capacity,
// then stateless actives so that all actives are even, then standbys and
// warmups; each task stays with the member that held it where balance
// allows. Element i of the result is member i's share, its actives sorted.
func SpreadOverMembers(ms []Member, ca ClientAssignment, tasks map[task.ID]TaskInfo) []ClientAssignment {
	caps := make([]int, len(ms))
	for i, m := range ms {
		caps[i] = max(1, m.Capacity)
	}
	prevOf := func(ts []task.ID, owned func(Member) []task.ID) []int {
		prev := filled(len(ts), -1)
		for i, t := range ts {
			for j, m := range ms {
				if slices.Contains(owned(m), t) {
					prev[i] = j
					break
				}
			}
		}
		return prev
	}
	ownedActive := func(m Member) []task.ID { return m.OwnedActive }
	ownedStandby := func(m Member) []task.ID { return m.OwnedStandby }

	var sf, sl []task.ID
	for _, t := range ca.Active {
		if tasks[t].Stateful {
			sf = append(sf, t)
		} else {
			sl = append(sl, t)
		}
	}
	lo, hi := bounds(len(sf), caps, len(sf))
	sfOwner, sfLoad := (&spreader{caps: caps, lo: lo, hi: hi}).spread(prevOf(sf, ownedActive), make([]int, len(ms)))
	lo, hi = bounds(len(ca.Active), caps, len(ca.Active))
	slOwner, _ := (&spreader{caps: caps, lo: lo, hi: hi}).spread(prevOf(sl, ownedActive), sfLoad)
	replicas := slices.Concat(ca.Standby, ca.Warmup)
	lo, hi = bounds(len(replicas), caps, len(replicas))
	rOwner, _ := (&spreader{caps: caps, lo: lo, hi: hi}).spread(prevOf(replicas, ownedStandby), make([]int, len(ms)))

	out := make([]ClientAssignment, len(ms))
	for i, t := range sf {
		out[sfOwner[i]].Active = append(out[sfOwner[i]].Active, t)
	}
	for i, t := range sl {
		out[slOwner[i]].Active = append(out[slOwner[i]].Active, t)
	}
	for i, t := range replicas {
		if i < len(ca.Standby) {
			out[rOwner[i]].Standby = append(out[rOwner[i]].Standby, t)
		} else {
			out[rOwner[i]].Warmup = append(out[rOwner[i]].Warmup, t)
		}
	}
	for i := range out {
		out[i].Active = slices.Compact(slices.SortedFunc(slices.Values(out[i].Active), task.ID.Compare))
	}
	return out
}
