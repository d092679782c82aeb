package assignor

import (
	"errors"
	"fmt"
	"maps"
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
	// ActiveRackTag, if set, names the client tag key whose value is the
	// client's rack in the sense of the brokers' broker.rack (for example
	// "rack" or "zone"). Together with Input.TaskRacks it makes actives
	// prefer clients on the rack of their input partitions' leaders, so
	// that fetches stay within the rack, as KIP-925 does for Kafka
	// Streams. The preference never overrides warmth: among clients that
	// are equally caught up on a task, one on a leader's rack is chosen,
	// and a client over its share gives up off-rack tasks first.
	ActiveRackTag string
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
	if c.ActiveRackTag != "" && strings.TrimSpace(c.ActiveRackTag) == "" {
		errs = append(errs, errors.New("assignor: ActiveRackTag is blank"))
	}
	return errors.Join(errs...)
}

// WithDefaults returns c as Assign reads it, so that Assign never fails: a
// zero MaxWarmups or ProbingRebalanceInterval replaced by its default, a
// negative NumStandbys or AcceptableRecoveryLag by zero.
func (c Config) WithDefaults() Config {
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
	// TaskRacks optionally holds, per task, the racks (broker.rack) of the
	// leaders of the task's input partitions, as the group leader learns
	// them from metadata. It is used only with Config.ActiveRackTag; a task
	// missing here, or with no racks, has no rack preference. The runtime's balancer
	// does not fill it yet: the runtime has to pass leader racks in.
	TaskRacks map[task.ID][]string
	// Target is optionally the previous round's Output.Target. Assign
	// heads for it again while it names every stateful task on clients of
	// the group and a target computed anew is not closer to balance, so
	// that a migration's probing rounds work towards one placement, the
	// stateless tasks' included. Pass it only from the round just before,
	// with no event between.
	Target Target
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

// AssignFunc computes an assignment from the state of the group. Assign is
// the default; an application may plug in its own placement with the same
// input and output (as KIP-924 allows in Kafka Streams), and should check
// its results with ValidateOutput in its tests. The runtime's balancer rejects an
// output that does not give every task exactly one active.
type AssignFunc func(Config, Input) Output

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
	// Target is where the stateful replicas and the stateless tasks are
	// heading, set with FollowupRebalance: the next round's Input.Target.
	Target Target
}

// Assign computes an assignment. It is a pure function: the same input always
// gives the same output, whatever the iteration order of the input maps.
// With no clients, every client map in the output is empty and no task is
// assigned.
//
// Assign first computes a target, the balanced assignment it is heading for
// (or keeps Input.Target, the one the round before handed on in
// Output.Target, where that still fits the group), and then this round's
// assignment, which differs from the target only where the target would
// restore state that exists elsewhere. The rules, in priority order:
//   - every task gets exactly one active; every stateful task gets
//     min(NumStandbys, clients-1) standbys on distinct clients other than
//     its active's, spread over distinct RackAwareTags values where possible;
//   - a stateful active goes only to a client that is caught up on it (lag
//     within AcceptableRecoveryLag, or running it) when one exists, or else
//     to the most caught-up client; a client with no state is as good as any
//     other only when no client has state;
//   - state moves only through warmups. A task with c clients caught up on
//     it places min(c, 1+standbys) of its replicas on caught-up clients, so
//     only max(0, 1+standbys-c) of them restore: a standby restores on a
//     new client only when too few clients are caught up (a client was
//     lost, or the task is new). Where the target puts a replica on a client
//     that is not caught up while a caught-up client could hold it, the
//     caught-up client keeps it, the target client gets a warmup (at most
//     MaxWarmups in the group, partly restored state first) and
//     FollowupRebalance is set. Every round therefore starts at most
//     MaxWarmups plus the sum of those shortfalls restorations;
//   - the target is balanced by capacity across clients, separately for
//     stateful actives, for all actives and for stateful replicas (active
//     plus standby): there is a level λ such that every client's count n
//     satisfies λ·capacity ≤ n ≤ λ·capacity+1, so every thread's count is
//     within one of every other's and no client with capacity idles while
//     another holds two tasks more than its share (clients that hold every
//     stateful task aside for replicas);
//   - stateless tasks balance the total active load as it is this round,
//     not as the target will have it once warmups finish, as Kafka Streams
//     does: given the stateful actives, there is a level λ with every
//     client at λ·capacity or above and every client holding a stateless
//     task at most at λ·capacity+1. Within that they stay where they ran.
//     A migration heads for a final
//     placement computed from where they ran before it; a stateless task
//     lent to a client short of load while that client's stateful actives
//     warm up goes back as they arrive;
//   - assignments are sticky: previous owners keep what balance allows, and
//     a client over its share gives up first the tasks that have other warm
//     homes, that are off their input leaders' rack (ActiveRackTag), and
//     of whose sub-topology it holds the most;
//   - tasks that must be placed anyway go, among equally good clients (as
//     warm, as near their input leaders' rack), first to one still within
//     its share of their sub-topology (the sub-topology's size times the
//     client's part of the capacity, rounded up), then to the least loaded;
//     two such tasks swap clients where that takes a sub-topology back
//     within a client's share, which spreads each sub-topology at no extra
//     movement.
func Assign(cfg Config, in Input) Output {
	r := newRun(cfg.WithDefaults(), in)
	r.assignTarget(in.Target)
	r.placeStatefulActives()
	r.settleReplicas()
	r.assignStatelessActives()
	return r.output()
}

