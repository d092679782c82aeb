package groupproto

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/assignor"
	"github.com/eddystreams/eddy/task"
)

// ProtocolName is the group protocol name the Balancer registers. All
// members of an application must use it.
const ProtocolName = "eddy"

// DefaultEndOffsetsTimeout bounds the leader's end-offset lookup.
const DefaultEndOffsetsTimeout = 10 * time.Second

// groupMetadataOverhead approximates the bytes a coordinator's group
// record holds per member besides its subscription and assignment (member,
// client and instance IDs, host, timeouts).
const groupMetadataOverhead = 128

// BalancerConfig configures a Balancer.
type BalancerConfig struct {
	// Subscription returns this member's current state. It is called at
	// every join, since store positions move. Version fields and
	// OwnedActive/OwnedStandby are filled in by the Balancer. Required.
	Subscription func() SubscriptionInfo
	// Tasks maps every task of the application to its source topics; the
	// task reads partition task.Partition of each. Required.
	Tasks map[task.ID][]string
	// Changelogs lists the changelog topics of each stateful sub-topology
	// (the task of partition p uses partition p of each). A sub-topology
	// is stateful exactly when it has an entry here, possibly empty for
	// state that is not logged.
	Changelogs map[int][]string
	// EndOffsets returns the end offsets (high watermarks) of every
	// partition of the given topics. Only the leader calls it, while
	// balancing. When it is nil or fails, or leaves a partition out, the
	// leader takes the highest position any member reports for that
	// partition as its end, which still ranks replicas correctly.
	EndOffsets func(ctx context.Context, topics []string) (map[string]map[int32]int64, error)
	// EndOffsetsTimeout bounds EndOffsets (default 10 s).
	EndOffsetsTimeout time.Duration
	// TaskRacks, if set, returns the racks of each task's input
	// partitions' leaders (Input.TaskRacks), for Config.ActiveRackTag.
	// Only the leader calls it, while balancing, bounded by
	// EndOffsetsTimeout; when it fails the racks are left out and actives
	// are placed without them.
	TaskRacks func(ctx context.Context) (map[task.ID][]string, error)
	// Assignor configures Assign.
	Assignor assignor.Config
	// AssignFunc, if set, replaces Assign as the leader's placement (a
	// user-supplied assignor, as KIP-924 allows); it receives Assignor
	// and the group's state. An output that does not give every task
	// exactly one active (ValidateOutput) fails the balance and is
	// reported to OnError.
	AssignFunc assignor.AssignFunc
	// Now is the clock for the probing rebalance time (default time.Now).
	Now func() time.Time
	// OnAssignment receives this member's decoded assignment whenever the
	// member syncs, before kgo calls OnPartitionsAssigned. It runs on
	// kgo's group goroutine and must not block. When ErrorCode is not
	// ErrNone the assignment is empty and the member must rejoin soon
	// (kgo.Client.ForceRebalance, called from another goroutine); its next
	// subscription already uses a version the group can read. When
	// NextProbingRebalanceMs is set, the application should call
	// ForceRebalance at that time; positions will have moved, so the
	// changed subscription makes the coordinator rebalance.
	OnAssignment func(AssignmentInfo)
	// MaxGroupMetadataBytes is the largest group record the brokers store:
	// their message.max.bytes (default DefaultMaxGroupMetadataBytes). A
	// balance whose subscriptions and assignments would exceed it fails
	// with a *GroupMetadataTooLargeError, reported to OnError.
	MaxGroupMetadataBytes int
	// OnError, if set, receives errors that stop this member, as leader,
	// from producing any assignment; the group cannot settle until they
	// are fixed. It must not block.
	OnError func(error)
	// Logger receives balancing logs (default: discarded).
	Logger *slog.Logger
	// BareFraming makes this member subscribe in FramingBare, which
	// builds before the consumer framing can read, instead of
	// FramingConsumer. A leader always reads both framings and answers
	// each member in its own, so only the first rolling bounce of an
	// upgrade from such a build needs it (while one of them may lead);
	// a second bounce turns it off. Bare subscriptions carry no owned
	// partitions, so a bare member always rebalances eagerly.
	BareFraming bool
	// Eager makes the member rebalance eagerly: it gives up every
	// partition before each join, as Eddy builds before cooperative
	// rebalancing did. Otherwise it rebalances cooperatively (KIP-429): it
	// keeps what it is assigned again and gives up only what moves. A
	// leader in either mode holds back, for one round, every task that
	// another member still owns, so eager and cooperative members of this
	// build can share a group; builds that do not hold tasks back cannot
	// share one with cooperative members (see docs/operations.md, Upgrades).
	Eager bool
}

