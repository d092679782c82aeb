package runtime

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/task"

	"github.com/eddystreams/eddy/iq"

	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

// storeSubTopology finds the sub-topology that owns a store.
func (a *App) storeSubTopology(store string) (int, bool) {
	// Not SubTopologies, which copies every description: queries call
	// this for every key.
	return graph.Of(a.topo).StoreSubTopology(store)
}

// keyPartition returns the partition of a store that holds a serialized key,
// computed as Kafka's default partitioner places the key (queries reach it
// through Queries).
func (a *App) keyPartition(store string, key []byte) (int32, error) {
	if a.isGlobalStore(store) {
		// Held whole: its one partition in queries.
		return 0, nil
	}
	st, ok := a.storeSubTopology(store)
	if !ok {
		return 0, fmt.Errorf("%w %q", iq.ErrUnknownStore, store)
	}
	if a.plan == nil {
		return 0, iq.ErrNotRunning
	}
	return topology.Partition(key, a.plan.subPartitions[st]), nil
}

// Ready reports whether the instance is Running: every thread has received
// an assignment, and no active task is restoring or waiting for another
// thread to let it go. It checks the threads as well as the state, so it
// turns false as soon as a thread starts a rebalance.
func (a *App) Ready() bool {
	return a.State() == StateRunning && a.settled()
}

// Queries returns the App as the query layer sees it: its routing metadata,
// its local replicas with their roles and lags, and their stores. Pass it to
// iq.NewQuerier or iq.NewServer. Its methods never wait for a stream
// thread's lock; a replica of a task whose exactly-once commit is landing
// is handed out once the commit's writes are in (see landing.go).
func (a *App) Queries() iq.Backend { return queryBackend{a} }

type queryBackend struct{ a *App }

func (q queryBackend) Self() string { return q.a.cfg.Endpoint }

func (q queryBackend) KeyPartition(store string, key []byte) (int32, error) {
	return q.a.keyPartition(store, key)
}

// running says whether queries can be served: from the moment Start has
// opened the registry until the instance starts shutting down, rebalances
// included (replicas answer through them, each with its role).
func (q queryBackend) running() error {
	s := q.a.State()
	switch {
	case s == StateCreated || (s.IsRunningOrRebalancing() && !q.a.serving.Load()):
		return iq.ErrNotStarted
	case s.IsRunningOrRebalancing():
		return nil
	default:
		return iq.ErrShuttingDown
	}
}

func (q queryBackend) Metadata() (iq.Metadata, error) {
	if err := q.running(); err != nil {
		return iq.Metadata{}, err
	}
	return q.table(q.a.routing.Load())
}

// table is the routing table queries see given the latest assignment's,
// md (before the first assignment, the group's as router.learnGroup read
// it, marked Unassigned). Before either (md nil) the global stores, whole
// on every instance from Start on, are already answerable: a table naming
// them alone, marked Unassigned, lets routers find them then.
func (q queryBackend) table(md *iq.Metadata) (iq.Metadata, error) {
	if md != nil {
		return *md, nil
	}
	if q.a.global == nil {
		return iq.Metadata{}, iq.ErrNotStarted
	}
	out := iq.Metadata{Unassigned: true, Partitions: make(map[string]int32), Global: q.a.global.names()}
	for _, name := range out.Global {
		out.Partitions[name] = 1
	}
	return out, nil
}

