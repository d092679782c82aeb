package assignor

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/eddystreams/eddy/task"
)

// LagRunning is the lag a client reports for a task it is running as an
// active right now. Such a client is caught up on the task by definition, and
// is preferred over any client that merely has a small lag. The value matches
// the sentinel Kafka Streams uses for the same purpose.
const LagRunning int64 = -2

// lagUnknown stands for "no state on disk": worse than any real lag.
const lagUnknown int64 = math.MaxInt64

// Defaults for Config.
const (
	DefaultAcceptableRecoveryLag    int64 = 10_000
	DefaultMaxWarmups                     = 2
	DefaultProbingRebalanceInterval       = 10 * time.Minute
)

// Config tunes Assign. Use DefaultConfig and change what you need: a zero
// NumStandbys or AcceptableRecoveryLag is meaningful and kept as zero, while a
// zero MaxWarmups or ProbingRebalanceInterval means "use the default".
type Config struct {
	// NumStandbys is the number of standby replicas each stateful task
	// should have, on clients other than its active's (default 0). With
	// fewer clients the assignor places min(NumStandbys, clients-1).
	NumStandbys int
	// AcceptableRecoveryLag is the largest lag at which a client counts as
	// caught up on a task, and so may receive it as an active without a
	// warmup first (default 10 000 records).
	AcceptableRecoveryLag int64
	// MaxWarmups caps the number of warmup replicas in the whole group at
	// once, which bounds the extra restoration traffic a rebalance can
	// start (default 2; must be at least 1 for balance to be reachable).
	MaxWarmups int
	// ProbingRebalanceInterval is how long after an assignment with warmups
	// the group should rebalance again to check on them (default 10
	// minutes). Assign does not use it; it is echoed in Output so the group
	// protocol layer can schedule the probing rebalance.
	ProbingRebalanceInterval time.Duration
	// RackAwareTags names the client tag keys (for example "zone") over
	// whose values each task's replicas should be spread: a standby goes to
	// a client whose tag values differ from those of the task's other
	// replicas whenever such a client exists. Tag spreading takes priority
	// over standby balance.
	RackAwareTags []string
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		AcceptableRecoveryLag:    DefaultAcceptableRecoveryLag,
		MaxWarmups:               DefaultMaxWarmups,
		ProbingRebalanceInterval: DefaultProbingRebalanceInterval,
	}
}

// Validate reports a configuration that cannot be used.
func (c Config) Validate() error {
	var errs []error
	if c.NumStandbys < 0 {
		errs = append(errs, fmt.Errorf("assignor: NumStandbys %d is negative", c.NumStandbys))
	}
	if c.AcceptableRecoveryLag < 0 {
		errs = append(errs, fmt.Errorf("assignor: AcceptableRecoveryLag %d is negative", c.AcceptableRecoveryLag))
	}
	if c.MaxWarmups < 0 {
		errs = append(errs, fmt.Errorf("assignor: MaxWarmups %d is negative", c.MaxWarmups))
	}
	if c.ProbingRebalanceInterval < 0 {
		errs = append(errs, fmt.Errorf("assignor: ProbingRebalanceInterval %v is negative", c.ProbingRebalanceInterval))
	}
	seen := map[string]bool{}
	for _, k := range c.RackAwareTags {
		if strings.TrimSpace(k) == "" {
			errs = append(errs, errors.New("assignor: RackAwareTags contains an empty key"))
		} else if seen[k] {
			errs = append(errs, fmt.Errorf("assignor: RackAwareTags names %q twice", k))
		}
		seen[k] = true
	}
	return errors.Join(errs...)
}

// normalized returns c with defaults filled in and out-of-range values
// clamped, so that Assign never fails.
func (c Config) normalized() Config {
	c.NumStandbys = max(c.NumStandbys, 0)
	c.AcceptableRecoveryLag = max(c.AcceptableRecoveryLag, 0)
	if c.MaxWarmups <= 0 {
		c.MaxWarmups = DefaultMaxWarmups
	}
	if c.ProbingRebalanceInterval <= 0 {
		c.ProbingRebalanceInterval = DefaultProbingRebalanceInterval
	}
	return c
}

