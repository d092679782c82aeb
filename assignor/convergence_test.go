package assignor

import (
	"errors"
	"fmt"
	"maps"
	"math"
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
// Every round must also bound restoration. A replica (active, standby or
// warmup) of a stateful task restores when its client is not caught up on
// the task in the round's input (its lag is above AcceptableRecoveryLag, or
// it has no state and the changelog is not known to be short); it restores
// from scratch when the client has no state for the task at all. A task's
// shortfall is max(0, 1+standbys-c) for c clients caught up on it: the
// replicas that have nowhere warm to go. Each round restores at most
// MaxWarmups plus the sum of the shortfalls. Converged assignments must be
// balanced per client by capacity (a level λ with λ·cap ≤ n ≤ λ·cap+1 for
// every client), every round's active load must be within one task per
// thread of that balance for clients holding stateless tasks
// (checkMigrationBalance), a standby that restores must leave its active's
// zone while the task spans fewer zones than it could (checkRestoringZones),
// each sub-topology must be spread in the first
// round of a new group (at most one active above a client's share), and
// while the group converges after one event no stateful task's active may
// change owner more than moveLimit times, no stateless task more than
// statelessMoveLimit times. Every round is also checked against the
// potential (checkPotential) and every join and leave against Kafka
// Streams' stickiness as stickiness_test.go counts it.
//
// EDDY_ASSIGNOR_SEEDS sets the number of random clusters (default 300,
// from seed 1; EDDY_ASSIGNOR_SEED_BASE sets another first seed, or random);
// EDDY_ASSIGNOR_SIM_SEED replays one cluster and logs every round's loads
// and changes of owner. TestConvergence logs the restoration, movement and
// sub-topology figures.
func TestConvergence(t *testing.T) {
	iterations := 300
	if testing.Short() {
		iterations = 50
	}
	for _, env := range []string{"EDDY_ASSIGNOR_SIM_ITERATIONS", "EDDY_ASSIGNOR_SEEDS"} {
		if s := os.Getenv(env); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("%s: %v", env, err)
			}
			iterations = n
		}
	}
	// The same clusters every run, so that a failure is the change's and
	// replays; EDDY_ASSIGNOR_SEED_BASE=random explores others.
	base, trace := uint64(1), false
	switch s := os.Getenv("EDDY_ASSIGNOR_SEED_BASE"); s {
	case "":
	case "random":
		base = uint64(time.Now().UnixNano())
		t.Logf("seeds from %d", base)
	default:
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("EDDY_ASSIGNOR_SEED_BASE: %v", err)
		}
		base = n
	}
	if s := os.Getenv("EDDY_ASSIGNOR_SIM_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("EDDY_ASSIGNOR_SIM_SEED: %v", err)
		}
		base, iterations = n, 1
		trace = true
	}
	st := simStats{trace: trace, joinStatefulMax: math.MinInt}
	for i := range iterations {
		seed := base + uint64(i)
		if err := simulate(seed, &st); err != nil {
			t.Fatalf("seed %d (replay with EDDY_ASSIGNOR_SIM_SEED=%d): %v", seed, seed, err)
		}
	}
	t.Logf("joins %d: the most stateful actives moved, less the bound ceil(T·cap/Σcap)+1, %d; all actives above it %d times, by at most %d (hand-overs by at most %d)",
		st.joins, st.joinStatefulMax, st.joinBad, st.joinExcess, st.joinHandovers)
	t.Logf("leaves %d: other clients' stateless actives moved in %d, at most %d",
		st.leaves, st.leaveBad, st.leaveMoved)
	t.Logf("joins and leaves %d: the clients that stay lost %d stateless tasks, each event as many as the balance of its final stateful actives forces; Kafka Streams' placement from the same assignment moves %d, from its own placement before the event %d (more than Eddy in %d events, by at most %d)",
		st.ks.events, st.ks.ours, st.ks.ksFromOurs, st.ks.ks, st.ks.above, st.ks.worst)
	t.Logf("of the %d joins above the bound and leaves that moved other clients' stateless tasks, %d would have needed fewer stateless moves (by at most %d) with other counts of stateful actives per client within their balance, %d (%d joins) with every stateful active on a client as warm as Assign's",
		st.forcedChecked, st.forcedByChoice, st.forcedByChoiceGap, st.forcedByWarmChoice, st.forcedByWarmChoiceJoins)
	t.Logf("of the %d leaves that moved other clients' stateless tasks, %d must under any balanced count of stateful actives per client, %d could not without a colder home for a lost stateful active, %d only with one off its input leaders' rack, %d with every one as warm and as near its rack; %d could have moved fewer but some with every one as warm, only with one off its rack",
		st.leaveBad, st.leaveSplit.forced, st.leaveSplit.restoring, st.leaveSplit.offRack, st.leaveSplit.equalWarmth, st.leaveSplit.someOffRack)
	t.Logf("of the %d joins above the bound, each moving as few as any balanced count of stateful actives per client as warm and as near their racks, %d are where no balanced count stays within it, %d where only one giving the joiner an active off its input leaders' rack does",
		st.joinBad, st.joinSplit.noneWithin, st.joinSplit.offRack)
	t.Logf("the target moved in %d rounds after the first of an event", st.targetMoves)
	t.Logf("%d clusters, %d rounds: restorations per round max %d mean %.2f; from scratch max %d mean %.2f; "+
		"restorations above the shortfall (warmups) max %d; owner changes per task per event max %d (stateless %d); "+
		"converged sub-topology excess max %d",
		iterations, st.rounds, st.maxRestore, float64(st.restore)/float64(max(st.rounds, 1)),
		st.maxScratch, float64(st.scratch)/float64(max(st.rounds, 1)), st.maxExtra, st.maxMoves, st.maxStatelessMoves, st.maxSubExcess)
	t.Logf("sub-topology excess: new groups max %d; converged, where the client received a task of it max %d stateful, %d stateless", st.maxSubExcessNew, st.maxSubExcessMoved, st.maxSubExcessMovedSL)
	t.Logf("balance in every round: a client holding a stateless task at most %.2f tasks per thread above another, less one task", st.maxMigrationDev)
	t.Logf("stateless tasks that moved once, twice, three times or more in an event: %v; back where they started: %d", st.statelessMoved[1:], st.statelessBack)
}