// ValidateOutput reports an output that does not assign every task of in
// exactly one active, names a client or task that is not in in, or puts two
// replicas of one task on one client. It checks what any AssignFunc must
// meet, not Assign's placement rules.
func ValidateOutput(in Input, out Output) error {
	var errs []error
	owners := make(map[task.ID]int, len(in.Tasks))
	for id, a := range out.Clients {
		if _, ok := in.Clients[id]; !ok {
			errs = append(errs, fmt.Errorf("assignor: output names unknown client %q", id))
		}
		seen := map[task.ID]bool{}
		for _, l := range [][]task.ID{a.Active, a.Standby, a.Warmup} {
			for _, t := range l {
				if _, ok := in.Tasks[t]; !ok {
					errs = append(errs, fmt.Errorf("assignor: client %q is given unknown task %v", id, t))
				}
				if seen[t] {
					errs = append(errs, fmt.Errorf("assignor: client %q holds task %v twice", id, t))
				}
				seen[t] = true
			}
		}
		for _, t := range a.Active {
			owners[t]++
		}
	}
	if len(in.Clients) > 0 {
		for t := range in.Tasks {
			if owners[t] != 1 {
				errs = append(errs, fmt.Errorf("assignor: task %v has %d actives", t, owners[t]))
			}
		}
	}
	return errors.Join(errs...)
}

// run holds one Assign call's working state. Clients and tasks are indexed
// by their position in sorted order, which is what makes the result
// independent of map iteration order.
type run struct {
	cfg     Config
	k       int // standbys per stateful task
	clients []client
	classes int // tag classes
	// keyValues counts, per RackAwareTags key, its values in the group.
	keyValues []int
	// classMembers lists each tag class's clients in order.
	classMembers [][]int
	sf           []statefulTask
	sl           []statelessTask
	sfIndex      map[task.ID]int
	groups       int // distinct sub-topologies

	warmups  []warmup
	followup bool
	// finalsHanded tells that the stateless tasks' final clients are the
	// kept target's.
	finalsHanded bool
}

// client is what one Assign call knows and decides of one client.
type client struct {
	id    string
	tags  []int  // per rack key: interned value
	rack  string // its ActiveRackTag value, or ""
	hash  uint64 // hash of its ID
	class int    // its tag class, the same for the same tag values
	// capacity is its stream threads, at least 1.
	capacity int

	prevLoad   int   // stateful replicas in the previous round
	targetLoad int   // stateful actives in the target
	activeLoad int   // stateful actives as they run this round
	replicas   int   // target stateful actives plus standbys
	standbys   []int // target standbys
}

// statefulTask is what one Assign call knows and decides of one stateful
// task.
type statefulTask struct {
	id    task.ID
	group int      // interned sub-topology
	racks []string // input leaders' racks, sorted

	state       []clientLag // clients with state, sorted by client
	eligible    []int       // clients allowed to take the active; nil when free
	shortLog    bool        // clients without state are caught up
	prevActive  int
	prevStandby []int

	target  int   // balanced destination of the active
	active  int   // where the active actually goes
	holders []int // target replicas, target active first
	standby []int // actual standbys this round
}

// statelessTask is what one Assign call knows and decides of one stateless
// task.
type statelessTask struct {
	id    task.ID
	group int      // interned sub-topology
	racks []string // input leaders' racks, sorted
	prev  int      // previous owner, or -1
	owner int
	// final is the client the final placement wants the task on, the
	// handed target's while the target is kept.
	final int
	// moved tells whether the task changed owner in an earlier round of
	// the migration, as the handed target says.
	moved bool
}

type clientLag struct {
	client int
	lag    int64
}

type warmup struct {
	task, client int
	lag          int64
	active       bool
}

func newRun(cfg Config, in Input) *run {
	r := &run{cfg: cfg}
	r.readClients(in)
	r.readTasks(in)
	r.readPrevious(in)
	r.findEligible(in)
	return r
}