// TaskInfo describes one task to assign.
type TaskInfo struct {
	// Stateful tasks have state that must be restored before they run;
	// they get standbys and are placed by lag. Stateless tasks go anywhere.
	Stateful bool
}

// ClientState is what the assignor knows of one client (one process, which
// may run several stream threads).
type ClientState struct {
	// Capacity is the number of stream threads; load is balanced per
	// thread. Values below 1 count as 1.
	Capacity int
	// Tags are the client's rack-awareness tags, e.g. {"zone": "a"}.
	Tags map[string]string
	// PrevActive lists the tasks the client held as active; a stateful one
	// counts as running (LagRunning) whatever Lags says.
	PrevActive []task.ID
	// PrevStandby lists the tasks the client held as standby or warmup.
	PrevStandby []task.ID
	// Lags holds, for every stateful task the client has state for on
	// disk, the lag of that state (end offset minus position, summed over
	// the task's changelog partitions) or LagRunning. A task missing here
	// has no state on this client. Negative lags other than LagRunning
	// count as zero.
	Lags map[task.ID]int64
}

// Input is the state of the group at a rebalance.
type Input struct {
	// Tasks is every task of the application.
	Tasks map[task.ID]TaskInfo
	// Clients maps each client's stable process ID to its state.
	Clients map[string]ClientState
	// Ends holds, for stateful tasks, the total end offset of the task's
	// changelogs: the lag of a client that has no state for the task and
	// would restore it all. A client without state is caught up when that
	// is within AcceptableRecoveryLag (an empty or short changelog), though
	// a caught-up client with state is still preferred. A task missing here
	// counts as unknown: clients without state are never caught up on it.
	Ends map[task.ID]int64
}

// ClientAssignment is one client's share. All lists are sorted.
type ClientAssignment struct {
	Active  []task.ID
	Standby []task.ID
	// Warmup lists standby-like replicas the client should restore because
	// an active is meant to move to it once it is caught up. They do not
	// count towards NumStandbys.
	Warmup []task.ID
}

// Output is an assignment of every task.
type Output struct {
	// Clients has an entry for every client of the input.
	Clients map[string]ClientAssignment
	// FollowupRebalance is set when some active is not yet where balance
	// wants it because the destination is still warming up; the group
	// should rebalance again after ProbingRebalanceInterval.
	FollowupRebalance bool
	// ProbingRebalanceInterval echoes the configuration.
	ProbingRebalanceInterval time.Duration
}

// Assign computes an assignment. It is a pure function: the same input always
// gives the same output, whatever the iteration order of the input maps.
// With no clients, every client map in the output is empty and no task is
// assigned.
//
// The rules, in priority order:
//   - every task gets exactly one active; every stateful task gets
//     min(NumStandbys, clients-1) standbys on distinct clients other than
//     its active's, spread over distinct RackAwareTags values where possible;
//   - a stateful active goes only to a client that is caught up on it (lag
//     within AcceptableRecoveryLag, or running it) when one exists, or else
//     to the most caught-up client; a client with no state is as good as any
//     other only when no client has state;
//   - load is balanced per thread of capacity, separately for stateful
//     actives, for all actives, and for stateful replicas (active plus
//     standby): on a converged assignment every thread's count of each is
//     within one of every other thread's;
//   - where balance wants an active on a client that is not caught up, the
//     active stays on a caught-up client, the destination gets a warmup (at
//     most MaxWarmups in the group) and FollowupRebalance is set;
//   - assignments are sticky: previous owners keep what balance allows.
func Assign(cfg Config, in Input) Output {
	r := newRun(cfg.normalized(), in)
	r.assignStatefulActives()
	r.assignStandbys()
	r.assignWarmups()
	r.assignStatelessActives()
	return r.output()
}