// simStats accumulates figures over a simulation run.
type simStats struct {
	rounds, restore, scratch int
	maxRestore, maxScratch   int
	maxExtra, maxMoves       int
	maxStatelessMoves        int
	statelessMoved           [4]int // stateless tasks per event by owner changes (3 for 3 or more)
	statelessBack            int    // of those that moved, how many ended where they started
	maxSubExcess             int
	maxSubExcessMoved        int // over sub-topologies a client received a task of
	maxSubExcessNew          int // in new groups
	maxSubExcessMovedSL      int
	maxMigrationDev          float64 // (n_a-1)/cap_a - n_b/cap_b over clients a holding a stateless task
	trace                    bool
	targetMoves              int // rounds whose target differs from the round before's
	joinExcess, joinBad      int // most actives moved above the bound on a join, joins above it
	leaveMoved, leaveBad     int // most actives of others moved on a leave, leaves that moved any
	joins, leaves            int
	joinHandovers            int // most hand-overs above the bound on a join
	joinStatefulMax          int // most stateful actives moved on a join less the bound
	ks                       ksStats
	forcedChecked            int // joins above the bound and leaves moving others' stateless tasks
	forcedByChoice           int // of those, how many another choice of stateful actives forces fewer stateless moves
	forcedByChoiceGap        int // by at most
	forcedByWarmChoice       int // of those, how many with every stateful active on a client as warm
	forcedByWarmChoiceJoins  int // of those, joins
	leaveSplit               leaveSplit
	joinSplit                joinSplit
	ksErr                    error
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
	rng       *rand.Rand
	cfg       Config
	tasks     map[task.ID]TaskInfo
	taskRacks map[task.ID][]string
	clients   map[string]*simClient
	gone      map[string]*simClient // clients that left, with the state they left with
	ends      map[task.ID]int64
	// eventIn is the input of the last event's first round.
	eventIn Input
	// target is the last round's Output.Target, dropped by every event.
	target Target
	// dropState makes a client forget the state of a task it no longer
	// holds, as Kafka Streams' convergence harness does; otherwise that
	// state stays on disk and falls behind by staleDrift a round.
	dropState bool
	nextID    int
	// joined and left name the client the last event added or dropped.
	joined, left string
	zones        int
	racks        int
	log          []string
	st           *simStats
	trace        bool // log every change of owner
}

