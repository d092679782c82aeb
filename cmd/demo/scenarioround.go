package main

// A round of the scenario: the kill, the failover it watches, the restart
// with the old state directory, and the restarted instance catching up.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/task"
)

// kill kills the instance running the most actives (rotating among equals
// from round to round).
func (sc *scenario) kill(now time.Time) {
	d := sc.d
	ups := d.upSlots()
	actives := func(sl *slot) []int32 {
		var ps []int32
		for _, ri := range sl.replicas {
			if ri.State == task.Running || ri.State == task.Restoring {
				ps = append(ps, ri.Partition)
			}
		}
		return ps
	}
	n := len(sc.rounds)
	k := n % len(ups)
	rotated := append(slices.Clone(ups[k:]), ups[:k]...)
	victim := slices.MaxFunc(rotated, func(a, b *slot) int {
		return len(actives(a)) - len(actives(b))
	})
	r := &round{victim: victim, parts: actives(victim), takeovers: make(map[int32]*takeover),
		killBase: make(map[*slot]map[int32]int64), preKill: make(map[int32]int64), initialPos: make(map[int32]int64)}
	var holders []string
	for _, p := range r.parts {
		tk := &takeover{}
		for _, sl := range ups {
			for _, ri := range sl.replicas {
				if sl != victim && ri.Partition == p && ri.State == task.Standby {
					tk.standby = sl
					holders = append(holders, fmt.Sprintf("%d on %s", p, sl.name))
				}
			}
		}
		r.takeovers[p] = tk
	}
	for _, sl := range ups {
		r.killBase[sl] = maps.Clone(sl.restoreBase)
	}
	for _, ri := range victim.replicas {
		r.preKill[ri.Partition] = ri.Position
	}
	t := d.queries.totals()
	r.answered, r.refused = t.answered, t.refused
	sb := "it has no standbys, so the new actives restore from their changelogs"
	if len(holders) > 0 {
		sb = "their standbys: " + strings.Join(holders, ", ")
	}
	d.event(fmt.Sprintf("killing %s hard (network cut: no commit, no leave-group). It runs partitions %s as active; %s. The group notices after its %s session timeout, and counting pauses until the broker aborts its open transaction (%s timeout); meanwhile the routing client keeps answering from other replicas",
		victim.name, partitionList(r.parts), sb, demoSessionTimeout, demoTransactionTimeout))
	r.killAt = time.Now()
	d.kill(victim)
	d.queries.watchFailover(victim.addr, r.parts, r.killAt)
	sc.rounds = append(sc.rounds, r)
	sc.enter(phaseDown, now)
}

// holderOf finds the running instance, other than the victim, holding
// partition p as an active (running or restoring).
func (sc *scenario) holderOf(p int32) (*slot, runtime.ReplicaInfo, bool) {
	for _, sl := range sc.d.upSlots() {
		for _, ri := range sl.replicas {
			if ri.Partition == p && (ri.State == task.Running || ri.State == task.Restoring) {
				return sl, ri, true
			}
		}
	}
	return nil, runtime.ReplicaInfo{}, false
}

// watchFailover announces each partition of the killed instance being
// taken over, and restarts the instance once all are running elsewhere and
// the step has lasted long enough.
func (sc *scenario) watchFailover(now time.Time) error {
	d, r := sc.d, sc.current()
	since := func(t time.Time) string { return fmt.Sprintf("%.1fs after the kill", t.Sub(r.killAt).Seconds()) }
	for _, p := range r.parts {
		tk := r.takeovers[p]
		sl, ri, ok := sc.holderOf(p)
		if !ok || !tk.runningAt.IsZero() {
			continue
		}
		from := "without a standby there: restoring from its changelog"
		if tk.standby == sl {
			from = "promoting its standby: restoring only the changelog's tail"
		}
		if ri.State == task.Restoring && tk.restoringAt.IsZero() {
			tk.slot, tk.restoringAt = sl, now
			togo := "how far is not known yet"
			if ri.Lag >= 0 {
				togo = records(ri.Lag) + " to go"
			}
			d.event(fmt.Sprintf("partition %d: %s took it over %s, %s (%s)", p, sl.name, since(now), from, togo))
		}
		if ri.State == task.Running {
			tk.slot, tk.runningAt = sl, now
			tk.tail = ri.Restored - r.killBase[sl][p]
			tk.end = ri.Position
			how := "it had no standby there"
			if tk.standby == sl {
				how = "its standby was promoted"
			}
			d.event(fmt.Sprintf("partition %d: active again on %s %s; %s and restored %s, of %s in its changelog",
				p, sl.name, since(now), how, records(tk.tail), thousands(tk.end)))
		}
	}
	if r.failoverAt.IsZero() {
		done := true
		for _, p := range r.parts {
			done = done && !r.takeovers[p].runningAt.IsZero()
		}
		if done {
			r.failoverAt = now
			t := d.queries.totals()
			d.event(fmt.Sprintf("failover complete %s: every partition %s ran is active on a survivor. Since the kill, %s queries answered and %s refused",
				since(now), r.victim.name, thousands(t.answered-r.answered), thousands(t.refused-r.refused)))
		} else if now.Sub(r.killAt) > settleDeadline {
			var missing []int32
			for _, p := range r.parts {
				if r.takeovers[p].runningAt.IsZero() {
					missing = append(missing, p)
				}
			}
			return fmt.Errorf("failover did not complete within %s: partitions %s have no running active", settleDeadline, partitionList(missing))
		}
	}
	if !r.failoverAt.IsZero() && now.Sub(r.killAt) >= scale(d.cfg.duration, downShare) {
		sc.restart(now)
	}
	return nil
}