// run holds one Assign call's working state. Clients and tasks are indexed
// by their position in sorted order, which is what makes the result
// independent of map iteration order.
type run struct {
	cfg     Config
	k       int // standbys per stateful task
	ids     []string
	caps    []int
	tags    [][]int // per client, per rack key: interned value
	sf      []task.ID
	sl      []task.ID
	sfIndex map[task.ID]int

	// Per stateful task.
	state       [][]clientLag // clients with state, sorted by client
	eligible    [][]int       // clients allowed to take the active; nil when free
	prevActive  []int
	prevStandby [][]int
	target      []int // balanced destination of the active
	targetLoad  []int // stateful actives per client, as balance wants them
	active      []int // where the active actually goes
	holders     [][]int
	warmup      []int

	// Per stateless task.
	slPrev  []int
	slOwner []int

	activeLoad []int // stateful actives per client
	replicas   []int // stateful actives plus standbys per client
	standbys   [][]int
	followup   bool
}

type clientLag struct {
	client int
	lag    int64
}

func newRun(cfg Config, in Input) *run {
	r := &run{cfg: cfg}
	for id := range in.Clients {
		r.ids = append(r.ids, id)
	}
	slices.Sort(r.ids)
	cIndex := make(map[string]int, len(r.ids))
	for i, id := range r.ids {
		cIndex[id] = i
	}
	values := map[string]int{}
	r.caps = make([]int, len(r.ids))
	r.tags = make([][]int, len(r.ids))
	for i, id := range r.ids {
		cs := in.Clients[id]
		r.caps[i] = max(cs.Capacity, 1)
		r.tags[i] = make([]int, len(cfg.RackAwareTags))
		for j, key := range cfg.RackAwareTags {
			v, ok := cs.Tags[key]
			if !ok {
				// A client without the tag shares no value with any other.
				v = "\x00missing\x00" + id
			}
			n, ok := values[v]
			if !ok {
				n = len(values)
				values[v] = n
			}
			r.tags[i][j] = n
		}
	}
	if len(r.ids) > 0 {
		r.k = min(cfg.NumStandbys, len(r.ids)-1)
	}

	for id, ti := range in.Tasks {
		if ti.Stateful {
			r.sf = append(r.sf, id)
		} else {
			r.sl = append(r.sl, id)
		}
	}
	byID := func(a, b task.ID) int { return a.Compare(b) }
	slices.SortFunc(r.sf, byID)
	slices.SortFunc(r.sl, byID)
	r.sfIndex = make(map[task.ID]int, len(r.sf))
	for i, id := range r.sf {
		r.sfIndex[id] = i
	}
	slIndex := make(map[task.ID]int, len(r.sl))
	for i, id := range r.sl {
		slIndex[id] = i
	}

	ns := len(r.sf)
	r.state = make([][]clientLag, ns)
	r.prevActive = filled(ns, -1)
	r.prevStandby = make([][]int, ns)
	r.slPrev = filled(len(r.sl), -1)
	for c, id := range r.ids {
		cs := in.Clients[id]
		lags := make(map[int]int64, len(cs.Lags)+len(cs.PrevActive))
		for t, lag := range cs.Lags {
			i, ok := r.sfIndex[t]
			if !ok {
				continue
			}
			if lag < 0 && lag != LagRunning {
				lag = 0
			}
			lags[i] = lag
			if lag == LagRunning && r.prevActive[i] < 0 {
				r.prevActive[i] = c
			}
		}
		for _, t := range cs.PrevActive {
			if i, ok := r.sfIndex[t]; ok {
				lags[i] = LagRunning
				if r.prevActive[i] < 0 {
					r.prevActive[i] = c
				}
			} else if i, ok := slIndex[t]; ok && r.slPrev[i] < 0 {
				r.slPrev[i] = c
			}
		}
		for _, t := range cs.PrevStandby {
			if i, ok := r.sfIndex[t]; ok && !slices.Contains(r.prevStandby[i], c) {
				r.prevStandby[i] = append(r.prevStandby[i], c)
			}
		}
		// Clients are visited in index order, so each state list stays
		// sorted by client.
		for i, lag := range lags {
			r.state[i] = append(r.state[i], clientLag{c, lag})
		}
	}

	r.eligible = make([][]int, ns)
	for i, id := range r.sf {
		best := lagUnknown
		var caught []int
		end, known := in.Ends[id]
		shortLog := known && r.caughtUpLag(max(end, 0))
		for c := range r.ids {
			switch lag := r.lag(i, c); {
			case lag == lagUnknown:
				if shortLog {
					caught = append(caught, c)
				}
			case r.caughtUpLag(lag):
				caught = append(caught, c)
			}
		}
		for _, cl := range r.state[i] {
			best = min(best, cl.lag)
		}
		switch {
		case len(caught) > 0:
			r.eligible[i] = caught
		case best != lagUnknown:
			for _, cl := range r.state[i] {
				if cl.lag == best {
					r.eligible[i] = append(r.eligible[i], cl.client)
				}
			}
		}
	}
	return r
}