// Validate reports a configuration that cannot be used.
func (c BalancerConfig) Validate() error {
	var errs []error
	if c.Subscription == nil {
		errs = append(errs, errors.New("assignor: BalancerConfig.Subscription is required"))
	}
	if len(c.Tasks) == 0 {
		errs = append(errs, errors.New("assignor: BalancerConfig.Tasks is empty"))
	}
	for id, topics := range c.Tasks {
		if len(topics) == 0 {
			errs = append(errs, fmt.Errorf("assignor: task %v has no source topics", id))
		}
	}
	if c.EndOffsetsTimeout < 0 {
		errs = append(errs, fmt.Errorf("assignor: EndOffsetsTimeout %v is negative", c.EndOffsetsTimeout))
	}
	if c.MaxGroupMetadataBytes < 0 {
		errs = append(errs, fmt.Errorf("assignor: MaxGroupMetadataBytes %d is negative", c.MaxGroupMetadataBytes))
	}
	if err := c.Assignor.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Balancer is the kgo.GroupBalancer of an Eddy application: cooperative
// unless configured Eager, protocol "eddy", with SubscriptionInfo as join metadata and
// AssignmentInfo as assignment, each carried as the user data of the
// standard consumer protocol (see Framing). Each kgo client (group member)
// needs its own Balancer, since it remembers that member's last assignment
// and protocol version (and, as leader, its last balance's target, which a
// migration's next balance heads for again). Several members may share a process ID, one per stream thread:
// Assign places tasks on processes and the Balancer spreads each process's
// tasks over its members, whole tasks to one member, balanced by the members'
// capacities and sticky to what each member held.
type Balancer struct {
	cfg    BalancerConfig
	format *format
	log    *slog.Logger
	// topics are the application's source topics, sorted: the topics of
	// every subscription.
	topics  []string
	framing Framing

	mu      sync.Mutex
	version int32 // the version this member subscribes with
	last    AssignmentInfo
	// epoch is the last epoch this member gave a balance as leader.
	epoch int64
	// handed is the target of this member's last balance as leader, for
	// the next one.
	handed handedTarget
}

// handedTarget is a balance's assignor.Output.Target, kept by the leader
// for the next balance's assignor.Input.Target. It is handed on only to
// the balance right after its own with the same members: a member that
// joins, leaves or restarts (a new member ID), a thread count that changes,
// or another leader's balance between the two make the next one compute
// its target anew.
type handedTarget struct {
	epoch   int64
	members []string // the balance's member IDs, sorted
	target  assignor.Target
}

var _ kgo.GroupBalancer = (*Balancer)(nil)

// NewBalancer returns a Balancer; pass it to kgo.Balancers.
func NewBalancer(cfg BalancerConfig) (*Balancer, error) {
	return newBalancer(cfg, defaultFormat)
}

func newBalancer(cfg BalancerConfig, f *format) (*Balancer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.EndOffsetsTimeout == 0 {
		cfg.EndOffsetsTimeout = DefaultEndOffsetsTimeout
	}
	if cfg.MaxGroupMetadataBytes == 0 {
		cfg.MaxGroupMetadataBytes = assignor.DefaultMaxGroupMetadataBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Assignor = cfg.Assignor.WithDefaults()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var topics []string
	for _, ts := range cfg.Tasks {
		topics = append(topics, ts...)
	}
	framing := FramingConsumer
	if cfg.BareFraming {
		framing = FramingBare
	}
	return &Balancer{cfg: cfg, format: f, log: log, version: f.latest, framing: framing,
		topics: slices.Compact(slices.Sorted(slices.Values(topics)))}, nil
}

// ProtocolName implements kgo.GroupBalancer.
func (*Balancer) ProtocolName() string { return ProtocolName }

// IsCooperative implements kgo.GroupBalancer: true unless the member was
// configured Eager or in the bare framing, which cannot report what the
// member owns. kgo then revokes only the partitions a new assignment
// leaves out, before OnPartitionsAssigned, and rejoins at once so that the
// group can hand them to their new owner.
func (b *Balancer) IsCooperative() bool { return !b.cfg.Eager && b.framing == FramingConsumer }

// JoinGroupMetadata implements kgo.GroupBalancer: the encoded
// SubscriptionInfo in the member's framing, with the application's source
// topics and the partitions kgo says the member still owns. Equal states
// encode to equal bytes, so an unchanged member does not make the
// coordinator rebalance.
func (b *Balancer) JoinGroupMetadata(_ []string, owned map[string][]int32, _ int32) []byte {
	info := b.cfg.Subscription()
	b.mu.Lock()
	version := b.version
	info.OwnedActive = slices.Clone(b.last.Active)
	info.OwnedStandby = slices.Concat(b.last.Standby, b.last.Warmup)
	b.mu.Unlock()
	g := GroupSubscription{Framing: b.framing, Info: info}
	if b.framing == FramingConsumer {
		g.Topics = b.topics
		g.OwnedPartitions = owned
	}
	enc, err := b.format.encodeGroupSubscription(g, version)
	if err != nil {
		// Only an unsupported version fails, and b.version is always
		// one of ours.
		panic(fmt.Sprintf("assignor: encoding subscription: %v", err))
	}
	return enc
}

// ParseSyncAssignment implements kgo.GroupBalancer: it decodes this member's
// AssignmentInfo in either framing, hands it to OnAssignment, and returns the
// source partitions of the member's active tasks. Standby and warmup
// partitions are not consumed through the group.
func (b *Balancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	if len(assignment) == 0 {
		// The leader gave us nothing (or skipped assignment): no tasks.
		b.deliver(AssignmentInfo{})
		return map[string][]int32{}, nil
	}
	g, err := b.format.decodeGroupAssignment(assignment)
	a := g.Info
	var uv *UnsupportedVersionError
	switch {
	case errors.As(err, &uv):
		b.log.Warn("assignment in a version this member cannot read; rejoining with its own",
			"version", uv.Version, "leader_latest", uv.LatestSupported, "our_latest", b.format.latest)
		b.mu.Lock()
		b.version = b.format.latest
		b.mu.Unlock()
		b.deliver(AssignmentInfo{Version: uv.Version, LatestSupportedVersion: uv.LatestSupported, ErrorCode: ErrUnsupportedVersion})
		return map[string][]int32{}, nil
	case err != nil:
		return nil, err
	}

	b.mu.Lock()
	switch {
	case a.ErrorCode == ErrVersionProbing:
		b.version = min(b.format.latest, a.LatestSupportedVersion)
	case a.LatestSupportedVersion > b.version:
		// The leader reads newer versions than we last spoke; subscribe
		// with the newest we share from the next join on.
		b.version = min(b.format.latest, a.LatestSupportedVersion)
	}
	b.mu.Unlock()
	if a.ErrorCode != ErrNone {
		b.log.Info("assignment carries an error code instead of tasks", "error", a.ErrorCode, "version", b.currentVersion())
		b.deliver(a)
		return map[string][]int32{}, nil
	}

	for _, t := range a.Active {
		if _, ok := b.cfg.Tasks[t]; !ok {
			b.log.Warn("assigned a task this member's topology does not have", "task", t)
		}
	}
	// The member consumes what its own topology says its tasks read; a
	// leader of the same topology listed exactly these in the framing.
	out := sourcePartitions(b.cfg.Tasks, a.Active)
	if g.Framing == FramingConsumer && !maps.EqualFunc(out, g.Partitions, slices.Equal) {
		b.log.Warn("the assignment's topic partitions differ from its tasks' source partitions (leader with another topology?); consuming the tasks'",
			"listed", g.Partitions, "consumed", out)
	}
	b.deliver(a)
	return out, nil
}

func (b *Balancer) currentVersion() int32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.version
}

func (b *Balancer) deliver(a AssignmentInfo) {
	b.mu.Lock()
	if a.ErrorCode == ErrNone {
		b.last = a
	}
	b.mu.Unlock()
	if b.cfg.OnAssignment != nil {
		b.cfg.OnAssignment(a)
	}
}

// member is one group member as the leader sees it.
type member struct {
	id      string
	sub     SubscriptionInfo
	framing Framing
	process string
	// subBytes is the size of the member's encoded subscription.
	subBytes int
	// owned are the partitions the member still consumes as it joins
	// (cooperative members only: an eager member gave everything up).
	owned map[string][]int32
}

// memberBalancer balances one generation; kgo creates one per rebalance on
// the leader.
type memberBalancer struct {
	b       *Balancer
	members []member
	// probing is set when some subscription is in a version we cannot
	// read; version is what assignments are encoded in.
	probing bool
	version int32
}

// MemberBalancer implements kgo.GroupBalancer. It decodes every member's
// subscription, in either framing, and names all source topics as the
// group's topics.
func (b *Balancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	mb := &memberBalancer{b: b}
	var latest []int32
	for _, m := range members {
		g, err := b.format.decodeGroupSubscription(m.ProtocolMetadata)
		s := g.Info
		var uv *UnsupportedVersionError
		switch {
		case errors.As(err, &uv):
			mb.probing = true
			b.log.Info("member subscribed with a version newer than ours; asking the group to rejoin with ours",
				"member", m.MemberID, "version", uv.Version, "our_latest", b.format.latest)
		case err != nil:
			return nil, nil, fmt.Errorf("assignor: member %s: %w", m.MemberID, err)
		}
		latest = append(latest, s.LatestSupportedVersion)
		process := s.ProcessID
		if process == "" {
			process = "member:" + m.MemberID
		}
		mb.members = append(mb.members, member{id: m.MemberID, sub: s, framing: g.Framing, process: process,
			subBytes: len(m.ProtocolMetadata), owned: g.OwnedPartitions})
	}
	slices.SortFunc(mb.members, func(x, y member) int {
		if x.id < y.id {
			return -1
		} else if x.id > y.id {
			return 1
		}
		return 0
	})
	mb.version = negotiate(b.format.latest, latest)
	topics := map[string]struct{}{}
	for _, ts := range b.cfg.Tasks {
		for _, t := range ts {
			topics[t] = struct{}{}
		}
	}
	return mb, topics, nil
}

// syncAssignments is a finished plan.
type syncAssignments []kmsg.SyncGroupRequestGroupAssignment

func (s syncAssignments) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment { return s }

// Balance implements kgo.GroupMemberBalancer; kgo calls BalanceOrError
// instead.
func (mb *memberBalancer) Balance(topics map[string]int32) kgo.IntoSyncAssignment {
	plan, err := mb.BalanceOrError(topics)
	if err != nil {
		mb.b.log.Error("balance failed", "err", err)
		return syncAssignments{}
	}
	return plan
}

// BalanceOrError implements kgo.GroupMemberBalancerOrError.
func (mb *memberBalancer) BalanceOrError(topics map[string]int32) (kgo.IntoSyncAssignment, error) {
	b := mb.b
	infos := make(map[string]AssignmentInfo, len(mb.members))
	if mb.probing {
		for _, m := range mb.members {
			infos[m.id] = AssignmentInfo{ErrorCode: ErrVersionProbing}
		}
		return mb.encode(infos)
	}
	for _, m := range mb.members {
		if m.sub.ShutdownReason == "" {
			continue
		}
		b.log.Warn("a member asked the application to shut down; telling every member", "member", m.id, "process", m.process, "reason", m.sub.ShutdownReason)
		for _, o := range mb.members {
			infos[o.id] = AssignmentInfo{ErrorCode: ErrShutdownApplication, ShutdownReason: m.sub.ShutdownReason}
		}
		return mb.encode(infos)
	}
	b.checkPartitions(topics)

	in, byProcess := mb.input()
	in.Target = b.handedOn(mb.memberIDs())
	assign := b.cfg.AssignFunc
	if assign == nil {
		assign = assignor.Assign
	}
	out := assign(b.cfg.Assignor, in)
	if b.cfg.AssignFunc != nil {
		if err := assignor.ValidateOutput(in, out); err != nil {
			err = fmt.Errorf("assignor: the configured assignor.AssignFunc returned an invalid assignment: %w", err)
			b.log.Error("balance failed", "err", err)
			if b.cfg.OnError != nil {
				b.cfg.OnError(err)
			}
			return nil, err
		}
	}

	epoch := b.nextEpoch()
	b.handOn(handedTarget{epoch: epoch, members: mb.memberIDs(), target: out.Target})
	var nextProbe int64
	if out.FollowupRebalance {
		nextProbe = b.cfg.Now().Add(out.ProbingRebalanceInterval).UnixMilli()
	}
	for pid, ms := range byProcess {
		for i, share := range spreadOverMembers(ms, out.Clients[pid], in.Tasks) {
			share.NextProbingRebalanceMs = nextProbe
			share.Epoch = epoch
			infos[ms[i].id] = share
		}
	}
	held := mb.holdBack(infos, in.Tasks)
	// The host maps follow the plan as held back, so that every member's
	// own tasks are what the maps say its host holds.
	activeByHost, standbyByHost, warmupByHost := map[string][]task.ID{}, map[string][]task.ID{}, map[string][]task.ID{}
	for _, pid := range slices.Sorted(maps.Keys(byProcess)) {
		host := byProcess[pid][0].sub.Endpoint
		if host == "" {
			continue
		}
		for _, m := range byProcess[pid] {
			share := infos[m.id]
			activeByHost[host] = sortedIDs(append(activeByHost[host], share.Active...))
			standbyByHost[host] = sortedIDs(append(standbyByHost[host], share.Standby...))
			if len(share.Warmup) > 0 {
				warmupByHost[host] = sortedIDs(append(warmupByHost[host], share.Warmup...))
			}
		}
	}
	for id, share := range infos {
		share.PartitionsByHost = activeByHost
		share.StandbyPartitionsByHost = standbyByHost
		share.WarmupPartitionsByHost = warmupByHost
		infos[id] = share
	}
	b.log.Info("balanced group", "members", len(mb.members), "processes", len(byProcess),
		"tasks", len(in.Tasks), "followup", out.FollowupRebalance, "version", mb.version, "epoch", epoch, "held_back", held)
	return mb.encode(infos)
}

// memberIDs lists the balance's member IDs, sorted.
func (mb *memberBalancer) memberIDs() []string {
	ids := make([]string, len(mb.members))
	for i, m := range mb.members {
		ids[i] = m.id
	}
	return ids
}

func (b *Balancer) handOn(h handedTarget) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.handed = h
}

