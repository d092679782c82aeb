package assignor

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/eddystreams/eddy/task"
)

// The convergence simulation drives Assign the way a group would: random
// clusters go through random events (clients added, dropped, restarted with
// their old state), and after each event the group rebalances until no
// follow-up is requested, each round reporting the previous round's replicas
// as caught up. Every round must be valid; every converged assignment must be
// balanced, tag-spread and stable; convergence must take at most
// 2·(stateful tasks)·(1+standbys) rounds.
//
// EDDY_ASSIGNOR_SIM_ITERATIONS sets the number of random clusters (default
// 100); EDDY_ASSIGNOR_SIM_SEED replays one cluster.
func TestConvergence(t *testing.T) {
	iterations := 100
	if s := os.Getenv("EDDY_ASSIGNOR_SIM_ITERATIONS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("EDDY_ASSIGNOR_SIM_ITERATIONS: %v", err)
		}
		iterations = n
	}
	base := uint64(time.Now().UnixNano())
	if s := os.Getenv("EDDY_ASSIGNOR_SIM_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("EDDY_ASSIGNOR_SIM_SEED: %v", err)
		}
		base, iterations = n, 1
	}
	for i := range iterations {
		seed := base + uint64(i)
		if err := simulate(seed); err != nil {
			t.Fatalf("seed %d (replay with EDDY_ASSIGNOR_SIM_SEED=%d): %v", seed, seed, err)
		}
	}
}

// staleDrift is how far state on disk that is no longer assigned falls
// behind per round.
const staleDrift = 4_000

type simClient struct {
	cap         int
	tags        map[string]string
	lags        map[task.ID]int64
	prevActive  []task.ID
	prevStandby []task.ID
}

type sim struct {
	rng     *rand.Rand
	cfg     Config
	tasks   map[task.ID]TaskInfo
	clients map[string]*simClient
	nextID  int
	zones   int
	log     []string
}

func simulate(seed uint64) error {
	s := &sim{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), clients: map[string]*simClient{}}
	s.cfg = DefaultConfig()
	s.cfg.NumStandbys = s.rng.IntN(4)
	s.cfg.MaxWarmups = 1 + s.rng.IntN(3)
	if s.rng.IntN(3) == 0 {
		s.cfg.RackAwareTags = []string{"zone"}
		s.zones = 1 + s.rng.IntN(3)
	}
	s.tasks = map[task.ID]TaskInfo{}
	for sub := range 1 + s.rng.IntN(10) {
		stateful := s.rng.IntN(2) == 0
		for p := range 1 + s.rng.IntN(10) {
			s.tasks[task.ID{SubTopology: sub, Partition: int32(p)}] = TaskInfo{Stateful: stateful}
		}
	}
	for range 1 + s.rng.IntN(10) {
		s.addClient()
	}
	s.log = append(s.log, fmt.Sprintf("cluster: %d tasks, %d clients, config %+v", len(s.tasks), len(s.clients), s.cfg))
	if err := s.converge(); err != nil {
		return s.wrap(err)
	}
	for range 8 {
		switch ev := s.rng.IntN(3); {
		case ev == 0 || len(s.clients) == 1:
			id := s.addClient()
			s.log = append(s.log, "add "+id)
		case ev == 1:
			id := s.pick()
			delete(s.clients, id)
			s.log = append(s.log, "drop "+id)
		default:
			id := s.pick()
			c := s.clients[id]
			for t, l := range c.lags {
				if l == LagRunning {
					c.lags[t] = 0
				}
			}
			c.prevActive, c.prevStandby = nil, nil
			s.log = append(s.log, "restart "+id)
		}
		if err := s.converge(); err != nil {
			return s.wrap(err)
		}
	}
	return nil
}

func (s *sim) wrap(err error) error {
	return fmt.Errorf("%w\nhistory:\n  %s", err, fmtLines(s.log))
}

func fmtLines(l []string) string {
	out := ""
	for i, x := range l {
		if i > 0 {
			out += "\n  "
		}
		out += x
	}
	return out
}

func (s *sim) addClient() string {
	id := fmt.Sprintf("client-%03d", s.nextID)
	s.nextID++
	c := &simClient{cap: 1 + s.rng.IntN(3), lags: map[task.ID]int64{}}
	if s.zones > 0 {
		c.tags = map[string]string{"zone": fmt.Sprintf("z%d", s.rng.IntN(s.zones))}
	}
	s.clients[id] = c
	return id
}