// readClients lists the clients in order with their capacities, racks and
// interned tag values, and groups those with the same values into classes.
func (r *run) readClients(in Input) {
	cfg := r.cfg
	ids := slices.Sorted(maps.Keys(in.Clients))
	values := map[string]int{}
	r.clients = make([]client, len(ids))
	for i, id := range ids {
		cs := in.Clients[id]
		c := &r.clients[i]
		c.id = id
		c.hash = clientHash(id)
		c.capacity = max(cs.Capacity, 1)
		if cfg.ActiveRackTag != "" {
			c.rack = cs.Tags[cfg.ActiveRackTag]
		}
		c.tags = make([]int, len(cfg.RackAwareTags))
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
			c.tags[j] = n
		}
	}
	if len(r.clients) > 0 {
		r.k = min(cfg.NumStandbys, len(r.clients)-1)
	}
	r.keyValues = make([]int, len(cfg.RackAwareTags))
	for j := range cfg.RackAwareTags {
		seen := map[int]bool{}
		for _, c := range r.clients {
			seen[c.tags[j]] = true
		}
		r.keyValues[j] = len(seen)
	}
	r.classify()
}

// classify puts clients with the same tag values in one class.
func (r *run) classify() {
	classOf := map[string]int{}
	var key []byte
	for c := range r.clients {
		key = key[:0]
		for _, v := range r.clients[c].tags {
			key = fmt.Appendf(key, "%d,", v)
		}
		k, ok := classOf[string(key)]
		if !ok {
			k = len(classOf)
			classOf[string(key)] = k
		}
		r.clients[c].class = k
		if k == len(r.classMembers) {
			r.classMembers = append(r.classMembers, nil)
		}
		r.classMembers[k] = append(r.classMembers[k], c)
	}
	r.classes = len(classOf)
}

// readTasks lists the stateful and the stateless tasks in order, with
// their interned sub-topologies and input leaders' racks.
func (r *run) readTasks(in Input) {
	var sf, sl []task.ID
	for id, ti := range in.Tasks {
		if ti.Stateful {
			sf = append(sf, id)
		} else {
			sl = append(sl, id)
		}
	}
	byID := func(a, b task.ID) int { return a.Compare(b) }
	slices.SortFunc(sf, byID)
	slices.SortFunc(sl, byID)
	subs := map[int]int{}
	intern := func(id task.ID) (group int, racks []string) {
		g, ok := subs[id.SubTopology]
		if !ok {
			g = len(subs)
			subs[id.SubTopology] = g
		}
		if r.cfg.ActiveRackTag != "" && len(in.TaskRacks[id]) > 0 {
			racks = slices.Compact(slices.Sorted(slices.Values(in.TaskRacks[id])))
		}
		return g, racks
	}
	r.sf = make([]statefulTask, len(sf))
	r.sfIndex = make(map[task.ID]int, len(sf))
	for i, id := range sf {
		t := &r.sf[i]
		t.id, t.prevActive, t.target, t.active = id, -1, -1, -1
		t.group, t.racks = intern(id)
		r.sfIndex[id] = i
	}
	r.sl = make([]statelessTask, len(sl))
	for i, id := range sl {
		t := &r.sl[i]
		t.id, t.prev, t.owner, t.final = id, -1, -1, -1
		t.group, t.racks = intern(id)
	}
	r.groups = len(subs)
}

// readPrevious reads what each client ran and holds: previous owners and
// standbys, previous replica loads, and each stateful task's clients with
// state, sorted by client.
func (r *run) readPrevious(in Input) {
	slIndex := make(map[task.ID]int, len(r.sl))
	for i, t := range r.sl {
		slIndex[t.id] = i
	}
	for c, cl := range r.clients {
		cs := in.Clients[cl.id]
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
			if lag == LagRunning && r.sf[i].prevActive < 0 {
				r.sf[i].prevActive = c
			}
		}
		for _, t := range cs.PrevActive {
			if i, ok := r.sfIndex[t]; ok {
				lags[i] = LagRunning
				if r.sf[i].prevActive < 0 {
					r.sf[i].prevActive = c
				}
				r.clients[c].prevLoad++
			} else if i, ok := slIndex[t]; ok && r.sl[i].prev < 0 {
				r.sl[i].prev = c
			}
		}
		for _, t := range cs.PrevStandby {
			if i, ok := r.sfIndex[t]; ok && !slices.Contains(r.sf[i].prevStandby, c) {
				r.sf[i].prevStandby = append(r.sf[i].prevStandby, c)
				r.clients[c].prevLoad++
			}
		}
		// Clients are visited in index order, so each state list stays
		// sorted by client.
		for _, i := range slices.Sorted(maps.Keys(lags)) {
			r.sf[i].state = append(r.sf[i].state, clientLag{c, lags[i]})
		}
	}
}

