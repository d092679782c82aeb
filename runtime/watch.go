package runtime

// Live queries (iq.Watch): the instance's replicas publish what they write
// to its hub, from the path their stores are written on. An active task
// publishes at commit what it wrote to its changelogs, once the writes are
// in its stores; a standby or a restoring replica publishes what it applied
// from the changelog. A watcher that starts behind its replica reads the
// missing changes back from the changelog (ReadChangelog).

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/iq"
)

// storeOfChangelog names the store a changelog topic belongs to, "" for a
// topic that is no changelog of this application.
func (a *App) storeOfChangelog(topic string) string {
	name, ok := strings.CutPrefix(topic, a.cfg.ApplicationID+"-")
	if !ok {
		return ""
	}
	name, ok = strings.CutSuffix(name, "-changelog")
	if !ok {
		return ""
	}
	return name
}

// publishCommitted hands the records a commit wrote to the watchers of
// their keys. The commit calls it once the writes are in the stores.
func (a *App) publishCommitted(acks *changelog.Offsets) {
	if acks == nil || !a.watches.HasWatchers() {
		return
	}
	acks.Records(func(topic string, partition int32, recs []kgo.Record) {
		store := a.storeOfChangelog(topic)
		if store == "" || !a.watches.Watching(store) {
			return
		}
		changes := make([]iq.Change, len(recs))
		for i := range recs {
			r := &recs[i]
			changes[i] = iq.Change{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp.UnixMilli(), Position: r.Offset}
		}
		a.watches.Publish(store, partition, changes)
	})
}

// publishApplied hands the records a changelog reader applied to a store
// to the watchers of their keys (changelog.ReaderConfig.Applied).
func (a *App) publishApplied(topic string, partition int32, recs []*kgo.Record) {
	if !a.watches.HasWatchers() {
		return
	}
	store := a.storeOfChangelog(topic)
	if store == "" || !a.watches.Watching(store) {
		return
	}
	changes := make([]iq.Change, len(recs))
	for i, r := range recs {
		changes[i] = iq.Change{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp.UnixMilli(), Position: r.Offset}
	}
	a.watches.Publish(store, partition, changes)
}

// Hub returns the instance's watch hub (iq.WatchBackend).
func (q queryBackend) Hub() *iq.Hub { return &q.a.watches }

// readBackLimit bounds a read back of the changelog whose caller set no
// deadline.
const readBackLimit = 30 * time.Second

// ReadChangelog reads back the committed changes of the keys match accepts
// from a store's changelog partition in [from, to) (iq.WatchBackend), and
// the offset from which the log held every record of that range (above
// from when retention or compaction removed records after from, which may
// have been changes of the watched keys). The changes are read committed;
// which records the log no longer holds, a second pass finds reading
// uncommitted, in which only a record the broker removed leaves a hole
// (read committed, an aborted one does too). Transaction markers are kept
// so that each pass knows when it reached to: under exactly-once the
// record before a position is a commit marker.
func (q queryBackend) ReadChangelog(ctx context.Context, store string, partition int32, match func(key []byte) bool, from, to int64) ([]iq.Change, int64, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, readBackLimit)
		defer cancel()
	}
	var out []iq.Change
	committed := q.a.cfg.ProcessingGuarantee == ExactlyOnce
	err := q.readChangelog(ctx, store, partition, from, to, committed, func(r *kgo.Record) {
		if !r.Attrs.IsControl() && match(r.Key) {
			out = append(out, iq.Change{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp.UnixMilli(), Position: r.Offset})
		}
	})
	if err != nil {
		return nil, 0, err
	}
	heldFrom, next := from, from
	err = q.readChangelog(ctx, store, partition, from, to, false, func(r *kgo.Record) {
		if r.Offset > next {
			heldFrom = r.Offset
		}
		next = r.Offset + 1
	})
	if err != nil {
		return nil, 0, err
	}
	return out, heldFrom, nil
}

// readChangelog hands visit every record of a store's changelog partition
// in [from, to), markers included, read committed or not.
func (q queryBackend) readChangelog(ctx context.Context, store string, partition int32, from, to int64, committed bool, visit func(*kgo.Record)) error {
	a := q.a
	topic := a.changelogTopic(store)
	opts := a.clientOpts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(from)}}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords(),
	)
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("runtime: reading back %s[%d] from %d to %d: %w", topic, partition, from, to, err)
		}
		if err := fs.Err(); err != nil {
			return fmt.Errorf("runtime: reading back %s[%d]: %w", topic, partition, err)
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= to {
				done = true
				return
			}
			visit(r)
			done = done || r.Offset >= to-1
		})
		if done {
			return nil
		}
	}
}
