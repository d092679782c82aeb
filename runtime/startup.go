package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/internal/instancecore"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
)

// scanDisk finds the task directories a previous run left, each with when
// it was last written (whence its cleanup delay runs), and reads their
// stores' positions, so the first subscription can report them. Reading a
// position means opening the store, which for badger costs tens of
// milliseconds each (manifest, value log, memtable): on a restart with a
// dozen tasks that was most of Start, so the stores are opened by a few
// workers at once (forStores).
func (r *registry) scanDisk() ([]instancecore.Dir, error) {
	entries, err := os.ReadDir(r.app.appDir())
	if err != nil {
		return nil, fmt.Errorf("runtime: read state directory: %w", err)
	}
	subs := graph.Of(r.app.topo).SubTopologies()
	var dirs []instancecore.Dir
	for _, e := range entries {
		if !e.IsDir() || e.Name() == globalDirName || e.Name() == sharedDirName {
			continue
		}
		id, err := task.ParseID(e.Name())
		if err != nil || id.SubTopology >= len(subs) || id.Partition >= r.app.plan.subPartitions[id.SubTopology] {
			r.log.Warn("ignoring unknown folder in the state directory", "folder", e.Name())
			continue
		}
		left := time.Now()
		if info, err := e.Info(); err == nil {
			left = info.ModTime()
		}
		dirs = append(dirs, instancecore.Dir{Task: id, Left: left})
	}
	positions := make([]map[string]int64, len(dirs))
	errs := make([]error, len(dirs))
	forStores(len(dirs), func(i int) { positions[i], errs[i] = r.diskPositions(dirs[i].Task) })
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i, d := range dirs {
		r.disk[d.Task] = diskState{positions: positions[i]}
	}
	return dirs, nil
}

// forStores calls fn(0) … fn(n-1), each opening or closing the stores of
// one task, a little more than one per core at once: opening and closing
// a badger store is part CPU, part waiting for the disk and the kernel
// (file truncation, mapping), and done one at a time thousands of them
// took tens of seconds.
func forStores(n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, goruntime.GOMAXPROCS(0)+1) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}

// diskPositions opens the persistent logged stores a task left on disk and
// returns their changelog positions. It keeps those of no window layout
// open for the task (aheadStores): an instance restarting is mostly given
// the tasks it had.
func (r *registry) diskPositions(id task.ID) (map[string]int64, error) {
	positions := make(map[string]int64)
	for _, info := range graph.Of(r.app.topo).SubTopologies()[id.SubTopology].Stores {
		if !info.Persistent || !info.Logged {
			continue
		}
		name := info.Name
		if !r.app.hasStore(id, name) {
			continue
		}
		s, err := r.app.openPersistent(id, name)
		if err != nil {
			return nil, fmt.Errorf("runtime: open store %s of task %s: %w", name, id, err)
		}
		pos, err := s.Position()
		if err != nil || info.Windowed() {
			s.Close()
		} else {
			r.app.ahead.hold(aheadKey{id, name}, s)
		}
		if err != nil {
			return nil, fmt.Errorf("runtime: read position of store %s of task %s: %w", name, id, err)
		}
		if pos != statestore.NoPosition {
			positions[changelog.TopicName(r.app.cfg.ApplicationID, name)] = pos
		}
	}
	return positions, nil
}

// alongside runs side in a goroutine while main runs, and returns main's
// error once both are done. Start uses it for cluster checks whose answers
// do not depend on each other, so that their round trips overlap.
func alongside(side func(), main func() error) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		side()
	}()
	err := main()
	<-done
	return err
}

// localJoins tells a stream thread that leads the group which of its
// instance's other threads have joined. The coordinator completes a join
// round as soon as every known member has rejoined, so on a broker without
// an initial rebalance delay the first thread's round completes alone: its
// leader would give it every task, and the other threads' joins, a moment
// later, would move half of them away again (a revocation, a restoration,
// queries answered "not hosted here" meanwhile). A leader that finds a
// local thread missing from its round therefore waits, briefly, until that
// thread has sent its join and the coordinator has reopened the round
// (awaitLocal): the leader's sync is then refused with RebalanceInProgress,
// and the next round has every local thread in it, so the first assignment
// that takes effect covers them all.
type localJoins struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every change
	threads []localMember // by thread index
}

// localMember is what a leader knows of one of its instance's threads.
type localMember struct {
	// sent is set once the thread's current client sent a join that makes
	// it a member: one that carries its member ID (a fresh dynamic
	// member's first join does not; the coordinator answers it with
	// MemberIDRequired and an ID), or its instance ID.
	sent bool
	// member is the member ID that join carried; instance the thread's
	// static instance ID ("" when dynamic). A round lists members by both.
	member, instance string
	// done is set once the thread stopped: nobody waits for it.
	done bool
}