func filled(n, v int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = v
	}
	return s
}

func (r *run) caughtUpLag(lag int64) bool {
	return lag == LagRunning || lag <= r.cfg.AcceptableRecoveryLag
}

// lag returns client c's lag on stateful task i, or lagUnknown.
func (r *run) lag(i, c int) int64 {
	s := r.state[i]
	j, ok := slices.BinarySearchFunc(s, c, func(cl clientLag, c int) int { return cl.client - c })
	if !ok {
		return lagUnknown
	}
	return s[j].lag
}

// isEligible reports whether client c may take stateful task i's active now.
func (r *run) isEligible(i, c int) bool {
	if r.eligible[i] == nil {
		return true
	}
	_, ok := slices.BinarySearch(r.eligible[i], c)
	return ok
}

// numEligible counts the clients that may take task i's active.
func (r *run) numEligible(i int) int {
	if r.eligible[i] == nil {
		return len(r.ids)
	}
	return len(r.eligible[i])
}

// stateRank orders clients by how warm their state for task i is: caught up,
// then some state, then none.
func (r *run) stateRank(i, c int) int {
	switch lag := r.lag(i, c); {
	case lag == lagUnknown:
		return 2
	case r.caughtUpLag(lag):
		return 0
	default:
		return 1
	}
}

// assignStatefulActives computes the balanced target of every stateful
// active and then where it actually goes this round.
func (r *run) assignStatefulActives() {
	ns, nc := len(r.sf), len(r.ids)
	if nc == 0 {
		r.target, r.active = filled(ns, -1), filled(ns, -1)
		return
	}
	lo, hi := bounds(ns, r.caps, ns)
	order := make([]int, ns)
	for i := range order {
		order[i] = i
	}
	// Tasks with few warm clients choose first, while those clients still
	// have room.
	slices.SortStableFunc(order, func(a, b int) int { return r.numEligible(a) - r.numEligible(b) })
	sp := spreader{
		caps: r.caps, lo: lo, hi: hi,
		// A client over its share gives up first the tasks that have other
		// warm homes, so the moves it must make need no warmup.
		keepRank: r.numEligible,
		order:    order,
		affinity: func(i, c int) int {
			if r.isEligible(i, c) {
				switch lag := r.lag(i, c); lag {
				case LagRunning, 0:
					return 0
				case lagUnknown:
					// Caught up only because the changelog is short:
					// a client with state restores less.
					return 2
				default:
					// Within the acceptable lag but behind: a standby
					// that has everything is a better home.
					return 1
				}
			}
			return 3 + r.stateRank(i, c)
		},
	}
	r.target, r.targetLoad = sp.spread(r.prevActive, make([]int, nc))

	r.active = filled(ns, -1)
	r.activeLoad = make([]int, nc)
	for i, c := range r.target {
		if r.isEligible(i, c) {
			r.active[i] = c
			r.activeLoad[c]++
		}
	}
	for i := range r.target {
		if r.active[i] >= 0 {
			continue
		}
		r.followup = true
		src := r.prevActive[i]
		if src < 0 || !r.isEligible(i, src) {
			src = -1
			for _, e := range r.eligible[i] {
				if src < 0 || r.betterSource(i, e, src) {
					src = e
				}
			}
		}
		r.active[i] = src
		r.activeLoad[src]++
	}
}