// findEligible decides, per stateful task, which clients may take its
// active: the caught-up ones, else the most caught up, else any (nil).
func (r *run) findEligible(in Input) {
	for i, t := range r.sf {
		end, known := in.Ends[t.id]
		r.sf[i].shortLog = known && r.caughtUpLag(max(end, 0))
		var caught []int
		if r.sf[i].shortLog {
			for c := range r.clients {
				if r.caught(i, c) {
					caught = append(caught, c)
				}
			}
		} else {
			for _, cl := range r.sf[i].state {
				if r.caughtUpLag(cl.lag) {
					caught = append(caught, cl.client)
				}
			}
		}
		best := lagUnknown
		for _, cl := range r.sf[i].state {
			best = min(best, cl.lag)
		}
		switch {
		case len(caught) > 0:
			r.sf[i].eligible = caught
		case best != lagUnknown:
			for _, cl := range r.sf[i].state {
				if cl.lag == best {
					r.sf[i].eligible = append(r.sf[i].eligible, cl.client)
				}
			}
		}
	}
}

func filled(n, v int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// capacities, targetLoads and activeLoads list one fact of every client, in
// client order: the bounds and the spreader work on bins given as slices,
// not on clients.
func (r *run) capacities() []int  { return r.perClient(func(c *client) int { return c.capacity }) }
func (r *run) targetLoads() []int { return r.perClient(func(c *client) int { return c.targetLoad }) }
func (r *run) activeLoads() []int { return r.perClient(func(c *client) int { return c.activeLoad }) }

func (r *run) perClient(fact func(*client) int) []int {
	out := make([]int, len(r.clients))
	for c := range r.clients {
		out[c] = fact(&r.clients[c])
	}
	return out
}

func (r *run) caughtUpLag(lag int64) bool {
	return lag == LagRunning || lag <= r.cfg.AcceptableRecoveryLag
}

// caught reports whether client c is caught up on stateful task i: it could
// take the task's active, or hold a replica of it, without restoring more
// than AcceptableRecoveryLag records.
func (r *run) caught(i, c int) bool {
	lag := r.lag(i, c)
	if lag == lagUnknown {
		return r.sf[i].shortLog
	}
	return r.caughtUpLag(lag)
}

// lag returns client c's lag on stateful task i, or lagUnknown.
func (r *run) lag(i, c int) int64 {
	s := r.sf[i].state
	j, ok := slices.BinarySearchFunc(s, c, func(cl clientLag, c int) int { return cl.client - c })
	if !ok {
		return lagUnknown
	}
	return s[j].lag
}

// isEligible reports whether client c may take stateful task i's active now.
func (r *run) isEligible(i, c int) bool {
	if r.sf[i].eligible == nil {
		return true
	}
	_, ok := slices.BinarySearch(r.sf[i].eligible, c)
	return ok
}

// numEligible counts the clients that may take task i's active.
func (r *run) numEligible(i int) int {
	if r.sf[i].eligible == nil {
		return len(r.clients)
	}
	return len(r.sf[i].eligible)
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

// offRack is 1 when client c is not on the rack of any of racks, the input
// leaders' racks of a task, and 0 when it is or when rack awareness of
// actives is off or the racks are unknown.
func (r *run) offRack(racks []string, c int) int {
	if len(racks) == 0 || c < 0 {
		return 0
	}
	if _, ok := slices.BinarySearch(racks, r.clients[c].rack); ok && r.clients[c].rack != "" {
		return 0
	}
	return 1
}

func (r *run) output() Output {
	out := Output{
		Clients:                  make(map[string]ClientAssignment, len(r.clients)),
		FollowupRebalance:        r.followup,
		ProbingRebalanceInterval: r.cfg.ProbingRebalanceInterval,
	}
	if len(r.clients) == 0 {
		return out
	}
	as := make([]ClientAssignment, len(r.clients))
	for _, t := range r.sf {
		as[t.active].Active = append(as[t.active].Active, t.id)
		for _, c := range t.standby {
			as[c].Standby = append(as[c].Standby, t.id)
		}
	}
	for _, t := range r.sl {
		as[t.owner].Active = append(as[t.owner].Active, t.id)
	}
	for _, w := range r.warmups {
		as[w.client].Warmup = append(as[w.client].Warmup, r.sf[w.task].id)
	}
	byID := func(a, b task.ID) int { return a.Compare(b) }
	for c, cl := range r.clients {
		slices.SortFunc(as[c].Active, byID)
		slices.SortFunc(as[c].Standby, byID)
		slices.SortFunc(as[c].Warmup, byID)
		out.Clients[cl.id] = as[c]
	}
	if r.followup {
		out.Target = r.target()
	}
	return out
}