// handedOn returns the target of this member's last balance as leader if
// that balance gave this member its last assignment (no other leader has
// balanced since) and had the same members, or nil.
func (b *Balancer) handedOn(members []string) assignor.Target {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.handed
	if h.target == nil || b.last.Epoch != h.epoch || !slices.Equal(h.members, members) {
		return nil
	}
	return h.target
}

// nextEpoch names a new balance. Members only compare epochs for equality,
// so it need not be ordered across leaders: the leader's clock in
// nanoseconds makes two leaders' epochs collide only if they balance in the
// same nanosecond, and the counter keeps one leader's epochs distinct
// whatever its clock does.
func (b *Balancer) nextEpoch() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.epoch = max(b.cfg.Now().UnixNano(), b.epoch+1)
	return b.epoch
}

// holdBack makes a plan safe for cooperative members (KIP-429): a task
// planned for one member while another still owns it — consumes one of its
// source partitions — is left out of the plan this round. Its owner, not
// assigned it, revokes it (committing its work first) and rejoins at once,
// and the next round, with nobody owning the task, assigns it. No task is
// ever run by two members at a time, whatever each member's mode. Meanwhile
// a new member that followed the task as a standby or warmup keeps
// following it as a standby (unless its process runs the task now), so
// that its replica stays open for the promotion. holdBack returns how many
// tasks it held back.
func (mb *memberBalancer) holdBack(infos map[string]AssignmentInfo, tasks map[task.ID]assignor.TaskInfo) int {
	owners := map[task.ID][]member{}
	for _, m := range mb.members {
		for id := range mb.b.cfg.Tasks {
			if ownsTask(m.owned, mb.b.cfg.Tasks[id], id.Partition) {
				owners[id] = append(owners[id], m)
			}
		}
	}
	if len(owners) == 0 {
		return 0
	}
	held := 0
	for _, m := range mb.members {
		info, ok := infos[m.id]
		if !ok {
			continue
		}
		keep := info.Active[:0:0]
		for _, id := range info.Active {
			elsewhere, sameProcess := false, false
			for _, o := range owners[id] {
				if o.id != m.id {
					elsewhere = true
					sameProcess = sameProcess || o.process == m.process
				}
			}
			if !elsewhere {
				keep = append(keep, id)
				continue
			}
			held++
			if tasks[id].Stateful && !sameProcess && slices.Contains(m.sub.OwnedStandby, id) &&
				!slices.Contains(info.Standby, id) && !slices.Contains(info.Warmup, id) {
				info.Standby = sortedIDs(append(slices.Clone(info.Standby), id))
			}
		}
		info.Active = keep
		infos[m.id] = info
	}
	return held
}