// betterSource reports whether a is a better temporary home than b for
// stateful task i, whose target is not caught up.
func (r *run) betterSource(i, a, b int) bool {
	la, lb := r.lag(i, a), r.lag(i, b)
	if la != lb {
		return la < lb
	}
	if c := cmpRatio(r.activeLoad[a]+1, r.caps[a], r.activeLoad[b]+1, r.caps[b]); c != 0 {
		return c < 0
	}
	return a < b
}

// assignStandbys gives every stateful task r.k standbys.
func (r *run) assignStandbys() {
	ns, nc := len(r.sf), len(r.ids)
	r.holders = make([][]int, ns)
	r.standbys = make([][]int, nc)
	r.replicas = slices.Clone(r.activeLoad)
	if nc == 0 {
		return
	}
	for i := range r.sf {
		r.holders[i] = append(make([]int, 0, 1+r.k), r.active[i])
	}
	if r.k == 0 {
		return
	}
	lo, hi := bounds(ns*(1+r.k), r.caps, ns)

	// Sticky pass: previous standbys, and the previous active if the
	// active moved, keep their replica unless tags call for another client.
	// Clients left over their share shed replicas in the balance pass,
	// which moves no more of them than it must.
	var cands []int
	for i := range r.sf {
		cands = cands[:0]
		cands = append(cands, r.prevStandby[i]...)
		if p := r.prevActive[i]; p >= 0 && !slices.Contains(cands, p) {
			cands = append(cands, p)
		}
		slices.SortFunc(cands, func(a, b int) int {
			if la, lb := r.lag(i, a), r.lag(i, b); la != lb {
				if la < lb {
					return -1
				}
				return 1
			}
			return a - b
		})
		for len(r.holders[i]) < 1+r.k {
			best := r.maxTagScore(i)
			pick := -1
			for _, c := range cands {
				if !slices.Contains(r.holders[i], c) && r.tagScore(i, c) == best {
					pick = c
					break
				}
			}
			if pick < 0 {
				break
			}
			r.addStandby(i, pick)
		}
	}

	// Fill pass: tag spread first, then room, then warm state, then the
	// least loaded client.
	for i := range r.sf {
		for len(r.holders[i]) < 1+r.k {
			pick, pickScore, pickRank := -1, 0, 0
			for c := range nc {
				if slices.Contains(r.holders[i], c) {
					continue
				}
				score, rank := r.tagScore(i, c), r.stateRank(i, c)
				if pick >= 0 {
					if score != pickScore {
						if score < pickScore {
							continue
						}
					} else if full, pfull := r.replicas[c] >= hi[c], r.replicas[pick] >= hi[pick]; full != pfull {
						if full {
							continue
						}
					} else if rank != pickRank {
						if rank > pickRank {
							continue
						}
					} else if cmpRatio(r.replicas[c]+1, r.caps[c], r.replicas[pick]+1, r.caps[pick]) >= 0 {
						continue
					}
				}
				pick, pickScore, pickRank = c, score, rank
			}
			r.addStandby(i, pick)
		}
	}

	// Balance pass: greedy choices can leave a client over its share with
	// every underloaded client already holding its tasks; chains of moves
	// fix that.
	for r.augment(func(c int) bool { return r.replicas[c] > hi[c] }, func(c int) bool { return r.replicas[c] < hi[c] }) {
	}
	for r.augment(func(c int) bool { return r.replicas[c] > lo[c] }, func(c int) bool { return r.replicas[c] < lo[c] }) {
	}
}

func (r *run) addStandby(i, c int) {
	r.holders[i] = append(r.holders[i], c)
	r.standbys[c] = append(r.standbys[c], i)
	r.replicas[c]++
}

