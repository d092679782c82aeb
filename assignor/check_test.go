package assignor

import (
	"errors"
	"fmt"
	"slices"

	"github.com/eddystreams/eddy/task"
)

// validate checks the rules every assignment must meet, converged or not.
func validate(cfg Config, in Input, out Output) error {
	cfg = cfg.WithDefaults()
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(out.Clients) != len(in.Clients) {
		fail("output has %d clients, input %d", len(out.Clients), len(in.Clients))
	}
	if len(in.Clients) == 0 {
		return errors.Join(errs...)
	}
	k := min(cfg.NumStandbys, len(in.Clients)-1)
	active := map[task.ID][]string{}
	standby := map[task.ID][]string{}
	warmups := 0
	for id, a := range out.Clients {
		for _, t := range a.Active {
			active[t] = append(active[t], id)
		}
		for _, t := range a.Standby {
			standby[t] = append(standby[t], id)
			if slices.Contains(a.Active, t) {
				fail("task %v: standby colocated with active on %s", t, id)
			}
		}
		for _, t := range a.Warmup {
			warmups++
			if slices.Contains(a.Active, t) || slices.Contains(a.Standby, t) {
				fail("task %v: warmup on %s, which already holds it", t, id)
			}
		}
		for _, l := range [][]task.ID{a.Active, a.Standby, a.Warmup} {
			if !slices.IsSortedFunc(l, task.ID.Compare) {
				fail("client %s: unsorted list %v", id, l)
			}
		}
	}
	if warmups > cfg.MaxWarmups {
		fail("%d warmups, max %d", warmups, cfg.MaxWarmups)
	}
	for t, ti := range in.Tasks {
		if n := len(active[t]); n != 1 {
			fail("task %v: %d actives %v", t, n, active[t])
		}
		want := 0
		if ti.Stateful {
			want = k
		}
		if n := len(standby[t]); n != want {
			fail("task %v: %d standbys %v, want %d", t, n, standby[t], want)
		}
		s := slices.Clone(standby[t])
		slices.Sort(s)
		if len(slices.Compact(s)) != len(standby[t]) {
			fail("task %v: two standbys on one client %v", t, standby[t])
		}
		if ti.Stateful && len(active[t]) == 1 {
			if err := checkWarmPlacement(cfg, in, t, active[t][0]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for t := range active {
		if _, ok := in.Tasks[t]; !ok {
			fail("unknown task %v assigned", t)
		}
	}
	return errors.Join(errs...)
}

// effectiveLag is a client's lag on t as the assignor sees it.
func effectiveLag(cs ClientState, t task.ID) (int64, bool) {
	if slices.Contains(cs.PrevActive, t) {
		return LagRunning, true
	}
	lag, ok := cs.Lags[t]
	if ok && lag < 0 && lag != LagRunning {
		lag = 0
	}
	return lag, ok
}

// checkWarmPlacement checks that stateful task t's active went to a caught-up
// client if there is one, else to a most caught-up one.
func checkWarmPlacement(cfg Config, in Input, t task.ID, got string) error {
	caught := false
	best := lagUnknown
	for _, cs := range in.Clients {
		if lag, ok := effectiveLag(cs, t); ok {
			caught = caught || lag == LagRunning || lag <= cfg.AcceptableRecoveryLag
			best = min(best, lag)
		}
	}
	lag, ok := effectiveLag(in.Clients[got], t)
	switch {
	case caught && !(ok && (lag == LagRunning || lag <= cfg.AcceptableRecoveryLag)):
		return fmt.Errorf("task %v: active on %s, which is not caught up (lag %d, has %v), while another client is", t, got, lag, ok)
	case !caught && best != lagUnknown && lag != best:
		return fmt.Errorf("task %v: active on %s with lag %d, not the most caught up (%d)", t, got, lag, best)
	}
	return nil
}

// balanced checks the per-thread balance of a converged assignment: stateful
// actives, all actives and (when tags do not constrain them) stateful
// replicas. Each thread's count is within one of any other thread's, clients
// that hold every stateful task aside for replicas.
func balanced(in Input, out Output, checkReplicas bool) error {
	var errs []error
	ns := 0
	for _, ti := range in.Tasks {
		if ti.Stateful {
			ns++
		}
	}
	type load struct{ sfActive, active, replicas, cap int }
	loads := map[string]load{}
	for id, a := range out.Clients {
		l := load{cap: max(1, in.Clients[id].Capacity)}
		for _, t := range a.Active {
			l.active++
			if in.Tasks[t].Stateful {
				l.sfActive++
				l.replicas++
			}
		}
		l.replicas += len(a.Standby)
		loads[id] = l
	}
	check := func(what string, get func(load) int, saturate int) {
		hiCeil, loFloor := -1, -1
		for _, l := range loads {
			n := get(l)
			hiCeil = max(hiCeil, (n+l.cap-1)/l.cap)
			if saturate > 0 && n >= saturate {
				continue
			}
			if f := n / l.cap; loFloor < 0 || f < loFloor {
				loFloor = f
			}
		}
		if loFloor >= 0 && hiCeil-loFloor > 1 {
			errs = append(errs, fmt.Errorf("%s per thread unbalanced: max %d, min %d (%v)", what, hiCeil, loFloor, loads))
		}
	}
	check("stateful actives", func(l load) int { return l.sfActive }, 0)
	check("actives", func(l load) int { return l.active }, 0)
	if checkReplicas {
		check("stateful replicas", func(l load) int { return l.replicas }, ns)
	}
	return errors.Join(errs...)
}

// balancedByClient checks the balance across clients of a converged
// assignment: for stateful actives, all actives and (when tags do not
// constrain them) stateful replicas there is a level λ with
// λ·capacity ≤ n ≤ λ·capacity+1 for every client's count n, which holds
// exactly when (n_a-1)/cap_a ≤ n_b/cap_b for every two clients a and b.
// Clients that hold every stateful task are left out for replicas.
func balancedByClient(in Input, out Output, checkReplicas bool) error {
	ns := 0
	for _, ti := range in.Tasks {
		if ti.Stateful {
			ns++
		}
	}
	var errs []error
	check := func(what string, count func(ClientAssignment) int, saturate int) {
		for a, x := range out.Clients {
			na, ca := count(x), max(1, in.Clients[a].Capacity)
			if saturate > 0 && na >= saturate {
				continue
			}
			for b, y := range out.Clients {
				nb, cb := count(y), max(1, in.Clients[b].Capacity)
				if saturate > 0 && nb >= saturate {
					continue
				}
				if (na-1)*cb > nb*ca {
					errs = append(errs, fmt.Errorf("%s unbalanced across clients: %s holds %d with capacity %d, %s %d with capacity %d", what, a, na, ca, b, nb, cb))
					return
				}
			}
		}
	}
	sfActive := func(x ClientAssignment) int {
		n := 0
		for _, t := range x.Active {
			if in.Tasks[t].Stateful {
				n++
			}
		}
		return n
	}
	check("stateful actives", sfActive, 0)
	check("actives", func(x ClientAssignment) int { return len(x.Active) }, 0)
	if checkReplicas {
		check("stateful replicas", func(x ClientAssignment) int { return sfActive(x) + len(x.Standby) }, ns)
	}
	return errors.Join(errs...)
}