// ownsTask reports whether owned includes a source partition of a task.
func ownsTask(owned map[string][]int32, topics []string, partition int32) bool {
	for _, t := range topics {
		if slices.Contains(owned[t], partition) {
			return true
		}
	}
	return false
}

func (mb *memberBalancer) encode(infos map[string]AssignmentInfo) (kgo.IntoSyncAssignment, error) {
	plan := make(syncAssignments, 0, len(mb.members))
	for _, m := range mb.members {
		// Each member is answered in the framing it subscribed in: a
		// build before the consumer framing reads only the bare one.
		g := GroupAssignment{Framing: m.framing, Info: infos[m.id]}
		if m.framing == FramingConsumer {
			g.Partitions = sourcePartitions(mb.b.cfg.Tasks, g.Info.Active)
		}
		enc, err := mb.b.format.encodeGroupAssignment(g, mb.version)
		if err != nil {
			return nil, err
		}
		a := kmsg.NewSyncGroupRequestGroupAssignment()
		a.MemberID = m.id
		a.MemberAssignment = enc
		plan = append(plan, a)
	}
	if err := mb.checkSize(plan); err != nil {
		mb.b.log.Error("group metadata too large for the brokers", "err", err)
		if mb.b.cfg.OnError != nil {
			mb.b.cfg.OnError(err)
		}
		return nil, err
	}
	return plan, nil
}