// tagScore counts the rack keys on which client c's value is new among task
// i's replicas.
func (r *run) tagScore(i, c int) int {
	score := 0
	for j, v := range r.tags[c] {
		used := false
		for _, h := range r.holders[i] {
			if r.tags[h][j] == v {
				used = true
				break
			}
		}
		if !used {
			score++
		}
	}
	return score
}

func (r *run) maxTagScore(i int) int {
	if len(r.cfg.RackAwareTags) == 0 {
		return 0
	}
	best := 0
	for c := range r.ids {
		if !slices.Contains(r.holders[i], c) {
			best = max(best, r.tagScore(i, c))
		}
	}
	return best
}

// canMove reports whether task i's standby may move from x to y without
// colocating replicas or reducing the number of distinct values of any rack
// key among the task's replicas.
func (r *run) canMove(i, x, y int) bool {
	if slices.Contains(r.holders[i], y) {
		return false
	}
	for j := range r.cfg.RackAwareTags {
		vx, vy := r.tags[x][j], r.tags[y][j]
		if vx == vy {
			continue
		}
		xShared, yUsed := false, false
		for _, h := range r.holders[i] {
			if h == x {
				continue
			}
			xShared = xShared || r.tags[h][j] == vx
			yUsed = yUsed || r.tags[h][j] == vy
		}
		if !xShared && yUsed {
			return false
		}
	}
	return true
}

func (r *run) moveStandby(i, x, y int) {
	r.holders[i][slices.Index(r.holders[i], x)] = y
	r.standbys[x] = slices.DeleteFunc(r.standbys[x], func(t int) bool { return t == i })
	r.standbys[y] = append(r.standbys[y], i)
	r.replicas[x]--
	r.replicas[y]++
}

// augment finds a chain of standby moves from a client with source(c) to a
// client with sink(c), where each step moves one task's standby to a client
// that does not yet hold that task, and applies it: the ends change load by
// one, the clients in between keep theirs. It reports whether it did.
func (r *run) augment(source, sink func(int) bool) bool {
	nc := len(r.ids)
	parent := filled(nc, -1)
	via := make([]int, nc)
	var queue []int
	anySink := false
	for c := range nc {
		if source(c) {
			parent[c] = c
			queue = append(queue, c)
		} else if sink(c) {
			anySink = true
		}
	}
	if len(queue) == 0 || !anySink {
		return false
	}
	for head := 0; head < len(queue); head++ {
		x := queue[head]
		for y := range nc {
			if parent[y] >= 0 {
				continue
			}
			for _, i := range r.standbys[x] {
				if !r.canMove(i, x, y) {
					continue
				}
				parent[y], via[y] = x, i
				if sink(y) {
					return r.applyChain(y, parent, via)
				}
				queue = append(queue, y)
				break
			}
		}
	}
	return false
}

// applyChain performs the moves that end at y, last move first. Each move is
// checked again against the current replicas, since a task can appear twice
// in one chain; if any fails the chain is undone and balancing stops.
func (r *run) applyChain(y int, parent, via []int) bool {
	type move struct{ i, from, to int }
	var done []move
	for c := y; parent[c] != c; c = parent[c] {
		m := move{via[c], parent[c], c}
		if !slices.Contains(r.holders[m.i], m.from) || !r.canMove(m.i, m.from, m.to) {
			for _, d := range slices.Backward(done) {
				r.moveStandby(d.i, d.to, d.from)
			}
			return false
		}
		r.moveStandby(m.i, m.from, m.to)
		done = append(done, m)
	}
	return true
}