func simulate(seed uint64, st *simStats) error {
	s := &sim{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), clients: map[string]*simClient{}, gone: map[string]*simClient{}, st: st, trace: st.trace}
	s.cfg = DefaultConfig()
	s.cfg.NumStandbys = s.rng.IntN(4)
	s.cfg.MaxWarmups = 1 + s.rng.IntN(3)
	if s.rng.IntN(2) == 0 {
		// Kafka Streams' harness: changelogs of 150 records, a lag of 100
		// acceptable, and state forgotten once unassigned.
		s.cfg.AcceptableRecoveryLag = 100
		s.dropState = true
	}
	if s.rng.IntN(3) == 0 {
		s.cfg.RackAwareTags = []string{"zone"}
		s.zones = 1 + s.rng.IntN(3)
	}
	if s.rng.IntN(4) == 0 {
		// Actives prefer the rack of their input leaders; a zone each.
		s.cfg.ActiveRackTag = "rack"
		s.racks = 1 + s.rng.IntN(3)
	}
	s.tasks = map[task.ID]TaskInfo{}
	s.taskRacks = map[task.ID][]string{}
	for sub := range 1 + s.rng.IntN(10) {
		stateful := s.rng.IntN(2) == 0
		for p := range 1 + s.rng.IntN(10) {
			id := task.ID{SubTopology: sub, Partition: int32(p)}
			s.tasks[id] = TaskInfo{Stateful: stateful}
			if s.racks > 0 {
				s.taskRacks[id] = []string{fmt.Sprintf("r%d", s.rng.IntN(s.racks))}
			}
		}
	}
	if s.dropState {
		s.ends = map[task.ID]int64{}
		for id, ti := range s.tasks {
			if ti.Stateful {
				s.ends[id] = 150
			}
		}
	}
	for range 1 + s.rng.IntN(10) {
		s.addClient()
	}
	s.log = append(s.log, fmt.Sprintf("cluster: %d tasks, %d clients, config %+v", len(s.tasks), len(s.clients), s.cfg))
	// The rack preference of actives outweighs sub-topology spread.
	if err := s.checkSubTopologies(Assign(s.cfg, s.input())); err != nil && s.racks == 0 {
		return s.wrap(fmt.Errorf("new group: %w", err))
	}
	if err := s.converge(); err != nil {
		return s.wrap(err)
	}
	for range 8 {
		s.joined, s.left = "", ""
		s.event()
		if err := s.converge(); err != nil {
			return s.wrap(err)
		}
	}
	return nil
}