// checkSize refuses a plan whose group record the coordinator could not
// store.
func (mb *memberBalancer) checkSize(plan syncAssignments) error {
	e := &assignor.GroupMetadataTooLargeError{Members: len(mb.members), Tasks: len(mb.b.cfg.Tasks), Limit: mb.b.cfg.MaxGroupMetadataBytes}
	for _, m := range mb.members {
		e.Subscriptions += m.subBytes
	}
	for _, a := range plan {
		e.Assignments += len(a.MemberAssignment)
	}
	e.Bytes = e.Subscriptions + e.Assignments + groupMetadataOverhead*len(mb.members)
	if e.Bytes > e.Limit {
		return e
	}
	return nil
}

// checkPartitions logs tasks whose source partitions the cluster lacks;
// such a task is still assigned but its member will read nothing.
func (b *Balancer) checkPartitions(counts map[string]int32) {
	missing := 0
	for id, topics := range b.cfg.Tasks {
		for _, t := range topics {
			if n, ok := counts[t]; ok && id.Partition >= n {
				missing++
				break
			}
		}
	}
	if missing > 0 {
		b.log.Warn("tasks read partitions that do not exist", "tasks", missing)
	}
}

func sortedIDs(ts []task.ID) []task.ID {
	s := slices.SortedFunc(slices.Values(ts), task.ID.Compare)
	return slices.Compact(s)
}

