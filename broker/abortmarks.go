package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kfake's compaction drops a producer's transaction markers once none of
// its data batches survive, but keeps the aborted transactions it records
// for read-committed fetches until the log start passes them. A reader
// told that producer P aborted from offset F drops every transactional
// batch of P from F until it meets P's ABORT marker, so with the marker
// gone it dropped P's later, committed, transactions as well: a producer
// whose records another's superseded (a task that moved away) and that
// later wrote to the partition again (the task moved back) had its commits
// lost to every store restored or followed from before them. Kafka keeps
// a marker for as long as its aborted transaction is listed.
//
// So each compaction lists the ABORT markers of the compacted partitions
// before and after, while transactional writes are held (see
// holdProduce), and writes a fresh ABORT marker for each marker the
// compaction removed above the log start: a reader pops one of a
// producer's aborted transactions per marker it meets. A reader then stops
// dropping at it; nothing of that producer lies between the two, as it had
// no data left and could not write meanwhile.

// abortMarker is an ABORT marker: its producer and offset.
type abortMarker struct {
	pid    int64
	epoch  int16
	offset int64
}

// partKey names a partition.
type partKey struct {
	topic     string
	partition int32
}

// abortMarkers reads the named compacted topics whole and lists their
// partitions' ABORT markers.
func (ls *logStarts) abortMarkers(ctx context.Context, names []string) (map[partKey][]abortMarker, error) {
	offsets := make(map[string]map[int32]kgo.Offset)
	ends := make(map[partKey]int64)
	for _, name := range names {
		if ti := ls.cluster.TopicInfo(name); ti == nil || !isCompacted(ti) {
			continue
		}
		for _, pi := range ls.cluster.PartitionInfos(name) {
			if pi.HighWatermark <= pi.LogStartOffset {
				continue
			}
			if offsets[name] == nil {
				offsets[name] = make(map[int32]kgo.Offset)
			}
			offsets[name][pi.Partition] = kgo.NewOffset().At(pi.LogStartOffset)
			ends[partKey{name, pi.Partition}] = pi.HighWatermark
		}
	}
	out := make(map[partKey][]abortMarker)
	if len(ends) == 0 {
		return out, nil
	}
	cl, err := kgo.NewClient(append(slices.Clip(ls.opts), kgo.ConsumePartitions(offsets), kgo.KeepControlRecords())...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	for len(ends) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("reading %s/%d: %w", topic, p, err)
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			k := partKey{r.Topic, r.Partition}
			end, ok := ends[k]
			if !ok {
				return
			}
			if r.Attrs.IsControl() && len(r.Key) >= 4 && r.Key[2] == 0 && r.Key[3] == 0 {
				out[k] = append(out[k], abortMarker{r.ProducerID, r.ProducerEpoch, r.Offset})
			}
			if r.Offset >= end-1 {
				delete(ends, k)
			}
		})
	}
	return out, nil
}

// keepAbortMarkers writes an ABORT marker again for every marker in
// before, at or above its partition's log start, that the log no longer
// holds (after), in offset order. It reports how many it wrote.
func (ls *logStarts) keepAbortMarkers(ctx context.Context, before, after map[partKey][]abortMarker) (int, error) {
	var aborts []openTxn
	for _, k := range slices.SortedFunc(maps.Keys(before), func(a, b partKey) int {
		if a.topic != b.topic {
			if a.topic < b.topic {
				return -1
			}
			return 1
		}
		return int(a.partition - b.partition)
	}) {
		pi := ls.cluster.PartitionInfo(k.topic, k.partition)
		if pi == nil {
			continue
		}
		kept := make(map[int64]bool)
		for _, m := range after[k] {
			kept[m.offset] = true
		}
		// One marker again for each one removed: a reader pops one
		// aborted transaction of the producer at each marker it meets.
		for _, m := range before[k] {
			if m.offset < pi.LogStartOffset || kept[m.offset] {
				continue
			}
			aborts = append(aborts, openTxn{topic: k.topic, partition: k.partition, pid: m.pid, epoch: m.epoch})
		}
	}
	return len(aborts), writeAbortMarkers(ctx, ls.cl, aborts)
}
