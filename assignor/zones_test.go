package assignor

import (
	"fmt"
	"maps"
	"slices"

	"github.com/eddystreams/eddy/task"
)

// checkRestoringZones checks, in every round, that a standby restoring this
// round (its client not caught up in the round's input) is not in the zone
// of the task's active as it runs this round while the task's replicas span
// fewer zones than they could (1+standbys, or every zone of the group). A
// replica that must restore may as well restore where it widens the spread;
// only replicas kept on caught-up clients may share the active's zone.
func (s *sim) checkRestoringZones(in Input, out Output) error {
	if s.zones == 0 {
		return nil
	}
	zone := func(id string) string { return s.clients[id].tags["zone"] }
	all := map[string]bool{}
	for _, c := range s.clients {
		all[c.tags["zone"]] = true
	}
	k := min(s.cfg.NumStandbys, len(s.clients)-1)
	want := min(1+k, len(all))
	activeZone := map[task.ID]string{}
	spans := map[task.ID]map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(out.Clients)) {
		a := out.Clients[id]
		for _, t := range a.Active {
			activeZone[t] = zone(id)
		}
		for _, t := range slices.Concat(a.Active, a.Standby) {
			if spans[t] == nil {
				spans[t] = map[string]bool{}
			}
			spans[t][zone(id)] = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(out.Clients)) {
		for _, t := range out.Clients[id].Standby {
			lag, ok := effectiveLag(in.Clients[id], t)
			if ok && (lag == LagRunning || lag <= s.cfg.AcceptableRecoveryLag) {
				continue
			}
			if zone(id) == activeZone[t] && len(spans[t]) < want {
				return fmt.Errorf("task %v: standby restoring on %s in its active's zone %s, replicas span %d zones of %d", t, id, zone(id), len(spans[t]), want)
			}
		}
	}
	return nil
}