// watchHandBack announces the restarted instance's warmups becoming
// actives.
func (sc *scenario) watchHandBack() {
	if len(sc.rounds) == 0 {
		return
	}
	r := sc.current()
	if len(r.warmups) == 0 || r.victim.in == nil {
		return
	}
	var got []int32
	for _, ri := range r.victim.replicas {
		if r.warmups[ri.Partition] && ri.State == task.Running {
			got = append(got, ri.Partition)
			delete(r.warmups, ri.Partition)
		}
	}
	if len(got) > 0 {
		sc.d.event(fmt.Sprintf("%s's warmups of partitions %s caught up, and the group's probing rebalance gave it their actives back", r.victim.name, partitionList(got)))
	}
}

// restart starts the killed instance again with its state directory, in
// the background.
func (sc *scenario) restart(now time.Time) {
	d, r := sc.d, sc.current()
	sl := r.victim
	d.event(fmt.Sprintf("restarting %s with its old state directory %s", sl.name, sl.dir))
	sl.state = stateStarting
	r.restartAt = now
	sc.enter(phaseRestarting, now)
	sc.restartPending = true
	go func() {
		in, err := d.startSlot(context.Background(), sl)
		sc.restarted <- restartResult{sl: sl, in: in, err: err}
	}()
}

// back records the restarted instance.
func (sc *scenario) back(res restartResult) error {
	sc.restartPending = false
	if res.err != nil {
		return fmt.Errorf("restart %s: %w", res.sl.name, res.err)
	}
	d, r := sc.d, sc.current()
	d.up(res.sl, res.in)
	r.backAt = time.Now()
	d.event(fmt.Sprintf("%s is back on %s with its old process ID %s, rejoining the group", res.sl.name, res.in.addr, res.in.app.ProcessID()))
	if sc.phase == phaseRestarting {
		sc.enter(phaseRecovering, r.backAt)
	}
	return nil
}

// watchRecovery waits for the restarted instance to catch up, then ends
// the round.
func (sc *scenario) watchRecovery(now time.Time) error {
	d, r := sc.d, sc.current()
	sl := r.victim
	for _, ri := range sl.replicas {
		if _, ok := r.initialPos[ri.Partition]; !ok {
			pos := ri.Position
			if pre, ok := r.preKill[ri.Partition]; ok {
				pos = min(pos, pre)
			}
			r.initialPos[ri.Partition] = pos
		}
	}
	if r.caughtUpAt.IsZero() {
		ok := len(sl.replicas) > 0 && sl.in.app.Ready()
		for _, ri := range sl.replicas {
			ok = ok && ri.Lag >= 0 && ri.Lag <= caughtUpLag &&
				(ri.State == task.Running || ri.State == task.Standby || ri.State == task.Warmup)
		}
		if settled, _ := sc.settled(); !ok || !settled {
			if now.Sub(r.backAt) > settleDeadline {
				return fmt.Errorf("%s did not catch up within %s of restarting", sl.name, settleDeadline)
			}
			return nil
		}
		r.caughtUpAt = now
		var holds []string
		var keptRead, keptSize int64
		for _, ri := range sl.replicas {
			read := max(ri.Position-r.initialPos[ri.Partition], 0)
			if ri.State == task.Running {
				// A restoration faster than a poll shows in Restored
				// rather than in positions.
				read = max(read, ri.Restored)
			}
			size := max(ri.End, ri.Position)
			r.caughtRead += read
			r.caughtSize += size
			if _, kept := r.preKill[ri.Partition]; kept {
				keptRead += read
				keptSize += size
			}
			holds = append(holds, fmt.Sprintf("%d %s", ri.Partition, roleName(ri.State)))
			if ri.State == task.Warmup {
				if r.warmups == nil {
					r.warmups = make(map[int32]bool)
				}
				r.warmups[ri.Partition] = true
			}
		}
		r.keptRead, r.keptSize = keptRead, keptSize
		d.event(fmt.Sprintf("%s caught up %.1fs after restarting, holding partitions %s. It reopened its stores at their old positions and read %s changelog records, not all %s its partitions' changelogs hold%s",
			sl.name, now.Sub(r.restartAt).Seconds(), strings.Join(holds, ", "), thousands(r.caughtRead), thousands(r.caughtSize), r.keptClause()))
	}
	sc.watchHandBack()
	if now.Sub(r.restartAt) < scale(d.cfg.duration, recoverShare) {
		return nil
	}
	r.endAt = now
	if d.cfg.forever {
		d.event(fmt.Sprintf("round %d complete; the next kill comes in %s", len(sc.rounds), scale(d.cfg.duration, gapShare).Round(time.Second)))
		sc.enter(phaseRunning, now)
		return nil
	}
	d.event("scenario complete; feeding text until the end of the run")
	sc.enter(phaseSteady, now)
	return nil
}