// routingTable turns a balance's routing table into the query layer's
// metadata: which store partitions each host holds, in which role.
func (a *App) routingTable(r groupproto.Routing) *iq.Metadata {
	subs := graph.Of(a.topo).SubTopologies()
	parts := func(ids []task.ID) []iq.StorePartition {
		var out []iq.StorePartition
		for _, id := range ids {
			if id.SubTopology < 0 || id.SubTopology >= len(subs) {
				// A task of another topology (a leader running another
				// version of the application): nothing here to name.
				continue
			}
			for _, s := range subs[id.SubTopology].Stores {
				out = append(out, iq.StorePartition{Store: s.Name, Partition: id.Partition})
			}
		}
		return out
	}
	hosts := make(map[string]bool)
	for _, m := range []map[string][]task.ID{r.Active, r.Standby, r.Warmup} {
		for h := range m {
			hosts[h] = true
		}
	}
	md := &iq.Metadata{Partitions: make(map[string]int32)}
	for _, h := range slices.Sorted(maps.Keys(hosts)) {
		md.Hosts = append(md.Hosts, iq.HostMetadata{
			Host:    h,
			Active:  parts(r.Active[h]),
			Standby: parts(r.Standby[h]),
			Warmup:  parts(r.Warmup[h]),
		})
	}
	for i, st := range subs {
		for _, s := range st.Stores {
			md.Partitions[s.Name] = a.plan.subPartitions[i]
		}
	}
	if a.global != nil {
		md.Global = a.global.names()
		for _, name := range md.Global {
			md.Partitions[name] = 1
		}
	}
	return md
}

func (q queryBackend) Replica(store string, partition int32) (iq.Replica, error) {
	if err := q.running(); err != nil {
		return nil, err
	}
	if q.a.global != nil {
		if g, ok := q.a.global.store(store); ok {
			if partition != 0 {
				return nil, fmt.Errorf("%w: global store %q has one partition, 0, asked for %d", iq.ErrUnknownPartition, store, partition)
			}
			return globalReplica{t: q.a.global, g: g}, nil
		}
	}
	sub, ok := q.a.storeSubTopology(store)
	if !ok {
		return nil, fmt.Errorf("%w %q", iq.ErrUnknownStore, store)
	}
	if partition < 0 || partition >= q.a.plan.subPartitions[sub] {
		return nil, fmt.Errorf("%w: store %q has %d partitions, asked for %d", iq.ErrUnknownPartition, store, q.a.plan.subPartitions[sub], partition)
	}
	id := task.ID{SubTopology: sub, Partition: partition}
	if err := q.a.awaitLanded(id, store); err != nil {
		return nil, err
	}
	ri, ok := q.a.registry.replica(id, store)
	if !ok {
		return nil, fmt.Errorf("%w: store %q partition %d", iq.ErrNotHostedHere, store, partition)
	}
	if ri.State == task.Parked && ri.Lag < 0 {
		return nil, fmt.Errorf("%w: store %q partition %d", iq.ErrRebalancing, store, partition)
	}
	if err := q.a.expiredReplica(ri, time.Now()); err != nil {
		return nil, err
	}
	return localReplica{a: q.a, id: id, store: store, backing: ri.Backing}, nil
}

func (q queryBackend) LocalReplicas() []iq.ReplicaInfo {
	var out []iq.ReplicaInfo
	for _, ri := range q.a.Replicas() {
		out = append(out, q.a.toIQ(ri))
	}
	return append(out, q.a.globalStores()...)
}

// localReplica is one local store partition as the query layer reads it;
// its Info is looked up afresh on every call, as roles and lags move.
type localReplica struct {
	a       *App
	id      task.ID
	store   string
	backing statestore.Store
}

func (r localReplica) Store() statestore.Store { return r.backing }

func (r localReplica) Info() iq.ReplicaInfo {
	ri, ok := r.a.registry.replica(r.id, r.store)
	if !ok || ri.Backing != r.backing {
		// The replica closed or changed hands since it was looked up: it
		// has no position any more.
		return iq.ReplicaInfo{Store: r.store, Partition: r.id.Partition, Role: iq.RoleRestoring, Position: -1, End: -1, Lag: -1,
			LagConfirmedAgo: iq.Unknown, CaughtUpAgo: iq.Unknown, InputCommittedAgo: iq.Unknown, ContactAgo: iq.Unknown}
	}
	return r.a.toIQ(ri)
}