// event changes the group at random: a client joins new, leaves, returns
// with the state it left with, restarts with its state on disk and nothing
// running, or changes its number of threads.
func (s *sim) event() {
	s.target = nil
	switch ev := s.rng.IntN(5); {
	case ev == 0 || len(s.clients) == 1:
		id := s.addClient()
		s.log = append(s.log, "add "+id)
		s.joined = id
	case ev == 1:
		id := s.pick()
		s.gone[id] = s.clients[id]
		delete(s.clients, id)
		s.log = append(s.log, "drop "+id)
		s.left = id
	case ev == 2 && len(s.gone) > 0:
		ids := slices.Sorted(maps.Keys(s.gone))
		id := ids[s.rng.IntN(len(ids))]
		s.clients[id] = s.gone[id]
		delete(s.gone, id)
		s.log = append(s.log, "return "+id)
	case ev == 4:
		id := s.pick()
		s.clients[id].cap = 1 + s.rng.IntN(3)
		s.log = append(s.log, fmt.Sprintf("capacity %s %d", id, s.clients[id].cap))
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
	c.tags = map[string]string{}
	if s.zones > 0 {
		c.tags["zone"] = fmt.Sprintf("z%d", s.rng.IntN(s.zones))
	}
	if s.racks > 0 {
		c.tags["rack"] = fmt.Sprintf("r%d", s.rng.IntN(s.racks))
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
	in := Input{Tasks: s.tasks, Clients: map[string]ClientState{}, TaskRacks: s.taskRacks, Ends: s.ends, Target: s.target}
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
	s.target = out.Target
	for id, c := range s.clients {
		a := out.Clients[id]
		for t, l := range c.lags {
			if s.dropState {
				delete(c.lags, t)
			} else {
				c.lags[t] = min(max(l, 0)+staleDrift, 1_000_000)
			}
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

// converge rebalances the group after an event until no follow-up is asked
// for, checking every round and then the settled assignment.
func (s *sim) converge() error {
	ns := 0
	for _, ti := range s.tasks {
		if ti.Stateful {
			ns++
		}
	}
	k := min(s.cfg.NumStandbys, len(s.clients)-1)
	limit := max(1, 2*ns*(1+k))
	moves := map[task.ID]int{}
	var start map[task.ID]string // owners before the event
	var last *migration
	for round := 1; ; round++ {
		in := s.input()
		out := Assign(s.cfg, in)
		now := migrationOf(s.cfg, in)
		if err := s.checkRound(in, out, last, now); err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		last = &now
		prev := prevOwners(in)
		s.traceLoads(round, out)
		if start == nil {
			start = prev
			s.eventIn = in
			if err := s.eventFirstRound(prev, owners(out)); err != nil {
				return fmt.Errorf("round %d: %w", round, err)
			}
		}
		if err := s.countMoves(round, prev, owners(out), moves); err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		s.apply(out)
		if out.FollowupRebalance {
			if round >= limit {
				return fmt.Errorf("no convergence after %d rounds", round)
			}
			continue
		}
		s.recordStatelessMoves(start, owners(out), moves)
		if err := s.checkSettled(in, out, start, moves); err != nil {
			return fmt.Errorf("converged after %d rounds: %w", round, err)
		}
		s.log = append(s.log, fmt.Sprintf("  converged in %d rounds (limit %d)", round, limit))
		return nil
	}
}

// checkRound checks what every round must meet: validity, the potential
// (last is the round before's migration, nil in an event's first), the
// bound on restorations, the zones of restoring standbys and the balance
// of the total load.
func (s *sim) checkRound(in Input, out Output, last *migration, now migration) error {
	if err := validate(s.cfg, in, out); err != nil {
		return fmt.Errorf("invalid: %w", err)
	}
	if err := s.checkPotential(last, now, out); err != nil {
		return err
	}
	if err := s.checkRestoration(in, out); err != nil {
		return err
	}
	if err := s.checkRestoringZones(in, out); err != nil {
		return err
	}
	return s.checkMigrationBalance(in, out)
}

// prevOwners returns the owner of every active the clients of in ran.
func prevOwners(in Input) map[task.ID]string {
	m := map[task.ID]string{}
	for id, cs := range in.Clients {
		for _, t := range cs.PrevActive {
			m[t] = id
		}
	}
	return m
}

// traceLoads logs each client's loads in a replayed cluster.
func (s *sim) traceLoads(round int, out Output) {
	if !s.trace {
		return
	}
	line := fmt.Sprintf("    round %d loads:", round)
	for _, id := range slices.Sorted(maps.Keys(out.Clients)) {
		a, sfn := out.Clients[id], 0
		for _, t := range a.Active {
			if s.tasks[t].Stateful {
				sfn++
			}
		}
		line += fmt.Sprintf(" %s(cap %d %s): %d sf + %d sl, %d warm;", id[len(id)-3:], s.clients[id].cap, s.clients[id].tags["rack"], sfn, len(a.Active)-sfn, len(a.Warmup))
	}
	s.log = append(s.log, line)
}

// countMoves adds the round's changes of owner, from prev to now, to
// moves and fails where a task changed owner more often than its limit
// since the event.
func (s *sim) countMoves(round int, prev, now map[task.ID]string, moves map[task.ID]int) error {
	for _, t := range slices.SortedFunc(maps.Keys(now), task.ID.Compare) {
		o := now[t]
		p, ok := prev[t]
		if !ok || p == o {
			continue
		}
		if s.trace {
			s.log = append(s.log, fmt.Sprintf("    round %d: %v %s -> %s (stateful %v)", round, t, p, o, s.tasks[t].Stateful))
		}
		moves[t]++
		limit := moveLimit
		if s.tasks[t].Stateful {
			s.st.maxMoves = max(s.st.maxMoves, moves[t])
		} else {
			s.st.maxStatelessMoves = max(s.st.maxStatelessMoves, moves[t])
			limit = statelessMoveLimit
		}
		if moves[t] > limit {
			return fmt.Errorf("task %v (stateful %v) changed owner %d times since the event", t, s.tasks[t].Stateful, moves[t])
		}
	}
	return nil
}

// recordStatelessMoves counts the stateless tasks by how often they moved
// in the event, and those that moved and ended where they started.
func (s *sim) recordStatelessMoves(start, fin map[task.ID]string, moves map[task.ID]int) {
	for t, n := range moves {
		if !s.tasks[t].Stateful {
			s.st.statelessMoved[min(n, 3)]++
			if n >= 2 && fin[t] == start[t] {
				s.st.statelessBack++
			}
		}
	}
}

// checkSettled checks a settled group: no warmups, balance per thread and
// per client, sub-topology spread, tag spread, stability and the event's
// stickiness against start, the owners before it.
func (s *sim) checkSettled(in Input, out Output, start map[task.ID]string, moves map[task.ID]int) error {
	if w := warmupsOf(out); len(w) > 0 {
		return fmt.Errorf("no follow-up but warmups %v", w)
	}
	var errs []error
	errs = append(errs, balanced(in, out, s.zones == 0))
	errs = append(errs, balancedByClient(in, out, s.zones == 0))
	ex := subTopologyExcess(in, out)
	s.st.maxSubExcess = max(s.st.maxSubExcess, ex)
	if ex > convergedSubExcessLimit {
		errs = append(errs, fmt.Errorf("a client holds %d actives of one sub-topology above its share rounded up", ex))
	}
	s.recordReceivedExcess(in, out, start)
	errs = append(errs, s.checkSpread(out))
	// A converged group that rebalances again keeps its assignment.
	if again := Assign(s.cfg, s.input()); !equalOutputs(again, out) {
		errs = append(errs, fmt.Errorf("converged assignment not stable:\n%v\nthen\n%v", out, again))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return s.stickiness(start, owners(out), moves)
}

// recordReceivedExcess records how far above its share a client holds a
// sub-topology it received a task of in the event, stateful and stateless
// apart.
func (s *sim) recordReceivedExcess(in Input, out Output, start map[task.ID]string) {
	type pair struct {
		client string
		sub    int
	}
	received := map[pair]bool{}
	for t, o := range owners(out) {
		if start[t] != o {
			received[pair{o, t.SubTopology}] = true
		}
	}
	excess := func(stateful bool) int {
		return subTopologyExcessWhere(in, out, func(c string, sub int) bool {
			return received[pair{c, sub}] && s.tasks[task.ID{SubTopology: sub}].Stateful == stateful
		})
	}
	s.st.maxSubExcessMoved = max(s.st.maxSubExcessMoved, excess(true))
	s.st.maxSubExcessMovedSL = max(s.st.maxSubExcessMovedSL, excess(false))
}

// checkMigrationBalance checks the balance of total load in every round,
// migrations included, as Kafka Streams keeps it: a client holding a
// stateless task is at most one task above the level of any other client,
// (n_a-1)/cap_a ≤ n_b/cap_b.
func (s *sim) checkMigrationBalance(in Input, out Output) error {
	type load struct{ n, cap, sl int }
	var loads []load
	names := slices.Sorted(maps.Keys(out.Clients))
	for _, id := range names {
		l := load{n: len(out.Clients[id].Active), cap: max(1, in.Clients[id].Capacity)}
		for _, t := range out.Clients[id].Active {
			if !s.tasks[t].Stateful {
				l.sl++
			}
		}
		loads = append(loads, l)
	}
	for x, a := range loads {
		if a.sl == 0 {
			continue
		}
		for y, b := range loads {
			dev := float64(a.n-1)/float64(a.cap) - float64(b.n)/float64(b.cap)
			s.st.maxMigrationDev = max(s.st.maxMigrationDev, dev)
			if (a.n-1)*b.cap > b.n*a.cap {
				return fmt.Errorf("%s holds %d actives (%d stateless) on %d threads, %s %d on %d", names[x], a.n, a.sl, a.cap, names[y], b.n, b.cap)
			}
		}
	}
	return nil
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

// checkRestoration checks the bound on restorations in one round and
// records the figures.
func (s *sim) checkRestoration(in Input, out Output) error {
	cfg := s.cfg.WithDefaults()
	k := min(cfg.NumStandbys, len(in.Clients)-1)
	caughtUp := func(cs ClientState, t task.ID) (caught, hasState bool) {
		lag, ok := effectiveLag(cs, t)
		if !ok {
			end, known := in.Ends[t]
			return known && max(end, 0) <= cfg.AcceptableRecoveryLag, false
		}
		return lag == LagRunning || lag <= cfg.AcceptableRecoveryLag, true
	}
	shortfall := 0
	for t, ti := range in.Tasks {
		if !ti.Stateful {
			continue
		}
		n := 0
		for _, cs := range in.Clients {
			if c, _ := caughtUp(cs, t); c {
				n++
			}
		}
		shortfall += max(0, 1+k-n)
	}
	restore, scratch := 0, 0
	for id, a := range out.Clients {
		for _, t := range slices.Concat(a.Active, a.Standby, a.Warmup) {
			if !in.Tasks[t].Stateful {
				continue
			}
			if c, has := caughtUp(in.Clients[id], t); !c {
				restore++
				if !has {
					scratch++
				}
			}
		}
	}
	s.st.rounds++
	s.st.restore += restore
	s.st.scratch += scratch
	s.st.maxRestore = max(s.st.maxRestore, restore)
	s.st.maxScratch = max(s.st.maxScratch, scratch)
	s.st.maxExtra = max(s.st.maxExtra, restore-shortfall)
	if restore > cfg.MaxWarmups+shortfall {
		return fmt.Errorf("%d restorations (%d from scratch), above MaxWarmups %d plus the shortfall %d", restore, scratch, cfg.MaxWarmups, shortfall)
	}
	return nil
}

// checkSubTopologies checks that a new group, where no placement moves state,
// spreads each sub-topology: no client holds more than one active of it
// above its share by capacity, rounded up (in 20,000 new groups of this
// generator 23 had one, none more).
func (s *sim) checkSubTopologies(out Output) error {
	in := s.input()
	ex := subTopologyExcess(in, out)
	if s.racks == 0 {
		s.st.maxSubExcessNew = max(s.st.maxSubExcessNew, ex)
	}
	if ex > 1 {
		return fmt.Errorf("a client holds %d actives of one sub-topology above its share rounded up", ex)
	}
	return nil
}

// subTopologyExcess is the largest number of actives of one sub-topology a
// client holds above its share by capacity, rounded up.
func subTopologyExcess(in Input, out Output) int {
	return subTopologyExcessWhere(in, out, nil)
}

// subTopologyExcessWhere is subTopologyExcess over the pairs of a client and
// a sub-topology that count (all of them for a nil counts).
func subTopologyExcessWhere(in Input, out Output, counts func(client string, sub int) bool) int {
	sumCaps := 0
	for _, cs := range in.Clients {
		sumCaps += max(1, cs.Capacity)
	}
	per := map[int]int{}
	for t := range in.Tasks {
		per[t.SubTopology]++
	}
	worst := 0
	for id, a := range out.Clients {
		held := map[int]int{}
		for _, t := range a.Active {
			held[t.SubTopology]++
		}
		c := max(1, in.Clients[id].Capacity)
		for sub, n := range held {
			if counts != nil && !counts(id, sub) {
				continue
			}
			share := (per[sub]*c + sumCaps - 1) / sumCaps
			worst = max(worst, n-share)
		}
	}
	return worst
}

// moveLimit bounds how often one stateful task's active may change owner
// while the group converges after one event (nearly always once, from where
// it runs to its target after a warmup), and statelessMoveLimit one
// stateless task's. Stateless tasks balance the total load of every round,
// so one lent to a client that is short of load while its stateful actives
// warm up (a joining client) goes back as they arrive, and can be lent
// again while other clients' loads shift: in 20,000 clusters from seed 1,
// 5,199 of the 289,843 stateless tasks that moved in an event moved three
// times, none more.
const (
	moveLimit          = 2
	statelessMoveLimit = 4
)

// convergedSubExcessLimit bounds how many actives of one sub-topology a
// converged client may hold above its share by capacity, rounded up.
// Converged groups spread sub-topologies only where tasks move anyway, so
// this is looser than a new group's one: five was the most seen before
// placement spread them by share, four since, in 10,000 clusters.
const convergedSubExcessLimit = 5