// input merges members into processes and turns positions into lags.
func (mb *memberBalancer) input() (assignor.Input, map[string][]member) {
	b := mb.b
	in := assignor.Input{Tasks: make(map[task.ID]assignor.TaskInfo, len(b.cfg.Tasks)), Clients: map[string]assignor.ClientState{}}
	if b.cfg.TaskRacks != nil && b.cfg.Assignor.ActiveRackTag != "" {
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.EndOffsetsTimeout)
		racks, err := b.cfg.TaskRacks(ctx)
		cancel()
		if err != nil {
			b.log.Warn("placing actives without their input leaders' racks", "err", err)
		} else {
			in.TaskRacks = racks
		}
	}
	for id := range b.cfg.Tasks {
		_, stateful := b.cfg.Changelogs[id.SubTopology]
		in.Tasks[id] = assignor.TaskInfo{Stateful: stateful}
	}
	byProcess := map[string][]member{}
	for _, m := range mb.members {
		byProcess[m.process] = append(byProcess[m.process], m)
	}

	// Per process: the strongest role and the furthest position reported
	// by any of its members for each task directory.
	type dir struct {
		role      TaskRole
		positions map[string]int64
	}
	dirs := map[string]map[task.ID]*dir{}
	maxPos := map[string]map[int32]int64{}
	for pid, ms := range byProcess {
		dirs[pid] = map[task.ID]*dir{}
		for _, m := range ms {
			for _, t := range m.sub.Tasks {
				if !in.Tasks[t.Task].Stateful {
					continue
				}
				d := dirs[pid][t.Task]
				if d == nil {
					d = &dir{positions: map[string]int64{}}
					dirs[pid][t.Task] = d
				}
				d.role = max(d.role, t.Role)
				for topic, pos := range t.Positions {
					if old, ok := d.positions[topic]; !ok || pos > old {
						d.positions[topic] = pos
					}
					if maxPos[topic] == nil {
						maxPos[topic] = map[int32]int64{}
					}
					maxPos[topic][t.Task.Partition] = max(maxPos[topic][t.Task.Partition], pos)
				}
			}
		}
	}
	ends := b.endOffsets()
	end := func(topic string, p int32) int64 {
		if e, ok := ends[topic][p]; ok {
			return e
		}
		return maxPos[topic][p]
	}

	for pid, ms := range byProcess {
		cs := assignor.ClientState{Tags: ms[0].sub.Tags, Lags: map[task.ID]int64{}}
		for _, m := range ms {
			cs.Capacity += max(1, int(m.sub.Capacity))
			// A member's own last actives count as previously active,
			// stateful ones included: under eager rebalancing a task
			// revoked moments before this join is reported from disk (its
			// thread parked it) rather than as running.
			for _, t := range m.sub.OwnedActive {
				if _, ok := in.Tasks[t]; ok {
					cs.PrevActive = append(cs.PrevActive, t)
				}
			}
			cs.PrevStandby = append(cs.PrevStandby, m.sub.OwnedStandby...)
		}
		for id, d := range dirs[pid] {
			switch {
			case d.role == RoleActive:
				cs.PrevActive = append(cs.PrevActive, id)
				cs.Lags[id] = assignor.LagRunning
				continue
			case d.role == RoleStandby:
				cs.PrevStandby = append(cs.PrevStandby, id)
			}
			topics := b.cfg.Changelogs[id.SubTopology]
			if len(topics) == 0 {
				continue
			}
			var lag int64
			for _, topic := range topics {
				e := end(topic, id.Partition)
				pos, ok := d.positions[topic]
				// A position past the end is from another history of the
				// changelog (a recreated topic): the store will be reset
				// and rebuilt from the start. One past the end is an
				// exactly-once store waiting for its commit marker.
				if !ok || pos < 0 || pos > e+1 {
					pos = 0
				}
				lag += max(0, e-pos)
			}
			cs.Lags[id] = lag
		}
		in.Clients[pid] = cs
	}
	// A client with no directory for a stateful task would restore the
	// whole changelog: its lag is the changelog's end.
	in.Ends = make(map[task.ID]int64)
	for id, ti := range in.Tasks {
		topics := b.cfg.Changelogs[id.SubTopology]
		if !ti.Stateful || len(topics) == 0 {
			continue
		}
		var total int64
		for _, topic := range topics {
			total += end(topic, id.Partition)
		}
		in.Ends[id] = total
	}
	return in, byProcess
}