func newLocalJoins(threads int) *localJoins {
	return &localJoins{changed: make(chan struct{}), threads: make([]localMember, threads)}
}

func (l *localJoins) set(idx int, f func(*localMember)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(&l.threads[idx])
	close(l.changed)
	l.changed = make(chan struct{})
}

// connecting records that thread idx has a new client, not yet a member.
func (l *localJoins) connecting(idx int, instance string) {
	l.set(idx, func(m *localMember) { *m = localMember{instance: instance} })
}

// joinSent records that thread idx's client sent a member's join.
func (l *localJoins) joinSent(idx int, member string) {
	l.set(idx, func(m *localMember) { m.sent, m.member = true, member })
}

// stopped records that thread idx will not join again.
func (l *localJoins) stopped(idx int) { l.set(idx, func(m *localMember) { m.done = true }) }

// absent returns the running threads other than self that are not among
// the round's members, whether all of them have sent their join, and a
// channel closed at the next change.
func (l *localJoins) absent(self int, members []kmsg.JoinGroupResponseMember) (absent int, allSent bool, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	allSent = true
	for i, t := range l.threads {
		if i == self || t.done || slices.ContainsFunc(members, func(m kmsg.JoinGroupResponseMember) bool {
			return (t.member != "" && m.MemberID == t.member) || (t.instance != "" && m.InstanceID != nil && *m.InstanceID == t.instance)
		}) {
			continue
		}
		absent++
		allSent = allSent && t.sent
	}
	return absent, allSent, l.changed
}

// awaitLocal is the leader's wait before it balances a round (see
// localJoins), bounded by localJoinWait. Once every absent thread has sent
// its join, it asks the coordinator for the group's state until the round
// is reopened: a join sent is not yet a join received, and a sync that
// overtook it would settle the round without the thread. It reports
// whether the coordinator reopened the round.
func (a *App) awaitLocal(self int, members []kmsg.JoinGroupResponseMember) bool {
	absent, allSent, changed := a.joins.absent(self, members)
	if absent == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(a.killCtx, localJoinWait(a.cfg))
	defer cancel()
	for !allSent {
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
		_, allSent, changed = a.joins.absent(self, members)
	}
	for {
		groups, err := a.admin.DescribeGroups(ctx, a.cfg.ApplicationID)
		if err != nil || groups[a.cfg.ApplicationID].Err != nil {
			return false
		}
		if groups[a.cfg.ApplicationID].State == "PreparingRebalance" {
			return true
		}
		select {
		case <-time.After(2 * time.Millisecond):
		case <-ctx.Done():
			return false
		}
	}
}

// localJoinWait bounds a leader's wait for its instance's other threads:
// they are created together with it and join within milliseconds, so the
// bound only matters for a thread that cannot reach the coordinator. It
// stays well inside the rebalance timeout, which bounds the leader's sync.
func localJoinWait(cfg Config) time.Duration { return min(time.Second, cfg.RebalanceTimeout/4) }

// leaderBalancer is a thread's group balancer: the assignor's, with the
// leader's wait for the instance's other threads (see localJoins) before
// it balances.
type leaderBalancer struct {
	*groupproto.Balancer
	th *thread
}

// MemberBalancer implements kgo.GroupBalancer.
func (b leaderBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	reopened := !b.th.app.closing.Load() && b.th.app.awaitLocal(b.th.idx, members)
	mb, topics, err := b.Balancer.MemberBalancer(members)
	if err != nil || !reopened {
		return mb, topics, err
	}
	return staleRound{}, topics, nil
}

// staleRound balances a round the coordinator has already reopened: its
// generation is over, so the sync is refused whatever it carries, and the
// leader sends an empty plan rather than compute one (with the assignor's
// end-offset lookup) for nothing.
type staleRound struct{}

// Balance implements kgo.GroupMemberBalancer.
func (staleRound) Balance(map[string]int32) kgo.IntoSyncAssignment { return emptyPlan{} }

type emptyPlan struct{}

func (emptyPlan) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment { return nil }

// joinHook tells localJoins when a thread's client sends a member's join,
// and the thread's group contact when it sends a SyncGroup.
type joinHook struct {
	th     *thread
	static bool
	cl     atomic.Pointer[kgo.Client] // set once the client exists
}

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (h *joinHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, timeToWrite time.Duration, err error) {
	if key == int16(kmsg.SyncGroup) && err == nil {
		// When the write began: the coordinator cannot have read it
		// before.
		h.th.contact.syncWritten(time.Now().Add(-timeToWrite))
	}
	if key != int16(kmsg.JoinGroup) || err != nil {
		return
	}
	h.th.contact.joinWritten(time.Now().Add(-timeToWrite))
	cl := h.cl.Load()
	if cl == nil {
		return
	}
	member, _ := cl.GroupMetadata()
	if member == "" && !h.static {
		return
	}
	h.th.app.joins.joinSent(h.th.idx, member)
}