// LagConfirmWindow is how recent the broker's last confirmation of a
// replica's changelog end must be for its lag to be reported: an older one
// may be the last word of a broker the replica can no longer reach, and the
// lag is then reported as unknown (with how long ago it was last
// confirmed). The changelog readers confirm every
// changelog.DefaultConfirmInterval, so three intervals leave room for a slow
// answer.
const LagConfirmWindow = 3 * changelog.DefaultConfirmInterval

// toIQ reports what a replica can vouch for, as iq.ReplicaInfo defines it.
func (a *App) toIQ(ri ReplicaInfo) iq.ReplicaInfo {
	return toIQAt(ri, time.Now(), contactWindow(a.cfg))
}

// toIQAt is toIQ at now, with window the contactWindow.
func toIQAt(ri ReplicaInfo, now time.Time, window time.Duration) iq.ReplicaInfo {
	_, role := edgeRoles(ri.State)
	out := iq.ReplicaInfo{Store: ri.Store, Partition: ri.Partition, Role: role, Position: ri.Position,
		End: -1, Lag: -1, LagConfirmedAgo: iq.Unknown, CaughtUpAgo: iq.Unknown, InputCommittedAgo: iq.Unknown,
		Restored: ri.Restored, ContactAgo: iq.Unknown}
	if !ri.Contact.IsZero() {
		out.ContactAgo = max(now.Sub(ri.Contact), 0)
	}
	if ri.State == task.Running {
		out.End = ri.End
		if out.ContactAgo >= 0 && out.ContactAgo <= window {
			// The changelog's writer, processing its input itself, and
			// the group's member as far as anyone knows.
			out.Lag = 0
			out.LagConfirmedAgo, out.CaughtUpAgo, out.InputCommittedAgo = 0, 0, 0
			return out
		}
		// Cut off, paused or never confirmed: what it holds is what it
		// had processed when the group last confirmed it, and what
		// arrived since may be another instance's to process.
		out.Role = iq.RoleUnconfirmed
		out.LagConfirmedAgo, out.CaughtUpAgo, out.InputCommittedAgo = out.ContactAgo, out.ContactAgo, out.ContactAgo
		return out
	}
	if ri.End >= 0 && !ri.EndConfirmed.IsZero() {
		out.End = ri.End
		out.LagConfirmedAgo = max(now.Sub(ri.EndConfirmed), 0)
	}
	if ri.Rebuilding {
		// No consistent position until the rebuild reaches its target.
		out.Rebuilding, out.Position = true, -1
	}
	lagKnown := !ri.Rebuilding && out.End >= 0 && ri.Lag >= 0 && out.LagConfirmedAgo <= LagConfirmWindow
	if lagKnown {
		out.Lag = ri.Lag
	}
	if !ri.CaughtUp.IsZero() {
		out.CaughtUpAgo = max(now.Sub(ri.CaughtUp), 0)
	}
	if lagKnown && out.Lag == 0 && (out.CaughtUpAgo < 0 || out.LagConfirmedAgo < out.CaughtUpAgo) {
		// Its position has reached an end the broker confirmed then, not
		// now: what the changelog gained since is not known.
		out.CaughtUpAgo = out.LagConfirmedAgo
	}
	if !ri.InputCommitted.IsZero() {
		out.InputCommittedAgo = max(now.Sub(ri.InputCommitted), 0)
	}
	return out
}