func (s *sim) pick() string {
	ids := make([]string, 0, len(s.clients))
	for id := range s.clients {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids[s.rng.IntN(len(ids))]
}

func (s *sim) input() Input {
	in := Input{Tasks: s.tasks, Clients: map[string]ClientState{}}
	for id, c := range s.clients {
		in.Clients[id] = ClientState{
			Capacity:    c.cap,
			Tags:        c.tags,
			PrevActive:  slices.Clone(c.prevActive),
			PrevStandby: slices.Clone(c.prevStandby),
			Lags:        maps.Clone(c.lags),
		}
	}
	return in
}

// apply makes the group run out until the next rebalance: every replica it
// names catches up, everything else on disk falls further behind.
func (s *sim) apply(out Output) {
	for id, c := range s.clients {
		a := out.Clients[id]
		for t, l := range c.lags {
			c.lags[t] = min(max(l, 0)+staleDrift, 1_000_000)
		}
		for _, t := range a.Active {
			if s.tasks[t].Stateful {
				c.lags[t] = LagRunning
			}
		}
		for _, t := range slices.Concat(a.Standby, a.Warmup) {
			c.lags[t] = 0
		}
		c.prevActive = slices.Clone(a.Active)
		c.prevStandby = slices.Concat(a.Standby, a.Warmup)
	}
}

func (s *sim) converge() error {
	ns := 0
	for _, ti := range s.tasks {
		if ti.Stateful {
			ns++
		}
	}
	k := min(s.cfg.NumStandbys, len(s.clients)-1)
	limit := max(1, 2*ns*(1+k))
	for round := 1; ; round++ {
		in := s.input()
		out := Assign(s.cfg, in)
		if err := validate(s.cfg, in, out); err != nil {
			return fmt.Errorf("round %d invalid: %w", round, err)
		}
		s.apply(out)
		if out.FollowupRebalance {
			if round >= limit {
				return fmt.Errorf("no convergence after %d rounds", round)
			}
			continue
		}
		if w := warmupsOf(out); len(w) > 0 {
			return fmt.Errorf("round %d: no follow-up but warmups %v", round, w)
		}
		var errs []error
		errs = append(errs, balanced(in, out, s.zones == 0))
		errs = append(errs, s.checkSpread(out))
		// A converged group that rebalances again keeps its assignment.
		if again := Assign(s.cfg, s.input()); !equalOutputs(again, out) {
			errs = append(errs, fmt.Errorf("converged assignment not stable:\n%v\nthen\n%v", out, again))
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("converged after %d rounds: %w", round, err)
		}
		s.log = append(s.log, fmt.Sprintf("  converged in %d rounds (limit %d)", round, limit))
		return nil
	}
}

// checkSpread checks that each stateful task's replicas span as many zones as
// the cluster allows.
func (s *sim) checkSpread(out Output) error {
	if s.zones == 0 {
		return nil
	}
	all := map[string]bool{}
	for _, c := range s.clients {
		all[c.tags["zone"]] = true
	}
	zones := map[task.ID]map[string]bool{}
	for id, a := range out.Clients {
		for _, t := range slices.Concat(a.Active, a.Standby) {
			if s.tasks[t].Stateful {
				if zones[t] == nil {
					zones[t] = map[string]bool{}
				}
				zones[t][s.clients[id].tags["zone"]] = true
			}
		}
	}
	k := min(s.cfg.NumStandbys, len(s.clients)-1)
	for t, zs := range zones {
		if want := min(1+k, len(all)); len(zs) != want {
			return fmt.Errorf("task %v spans %d zones, want %d", t, len(zs), want)
		}
	}
	return nil
}

func equalOutputs(a, b Output) bool {
	if a.FollowupRebalance != b.FollowupRebalance || len(a.Clients) != len(b.Clients) {
		return false
	}
	for id, x := range a.Clients {
		y := b.Clients[id]
		if !slices.Equal(x.Active, y.Active) || !slices.Equal(x.Standby, y.Standby) || !slices.Equal(x.Warmup, y.Warmup) {
			return false
		}
	}
	return true
}