// endOffsets fetches the changelogs' end offsets, or returns nil when it
// cannot; lags then fall back to the furthest reported positions.
func (b *Balancer) endOffsets() map[string]map[int32]int64 {
	if b.cfg.EndOffsets == nil {
		return nil
	}
	set := map[string]bool{}
	for _, ts := range b.cfg.Changelogs {
		for _, t := range ts {
			set[t] = true
		}
	}
	if len(set) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.EndOffsetsTimeout)
	defer cancel()
	ends, err := b.cfg.EndOffsets(ctx, slices.Sorted(maps.Keys(set)))
	if err != nil {
		b.log.Warn("cannot fetch changelog end offsets; ranking replicas by reported positions", "err", err)
		return nil
	}
	return ends
}

// spreadOverMembers splits a process's assignment over its members
// (sorted by member ID) with assignor.SpreadOverMembers.
func spreadOverMembers(ms []member, ca assignor.ClientAssignment, tasks map[task.ID]assignor.TaskInfo) []AssignmentInfo {
	am := make([]assignor.Member, len(ms))
	for i, m := range ms {
		am[i] = assignor.Member{Capacity: int(m.sub.Capacity), OwnedActive: m.sub.OwnedActive, OwnedStandby: m.sub.OwnedStandby}
	}
	shares := assignor.SpreadOverMembers(am, ca, tasks)
	out := make([]AssignmentInfo, len(shares))
	for i, sh := range shares {
		out[i].Active, out[i].Standby, out[i].Warmup = sh.Active, sh.Standby, sh.Warmup
	}
	return out
}