// expiredReplica refuses a replica whose group session must have expired:
// the coordinator has not confirmed the membership of the thread it is
// held for (ReplicaInfo.Contact) for a whole session timeout, so the group
// has most likely moved the partition, an active to another instance,
// which may be writing it now, a standby maybe elsewhere too. It is
// refused as a partition on the move (ErrRebalancing), so that routers ask
// the others. So is one whose thread's member the coordinator has since
// refuted (ReplicaInfo.Refuted), at once, and a standby whose thread has
// awaited its share of a rebalance for longer than the contact window
// (ReplicaInfo.AssignmentVouched). A replica never confirmed at all is left to toIQ, which
// reports a running active unconfirmed.
func (a *App) expiredReplica(ri ReplicaInfo, now time.Time) error {
	_, role := edgeRoles(ri.State)
	if ri.Refuted {
		return fmt.Errorf("%w: store %q partition %d: the group coordinator no longer counts this instance's member as a host of the partition (%s) in the group as it stands: it has most likely moved the partition",
			iq.ErrRebalancing, ri.Store, ri.Partition, role)
	}
	if w := contactWindow(a.cfg); !ri.AssignmentVouched.IsZero() && now.Sub(ri.AssignmentVouched) > w {
		return fmt.Errorf("%w: store %q partition %d: this instance has awaited its share of a rebalance for %s, past the contact window (%s): the group may have moved the partition's %s elsewhere",
			iq.ErrRebalancing, ri.Store, ri.Partition, now.Sub(ri.AssignmentVouched).Round(time.Millisecond), w, role)
	}
	if ri.Contact.IsZero() || now.Sub(ri.Contact) < a.cfg.SessionTimeout {
		return nil
	}
	return fmt.Errorf("%w: store %q partition %d: the group last confirmed this instance as a host of the partition (%s) %s ago, past the session timeout (%s): it has most likely moved the partition",
		iq.ErrRebalancing, ri.Store, ri.Partition, role, now.Sub(ri.Contact).Round(time.Millisecond), a.cfg.SessionTimeout)
}

// StoreLayout reports a store's kind and, for window, session and
// versioned stores, their layout options, so the query layer can read
// their composite keys.
func (q queryBackend) StoreLayout(store string) (iq.StoreLayout, error) {
	if q.a.isGlobalStore(store) {
		return iq.StoreLayout{Kind: iq.KindKeyValue}, nil
	}
	for _, st := range graph.Of(q.a.topo).SubTopologies() {
		for _, s := range st.Stores {
			if s.Name != store {
				continue
			}
			switch s.Kind {
			case graph.Window:
				return iq.StoreLayout{Kind: iq.KindWindow, Window: s.WindowOptions(), Timestamped: s.Timestamped}, nil
			case graph.Session:
				return iq.StoreLayout{Kind: iq.KindSession, Window: s.WindowOptions()}, nil
			case graph.Versioned:
				return iq.StoreLayout{Kind: iq.KindVersioned, Versioned: s.VersionedOptions()}, nil
			}
			return iq.StoreLayout{Kind: iq.KindKeyValue, Timestamped: s.Timestamped}, nil
		}
	}
	return iq.StoreLayout{}, fmt.Errorf("%w %q", iq.ErrUnknownStore, store)
}

// isGlobalStore reports whether store is a global store of the topology.
func (a *App) isGlobalStore(store string) bool {
	for _, gs := range graph.Of(a.topo).GlobalStores() {
		if gs.Store.Name == store {
			return true
		}
	}
	return false
}

// LocalTasks implements iq.TaskBackend: the replicas of LocalReplicas, by
// task, with each store's size (see storeSizes).
func (q queryBackend) LocalTasks() []iq.TaskInfo {
	var out []iq.TaskInfo
	now := time.Now()
	for _, ri := range q.a.Replicas() { // in task order
		if len(out) == 0 || out[len(out)-1].Task != ri.Task.String() {
			out = append(out, iq.TaskInfo{Task: ri.Task.String(), State: ri.State.String(), Thread: ri.Thread})
		}
		ts := iq.TaskStore{ReplicaInfo: q.a.toIQ(ri), Bytes: -1, Keys: -1}
		if size, ok := q.a.metrics.sizes.of(ri, now); ok {
			ts.Bytes, ts.Keys = size.Bytes, size.Keys
		}
		t := &out[len(out)-1]
		t.Stores = append(t.Stores, ts)
	}
	return out
}