// assignWarmups gives the balanced targets of displaced actives a warmup,
// warmest first, up to MaxWarmups.
func (r *run) assignWarmups() {
	var moving []int
	for i := range r.sf {
		if r.active[i] != r.target[i] && !slices.Contains(r.holders[i], r.target[i]) {
			moving = append(moving, i)
		}
	}
	slices.SortStableFunc(moving, func(a, b int) int {
		la, lb := r.lag(a, r.target[a]), r.lag(b, r.target[b])
		switch {
		case la < lb:
			return -1
		case la > lb:
			return 1
		}
		return 0
	})
	r.warmup = filled(len(r.sf), -1)
	for _, i := range moving[:min(len(moving), r.cfg.MaxWarmups)] {
		r.warmup[i] = r.target[i]
	}
}

// assignStatelessActives balances stateless tasks so that total actives per
// thread are even, given the stateful actives already placed.
func (r *run) assignStatelessActives() {
	nc := len(r.ids)
	if nc == 0 {
		r.slOwner = filled(len(r.sl), -1)
		return
	}
	// Balance against where the stateful actives are headed rather than
	// where they sit while warmups run, so that stateless tasks move once
	// and not back and forth with every probing rebalance.
	lo, hi := bounds(len(r.sf)+len(r.sl), r.caps, len(r.sf)+len(r.sl))
	sp := spreader{caps: r.caps, lo: lo, hi: hi}
	r.slOwner, _ = sp.spread(r.slPrev, r.targetLoad)
}

func (r *run) output() Output {
	out := Output{
		Clients:                  make(map[string]ClientAssignment, len(r.ids)),
		FollowupRebalance:        r.followup,
		ProbingRebalanceInterval: r.cfg.ProbingRebalanceInterval,
	}
	if len(r.ids) == 0 {
		return out
	}
	as := make([]ClientAssignment, len(r.ids))
	for i, c := range r.active {
		as[c].Active = append(as[c].Active, r.sf[i])
	}
	for i, c := range r.slOwner {
		as[c].Active = append(as[c].Active, r.sl[i])
	}
	for c, ts := range r.standbys {
		for _, i := range ts {
			as[c].Standby = append(as[c].Standby, r.sf[i])
		}
	}
	for i, c := range r.warmup {
		if c >= 0 {
			as[c].Warmup = append(as[c].Warmup, r.sf[i])
		}
	}
	byID := func(a, b task.ID) int { return a.Compare(b) }
	for c, id := range r.ids {
		slices.SortFunc(as[c].Active, byID)
		slices.SortFunc(as[c].Standby, byID)
		out.Clients[id] = as[c]
	}
	return out
}

// bounds returns per-bin load limits for spreading total items over bins
// with the given capacities, where no bin can take more than limit items:
// with λ the smallest per-thread level at which the bins can hold them all,
// bin b may hold between min(caps[b]·(λ-1), limit) and min(caps[b]·λ, limit).
// Any spread within the limits has every thread within one item of every
// other thread, bins held down by limit aside.
func bounds(total int, caps []int, limit int) (lo, hi []int) {
	lo, hi = make([]int, len(caps)), make([]int, len(caps))
	if total <= 0 || len(caps) == 0 {
		return lo, hi
	}
	sumCaps := 0
	for _, c := range caps {
		sumCaps += c
	}
	level := (total + sumCaps - 1) / sumCaps
	for {
		room := 0
		for _, c := range caps {
			room += min(c*level, limit)
		}
		if room >= total || level > total {
			break
		}
		level++
	}
	for b, c := range caps {
		hi[b] = min(c*level, limit)
		lo[b] = min(c*(level-1), limit)
	}
	return lo, hi
}

