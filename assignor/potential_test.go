package assignor

import (
	"fmt"
	"maps"
	"slices"

	"github.com/eddystreams/eddy/task"
)

// migration is what one round's input says of where Assign is heading: the
// target's replicas of every stateful task and the potential Φ, the number
// of those replicas whose client is not caught up on the task.
//
// Φ is what the probing rebalances work off: it falls in every round that
// asks for a follow-up.
//   - a round asks for a follow-up only while Φ > 0: it does so for a target
//     active its client is not caught up on, or for a target replica it
//     could not place, and every caught-up target replica is placed (the
//     active goes to its target client whenever that client is caught up,
//     and caught-up target clients hold the task's replicas before any
//     other);
//   - the next round's input carries the target (Input.Target), and with no
//     event between the two rounds Assign keeps it unless a target computed
//     anew is closer to balance; as each change of target is to one closer
//     to balance, there are finitely many, and in the simulation none;
//   - a caught-up target replica therefore keeps its client caught up into
//     the next round, so no term of Φ comes back;
//   - each target replica that is not caught up either restores this round
//     as a standby (a task short of caught-up clients) or waits for a warmup,
//     and at least one warmup starts (MaxWarmups ≥ 1, warmups for the
//     target's replicas first); a replica that restored or warmed up is
//     caught up in the next round.
//
// So a group whose target holds settles within Φ ≤ stateful tasks ×
// (1+standbys) rounds of an event's first, half of Kafka Streams' bound.
type migration struct {
	target map[task.ID][]string // per stateful task: its target active, then its standbys sorted
	phi    int
}

func migrationOf(cfg Config, in Input) migration {
	r := newRun(cfg.WithDefaults(), in)
	r.assignTarget(in.Target)
	m := migration{target: make(map[task.ID][]string, len(r.sf))}
	for i, t := range r.sf {
		holders := make([]string, 0, len(t.holders))
		for _, c := range t.holders {
			holders = append(holders, r.clients[c].id)
			if !r.caught(i, c) {
				m.phi++
			}
		}
		slices.Sort(holders[1:])
		m.target[t.id] = holders
	}
	return m
}

func (m migration) sameTarget(o migration) bool {
	return maps.EqualFunc(m.target, o.target, slices.Equal)
}

// checkPotential checks one round's potential against the output and the
// round before, which asked for a follow-up (nil for an event's first
// round): a follow-up is asked for only while Φ > 0, and Φ fell. Rounds
// whose target moved are counted; with the target handed on they are none.
func (s *sim) checkPotential(last *migration, now migration, out Output) error {
	if out.FollowupRebalance && now.phi == 0 {
		return fmt.Errorf("a follow-up with every target replica caught up")
	}
	if last == nil {
		return nil
	}
	if !now.sameTarget(*last) {
		s.st.targetMoves++
	}
	if now.phi >= last.phi {
		return fmt.Errorf("the replicas the target waits on did not fall: %d, then %d", last.phi, now.phi)
	}
	return nil
}
