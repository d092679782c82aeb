package runtime

// What an App gives its stream threads: client options, the group's inputs and their stores.

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// clientOpts are the options every client of the App starts from.
func (a *App) clientOpts(extra ...kgo.Opt) []kgo.Opt {
	// Compression matters only to the clients that produce; it is set on
	// all so that no producer is left with franz-go's default (snappy).
	opts := append([]kgo.Opt{kgo.SeedBrokers(a.cfg.Brokers...), kgo.ProducerBatchCompression(a.cfg.Compression.codec()...)}, extra...)
	return append(opts, a.connOpts()...)
}

// appDir is the folder holding the application's task directories.
func (a *App) appDir() string { return a.dir.path }

// changelogTopic names a store's changelog topic.
func (a *App) changelogTopic(store string) string {
	return changelog.TopicName(a.cfg.ApplicationID, store)
}

// subscription is what this instance tells the group when a thread joins.
func (a *App) subscription() groupproto.SubscriptionInfo {
	s := groupproto.SubscriptionInfo{
		ProcessID: a.dir.processID,
		Endpoint:  a.cfg.Endpoint,
		Capacity:  1,
		Tags:      a.cfg.Tags,
		Tasks:     a.registry.subscription(),
	}
	if r := a.shutdownReason.Load(); r != nil {
		s.ShutdownReason = *r
	}
	return s
}

// endOffsets lists the end offsets of topics, for the leader's lag
// computation.
func (a *App) endOffsets(ctx context.Context, topics []string) (map[string]map[int32]int64, error) {
	ends, err := a.admin.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = make(map[int32]int64)
		}
		out[o.Topic][o.Partition] = o.Offset
	})
	return out, nil
}

// taskRacks lists, for each task, the racks of its source partitions'
// leaders, from the brokers' metadata, for the leader's rack-aware
// placement of actives (Config.ActiveRackTag). Brokers without a rack
// contribute none.
func (a *App) taskRacks(ctx context.Context) (map[task.ID][]string, error) {
	md, err := a.admin.Metadata(ctx, a.sourceTopics()...)
	if err != nil {
		return nil, err
	}
	racks := make(map[int32]string)
	for _, b := range md.Brokers {
		if b.Rack != nil && *b.Rack != "" {
			racks[b.NodeID] = *b.Rack
		}
	}
	leaderRack := make(map[changelog.TopicPartition]string)
	for _, td := range md.Topics {
		for _, pd := range td.Partitions {
			if r, ok := racks[pd.Leader]; ok && pd.Err == nil {
				leaderRack[changelog.TopicPartition{Topic: td.Topic, Partition: pd.Partition}] = r
			}
		}
	}
	out := make(map[task.ID][]string)
	for id := range a.plan.taskTopics {
		for _, tp := range a.sourcePartitions(id) {
			if r, ok := leaderRack[tp]; ok && !slices.Contains(out[id], r) {
				out[id] = append(out[id], r)
			}
		}
	}
	return out, nil
}

// assignmentReceived records a thread's new assignment and acts on what it
// asks of the whole instance: a rejoin when the leader could not read our
// protocol version, a probing rebalance at the time it names. It runs on
// the thread's group goroutine and must not block.
func (a *App) assignmentReceived(th *thread, info groupproto.AssignmentInfo) {
	switch info.ErrorCode {
	case groupproto.ErrNone:
	case groupproto.ErrShutdownApplication:
		a.fail(&ApplicationShutdownError{Reason: info.ShutdownReason})
		return
	default:
		a.log.Warn("assignment asks to rejoin", "code", info.ErrorCode)
		go th.forceRebalance()
		return
	}
	a.assignment.Store(&info)
	a.registry.received(th.idx, th.incarnationNow(), info)
	a.router.assigned(th.idx, info)
	a.probeMu.Lock()
	if a.probe != nil {
		a.probe.Stop()
		a.probe = nil
	}
	var wait time.Duration
	if info.NextProbingRebalanceMs > 0 {
		wait = time.Until(time.UnixMilli(info.NextProbingRebalanceMs))
		a.probe = time.AfterFunc(max(wait, 0), func() {
			a.log.Info("probing rebalance")
			th.forceRebalance()
		})
	}
	a.probeMu.Unlock()
	// The logger is user code: it runs with probeMu released.
	if info.NextProbingRebalanceMs > 0 {
		a.log.Info("probing rebalance scheduled", "in", wait.Round(time.Millisecond))
	}
}

// openStore opens the backing store of one store of one task, or takes
// it from those opened ahead (aheadStores). Every replica (active,
// restoring, standby, warmup) opens its stores here, so a window or
// session store is wrapped in its segmented layout (see windowstore.go)
// whatever writes to it, and a versioned store in the reader of its
// changelog's puts (statestore.VersionedChangelog).
func (a *App) openStore(id task.ID, info topology.StoreInfo) (statestore.Store, error) {
	if info.Persistent && !info.Windowed() {
		if s, ok := a.ahead.take(aheadKey{id, info.Name}); ok {
			return a.versionedOrPlain(id, info, s)
		}
	}
	interval := segmentInterval(info.WindowOptions())
	s, err := a.hooked(id, info, func() (statestore.Store, error) {
		if !info.Persistent {
			return statestore.NewMemory(), nil
		}
		if info.Windowed() {
			var err error
			if interval, err = a.checkWindowLayout(id, info); err != nil {
				return nil, err
			}
		}
		return a.openPersistent(id, info.Name)
	})
	if err != nil {
		return nil, err
	}
	if !info.Windowed() {
		return a.versionedOrPlain(id, info, s)
	}
	return wrapWindowed(s, info, interval)
}

// hooked runs a store's opening through openStoreHook when a test set
// one.
func (a *App) hooked(id task.ID, info topology.StoreInfo, open func() (statestore.Store, error)) (statestore.Store, error) {
	if a.openStoreHook != nil {
		return a.openStoreHook(id, info, open)
	}
	return open()
}

// openPersistent opens a task's persistent store in the configured layout
// (see layout.go), deleting it first if it is proven damaged (see
// openBadgerOrRebuild and openShared): its changelog
// rebuilds it, and the instance's other tasks never notice. A full disk is
// found before badger touches the files (see
// statestore.BadgerOptions.DiskReserve) and waited out.
func (a *App) openPersistent(id task.ID, name string) (statestore.Store, error) {
	if a.shared != nil {
		return a.openShared(id, name)
	}
	return a.openBadgerOrRebuild(a.storeDir(id, name), statestore.DefaultBadgerOptions(), "task", id, "store", name)
}