// cmpRatio compares a/ca with b/cb.
func cmpRatio(a, ca, b, cb int) int {
	x, y := int64(a)*int64(cb), int64(b)*int64(ca)
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// spreader places items on bins within per-bin load limits, keeping items on
// their previous bins where it can.
type spreader struct {
	caps   []int
	lo, hi []int
	// keepRank orders a bin's previous items: lower ranks stay first.
	// Nil keeps items in index order.
	keepRank func(item int) int
	// order is the order in which unplaced items choose a bin; it must
	// list every item, or be nil for index order.
	order []int
	// affinity ranks bins for an item, lower is better, 0 best; it
	// outweighs load within the limits. Nil treats all bins alike.
	affinity func(item, bin int) int
}

// spread returns each item's bin and each bin's final load, base included.
// prev gives each item's previous bin or -1. With no bins, every item gets
// -1.
func (s *spreader) spread(prev []int, base []int) (owner, load []int) {
	n, nb := len(prev), len(s.caps)
	owner = filled(n, -1)
	load = slices.Clone(base)
	if nb == 0 {
		return owner, load
	}
	aff := func(i, b int) int {
		if s.affinity == nil {
			return 0
		}
		return s.affinity(i, b)
	}

	// Keep.
	byBin := make([][]int, nb)
	for i, b := range prev {
		if b >= 0 && b < nb {
			byBin[b] = append(byBin[b], i)
		}
	}
	for b, items := range byBin {
		if s.keepRank != nil {
			slices.SortStableFunc(items, func(x, y int) int { return s.keepRank(x) - s.keepRank(y) })
		}
		for _, i := range items {
			if load[b] >= s.hi[b] {
				break
			}
			owner[i] = b
			load[b]++
		}
	}

	// Place the rest: first every item that has a bin of the best affinity
	// with room, then the others wherever is least loaded. Doing the first
	// kind first keeps the others from filling the bins they need.
	place := func(i int, onlyBest bool) {
		best, bestAff := -1, 0
		for b := range nb {
			a := aff(i, b)
			if best >= 0 {
				if full, bfull := load[b] >= s.hi[b], load[best] >= s.hi[best]; full != bfull {
					if full {
						continue
					}
				} else if a != bestAff {
					if a > bestAff {
						continue
					}
				} else if cmpRatio(load[b]+1, s.caps[b], load[best]+1, s.caps[best]) >= 0 {
					continue
				}
			}
			best, bestAff = b, a
		}
		if onlyBest && (bestAff != 0 || load[best] >= s.hi[best]) {
			return
		}
		owner[i] = best
		load[best]++
	}
	order := s.order
	if order == nil {
		order = make([]int, n)
		for i := range order {
			order[i] = i
		}
	}
	for _, onlyBest := range []bool{true, false} {
		for _, i := range order {
			if owner[i] < 0 {
				place(i, onlyBest)
			}
		}
	}

	// Raise bins below their lower limit, taking from the fullest bins
	// that are above theirs.
	for {
		low := -1
		for b := range nb {
			if load[b] < s.lo[b] && (low < 0 || cmpRatio(load[b], s.caps[b], load[low], s.caps[low]) < 0) {
				low = b
			}
		}
		if low < 0 {
			break
		}
		pick := -1
		for i, b := range owner {
			if b == low || load[b] <= s.lo[b] {
				continue
			}
			if pick >= 0 {
				pb := owner[pick]
				if a, pa := aff(i, low), aff(pick, low); a != pa {
					if a > pa {
						continue
					}
				} else if cmpRatio(load[b], s.caps[b], load[pb], s.caps[pb]) <= 0 {
					continue
				}
			}
			pick = i
		}
		if pick < 0 {
			break
		}
		load[owner[pick]]--
		owner[pick] = low
		load[low]++
	}

	// Drain bins above their upper limit, which only a heavy base causes.
	for {
		high := -1
		for b := range nb {
			if load[b] > s.hi[b] && (high < 0 || cmpRatio(load[b], s.caps[b], load[high], s.caps[high]) > 0) {
				if slices.Contains(owner, b) {
					high = b
				}
			}
		}
		if high < 0 {
			break
		}
		low := -1
		for b := range nb {
			if load[b] < s.hi[b] && (low < 0 || cmpRatio(load[b]+1, s.caps[b], load[low]+1, s.caps[low]) < 0) {
				low = b
			}
		}
		if low < 0 {
			break
		}
		pick := -1
		for i, b := range owner {
			if b == high && (pick < 0 || aff(i, low) < aff(pick, low)) {
				pick = i
			}
		}
		load[high]--
		owner[pick] = low
		load[low]++
	}
	return owner, load
}
