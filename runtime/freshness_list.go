package runtime

// The freshness tracker's listing: the source partitions' ends and the
// group's committed offsets, read straight from the responses. kadm's
// ListEndOffsets asks the broker for metadata at every call and both it
// and FetchOffsets build maps of every partition, which at thousands of
// partitions made the listing an idle instance's largest cost.

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// freshnessMetadataAge is how old the admin client's cached metadata of
// the source topics may be when a listing takes their partitions from it.
// A partition added to a source topic is watched once the cache is
// refreshed; until then its replicas have no InputCommitted, which refuses
// age bounds rather than passing them.
const freshnessMetadataAge = 30 * time.Second

// round lists ends and commits once and updates what each source partition
// has covered. It reports whether anything moved since the last listing:
// an end or a committed offset, a partition seen for the first time, or a
// listing that failed (which tells nothing, so the next is not put off).
func (f *freshness) round(ctx context.Context) (moved bool) {
	if len(f.topics) == 0 {
		return false
	}
	lctx, cancel := context.WithTimeout(ctx, f.pace.base*4)
	defer cancel()
	cl := f.a.adminCl
	meta := kmsg.NewPtrMetadataRequest()
	for _, name := range f.topics {
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr(name)
		meta.Topics = append(meta.Topics, t)
	}
	mresp, err := cl.RequestCachedMetadata(lctx, meta, freshnessMetadataAge)
	if err != nil {
		return true
	}
	list, moved := f.endsRequest(mresp)
	if len(list.Topics) == 0 {
		return moved
	}
	// Taken before the request: the ends listed were reached by then at
	// the latest, so covering them covers the input present at this time.
	at := time.Now()
	shards := cl.RequestSharded(lctx, list)
	// The commits are fetched after the ends: a commit that covers an end
	// covers the input present at at.
	commits, ok := f.fetchCommits(lctx)
	if !ok {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rounds++
	if commits != nil {
		f.noteCommits(commits)
	}
	return f.noteEnds(shards, at) || moved
}

// endsRequest asks for the ends of every partition of the source topics
// the metadata describes. unknown is set when a topic is not described
// (not created yet: a repartition topic at start-up), so that the listing
// keeps its base pace.
func (f *freshness) endsRequest(mresp *kmsg.MetadataResponse) (list *kmsg.ListOffsetsRequest, unknown bool) {
	list = kmsg.NewPtrListOffsetsRequest()
	list.ReplicaID = -1
	if f.a.cfg.ProcessingGuarantee == ExactlyOnce {
		// The last stable offset, which a read-committed consumer
		// reads up to.
		list.IsolationLevel = 1
	}
	for _, mt := range mresp.Topics {
		if mt.Topic == nil || kerr.ErrorForCode(mt.ErrorCode) != nil {
			unknown = true
			continue
		}
		t := kmsg.NewListOffsetsRequestTopic()
		t.Topic = *mt.Topic
		t.Partitions = make([]kmsg.ListOffsetsRequestTopicPartition, len(mt.Partitions))
		for i, mp := range mt.Partitions {
			p := kmsg.NewListOffsetsRequestTopicPartition()
			p.Partition, p.Timestamp = mp.Partition, -1 // -1: the end
			t.Partitions[i] = p
		}
		list.Topics = append(list.Topics, t)
	}
	return list, unknown
}

// fetchCommits fetches the group's committed offsets: nil when the group
// never committed, ok false when the fetch failed.
func (f *freshness) fetchCommits(ctx context.Context) (commits *kmsg.OffsetFetchResponse, ok bool) {
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Group = f.a.cfg.ApplicationID
	commits, err := fetch.RequestWith(ctx, f.a.adminCl)
	if err != nil {
		return nil, false
	}
	groupErr := kerr.ErrorForCode(commits.ErrorCode)
	if groupErr == nil && len(commits.Groups) > 0 {
		groupErr = kerr.ErrorForCode(commits.Groups[0].ErrorCode)
	}
	switch {
	case errors.Is(groupErr, kerr.GroupIDNotFound):
		// Some brokers answer so for a group that never committed;
		// Kafka lists no offsets. Either way nothing was committed.
		return nil, true
	case groupErr != nil:
		return nil, false
	}
	return commits, true
}

// noteEnds records the ends listed at at against this round's commits,
// and reports whether anything moved (see round). It is called with mu
// held.
func (f *freshness) noteEnds(shards []kgo.ResponseShard, at time.Time) (moved bool) {
	for _, shard := range shards {
		if shard.Err != nil {
			moved = true
			continue
		}
		resp := shard.Resp.(*kmsg.ListOffsetsResponse)
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				w := f.watchFor(t.Topic, p.Partition)
				if w == nil || kerr.ErrorForCode(p.ErrorCode) != nil || w.fetchedRound == f.rounds && w.fetchErr {
					moved = true
					continue
				}
				committed := int64(0) // never committed: the group starts at the log's start
				if w.fetchedRound == f.rounds {
					committed = w.fetched
				}
				if w.listed.IsZero() || w.end != p.Offset || w.committed != committed {
					moved = true
				}
				w.observe(at, p.Offset, committed)
				w.end, w.committed = p.Offset, committed
				w.lag, w.listed = max(p.Offset-committed, 0), at
			}
		}
	}
	return moved
}

// noteCommits records the group's committed offsets of the source
// partitions as this round's. It is called with mu held.
func (f *freshness) noteCommits(resp *kmsg.OffsetFetchResponse) {
	note := func(topic string, partition int32, offset int64, code int16) {
		w := f.watchFor(topic, partition)
		if w == nil {
			return
		}
		w.fetchedRound, w.fetched, w.fetchErr = f.rounds, max(offset, 0), kerr.ErrorForCode(code) != nil
	}
	// Version 8 and later answer per group; earlier ones per topic.
	if len(resp.Groups) > 0 {
		for _, t := range resp.Groups[0].Topics {
			for _, p := range t.Partitions {
				note(t.Topic, p.Partition, p.Offset, p.ErrorCode)
			}
		}
		return
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			note(t.Topic, p.Partition, p.Offset, p.ErrorCode)
		}
	}
}

// watchFor returns the watch of a partition of a source topic, made if
// new, and nil for any other topic. It is called with mu held.
func (f *freshness) watchFor(topic string, partition int32) *inputWatch {
	ws, ok := f.watches[topic]
	if !ok || partition < 0 {
		return nil
	}
	if int(partition) >= len(ws) {
		ws = append(ws, make([]*inputWatch, int(partition)+1-len(ws))...)
		f.watches[topic] = ws
	}
	if ws[partition] == nil {
		ws[partition] = &inputWatch{}
	}
	return ws[partition]
}
