package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetsTopic is Kafka's internal topic of committed offsets and group
// metadata. Lag monitors (Burrow, lag exporters) read it to follow every
// group's commits; kfake keeps groups in memory only, so the broker writes
// the topic itself (see offsetsWriter).
const OffsetsTopic = "__consumer_offsets"

// offsetsPartitions is Kafka's default offsets.topic.num.partitions.
const offsetsPartitions = 50

// offsetsWriteEvery is how often the broker writes what changed in the
// groups to OffsetsTopic: a commit shows there within about this long.
const offsetsWriteEvery = 250 * time.Millisecond

// Versions of the records Kafka 3.9 writes to OffsetsTopic. A key's
// version says what the record is.
const (
	offsetCommitKeyVersion    = 1
	offsetCommitValueVersion  = 3
	groupMetadataKeyVersion   = 2
	groupMetadataValueVersion = 3
)

// offsetsPartition is the partition of OffsetsTopic that holds group's
// records, as Kafka picks it: the group ID's Java String.hashCode, sign
// bit cleared, modulo the partition count.
func offsetsPartition(group string) int32 {
	var h int32
	for _, c := range utf16Units(group) {
		h = 31*h + int32(c)
	}
	return (h & 0x7fffffff) % offsetsPartitions
}

// utf16Units are s's UTF-16 code units, which Java strings hash.
func utf16Units(s string) []uint16 {
	var units []uint16
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			units = append(units, uint16(0xd800+(r>>10)), uint16(0xdc00+(r&0x3ff)))
			continue
		}
		units = append(units, uint16(r))
	}
	return units
}

// offsetCommitKey is the key of a committed offset's record (OffsetCommitKey).
func offsetCommitKey(group, topic string, partition int32) []byte {
	b := kbin.AppendInt16(nil, offsetCommitKeyVersion)
	b = kbin.AppendString(b, group)
	b = kbin.AppendString(b, topic)
	return kbin.AppendInt32(b, partition)
}

// offsetCommitValue is the value of a committed offset's record
// (OffsetCommitValue).
func offsetCommitValue(c kfake.GroupCommit) []byte {
	b := kbin.AppendInt16(nil, offsetCommitValueVersion)
	b = kbin.AppendInt64(b, c.Offset)
	b = kbin.AppendInt32(b, c.LeaderEpoch)
	b = kbin.AppendString(b, c.Metadata)
	return kbin.AppendInt64(b, c.At.UnixMilli())
}

// groupMetadataKey is the key of a group's metadata record
// (GroupMetadataKey).
func groupMetadataKey(group string) []byte {
	b := kbin.AppendInt16(nil, groupMetadataKeyVersion)
	return kbin.AppendString(b, group)
}

// groupMetadata is what a group's metadata record says.
type groupMetadata struct {
	protocolType string
	generation   int32
	protocol     *string
	leader       *string
	// stateTimestamp is when the group last changed state, in Unix
	// milliseconds; -1 (the schema's default) when unknown.
	stateTimestamp int64
	members        []memberMetadata
}

type memberMetadata struct {
	memberID                 string
	instanceID               *string
	clientID, clientHost     string
	rebalanceTimeout         int32
	sessionTimeout           int32
	subscription, assignment []byte
}

// groupMetadataValue is the value of a group's metadata record
// (GroupMetadataValue).
func groupMetadataValue(g groupMetadata) []byte {
	b := kbin.AppendInt16(nil, groupMetadataValueVersion)
	b = kbin.AppendString(b, g.protocolType)
	b = kbin.AppendInt32(b, g.generation)
	b = kbin.AppendNullableString(b, g.protocol)
	b = kbin.AppendNullableString(b, g.leader)
	b = kbin.AppendInt64(b, g.stateTimestamp)
	b = kbin.AppendArrayLen(b, len(g.members))
	for _, m := range g.members {
		b = kbin.AppendString(b, m.memberID)
		b = kbin.AppendNullableString(b, m.instanceID)
		b = kbin.AppendString(b, m.clientID)
		b = kbin.AppendString(b, m.clientHost)
		b = kbin.AppendInt32(b, m.rebalanceTimeout)
		b = kbin.AppendInt32(b, m.sessionTimeout)
		b = kbin.AppendBytes(b, m.subscription)
		b = kbin.AppendBytes(b, m.assignment)
	}
	return b
}

// offsetsRecord is one record for OffsetsTopic; a nil value is a
// tombstone.
type offsetsRecord struct {
	key, value []byte
	at         time.Time
}

// recordBatch encodes records as one uncompressed, non-transactional
// record batch (magic 2), as a Produce request carries it.
func recordBatch(records []offsetsRecord) []byte {
	first, maxTS := records[0].at.UnixMilli(), records[0].at.UnixMilli()
	for _, r := range records {
		first, maxTS = min(first, r.at.UnixMilli()), max(maxTS, r.at.UnixMilli())
	}
	var recs []byte
	for i, r := range records {
		body := kbin.AppendInt8(nil, 0) // attributes
		body = kbin.AppendVarlong(body, r.at.UnixMilli()-first)
		body = kbin.AppendVarint(body, int32(i))
		body = kbin.AppendVarintBytes(body, r.key)
		body = kbin.AppendVarintBytes(body, r.value)
		body = kbin.AppendVarint(body, 0) // no headers
		recs = kbin.AppendVarint(recs, int32(len(body)))
		recs = append(recs, body...)
	}
	batch := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1,
		Magic:                2,
		LastOffsetDelta:      int32(len(records) - 1),
		FirstTimestamp:       first,
		MaxTimestamp:         maxTS,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           int32(len(records)),
		Records:              recs,
	}
	b := batch.AppendTo(nil)
	// Length counts what follows it; the CRC covers what follows it.
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// offsetsWriter keeps OffsetsTopic as Kafka would write it: a record for
// every commit (its commit timestamp the commit's), a record whenever a
// group's metadata changes, and tombstones for offsets and groups that go
// away. kfake keeps groups in memory only, so the writer looks at every
// group each offsetsWriteEvery and writes what changed since; commits
// made in between are written as one, the last.
//
// OffsetsTopic is read-only for clients, as on Kafka: a Produce to it
// fails with INVALID_TOPIC_EXCEPTION unless it carries exactly the
// batches the writer is sending.
type offsetsWriter struct {
	cluster *kfake.Cluster
	// topicID is OffsetsTopic's: Produce requests name topics by ID from
	// v13 on.
	topicID [16]byte
	cl      *kgo.Client
	logger  *slog.Logger
	stop    context.CancelFunc
	done    chan struct{}

	// written is what OffsetsTopic says of each group, by group.
	written map[string]*writtenGroup

	mu sync.Mutex
	// ours are the record batches the writer is producing.
	ours map[string]bool
}

type writtenGroup struct {
	commits  map[topicPartition]kfake.GroupCommit
	metadata []byte // the metadata record's value
}

type topicPartition struct {
	topic     string
	partition int32
}

// newOffsetsWriter creates OffsetsTopic if it is missing (compacted and
// internal, as Kafka creates it) and starts writing it.
func newOffsetsWriter(c *kfake.Cluster, clientOpts []kgo.Opt, logger *slog.Logger) (*offsetsWriter, error) {
	if c.TopicInfo(OffsetsTopic) == nil {
		if err := c.CreateTopic(OffsetsTopic, offsetsPartitions, map[string]string{
			"cleanup.policy":    "compact",
			"kfake.is_internal": "true",
		}); err != nil {
			return nil, fmt.Errorf("create %s: %w", OffsetsTopic, err)
		}
	}
	cl, err := kgo.NewClient(clientOpts...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &offsetsWriter{
		cluster: c,
		topicID: c.TopicInfo(OffsetsTopic).TopicID,
		cl:      cl,
		logger:  logger,
		stop:    cancel,
		done:    make(chan struct{}),
		written: make(map[string]*writtenGroup),
		ours:    make(map[string]bool),
	}
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if resp := w.refuse(r.(*kmsg.ProduceRequest)); resp != nil {
			return resp, nil, true
		}
		return nil, nil, false
	})
	go w.run(ctx)
	return w, nil
}

func (w *offsetsWriter) close() {
	w.stop()
	<-w.done
	w.cl.Close()
}

// refuse returns the answer to a Produce that writes OffsetsTopic other
// than the writer's, or nil. The whole request is refused: a client
// writing the offsets topic is broken, and an answer for part of its
// request only would leave it waiting for the rest.
func (w *offsetsWriter) refuse(req *kmsg.ProduceRequest) kmsg.Response {
	w.mu.Lock()
	defer w.mu.Unlock()
	ok, touches := true, false
	for _, t := range req.Topics {
		if t.Topic != OffsetsTopic && t.TopicID != w.topicID {
			continue
		}
		touches = true
		for _, p := range t.Partitions {
			ok = ok && w.ours[string(p.Records)]
		}
	}
	if !touches || ok {
		return nil
	}
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = kerr.InvalidTopicException.Code
			msg := "Cannot append to internal topic " + OffsetsTopic
			rp.ErrorMessage = &msg
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (w *offsetsWriter) run(ctx context.Context) {
	defer close(w.done)
	t := time.NewTicker(offsetsWriteEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := w.write(ctx); err != nil && ctx.Err() == nil {
			w.logger.Warn("write "+OffsetsTopic, "err", err)
		}
	}
}

// write writes what changed in the groups since the last write.
func (w *offsetsWriter) write(ctx context.Context) error {
	listed, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, w.cl)
	if err != nil {
		return err
	}
	if err := kerr.ErrorForCode(listed.ErrorCode); err != nil {
		return err
	}
	names := make([]string, 0, len(listed.Groups))
	for _, g := range listed.Groups {
		names = append(names, g.Group)
	}
	described := make(map[string]kmsg.DescribeGroupsResponseGroup)
	if len(names) > 0 {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = names
		resp, err := req.RequestWith(ctx, w.cl)
		if err != nil {
			return err
		}
		for _, g := range resp.Groups {
			if g.ErrorCode == 0 {
				described[g.Group] = g
			}
		}
	}

	now := time.Now()
	byPartition := make(map[int32][]offsetsRecord)
	next := make(map[string]*writtenGroup)
	for _, name := range names {
		info := w.cluster.GroupInfo(name)
		if info == nil {
			continue // gone since the listing
		}
		was := w.written[name]
		if was == nil {
			was = &writtenGroup{}
		}
		cur := &writtenGroup{commits: make(map[topicPartition]kfake.GroupCommit)}
		var recs []offsetsRecord
		for topic, parts := range info.Commits {
			for p, c := range parts {
				tp := topicPartition{topic, p}
				cur.commits[tp] = c
				if old, ok := was.commits[tp]; !ok || old != c {
					recs = append(recs, offsetsRecord{offsetCommitKey(name, topic, p), offsetCommitValue(c), c.At})
				}
			}
		}
		recs = append(recs, tombstones(name, was, cur.commits, now)...)
		// A group that only ever had offsets committed for it has no
		// metadata record on Kafka either.
		if d, ok := described[name]; ok && d.ProtocolType != "" {
			cur.metadata = groupMetadataValue(metadataOf(d, info))
			if !slices.Equal(cur.metadata, was.metadata) {
				recs = append(recs, offsetsRecord{groupMetadataKey(name), cur.metadata, now})
			}
		}
		next[name] = cur
		p := offsetsPartition(name)
		byPartition[p] = append(byPartition[p], recs...)
	}
	for name, was := range w.written {
		if _, ok := next[name]; !ok {
			recs := tombstones(name, was, nil, now)
			if was.metadata != nil {
				recs = append(recs, offsetsRecord{key: groupMetadataKey(name), at: now})
			}
			p := offsetsPartition(name)
			byPartition[p] = append(byPartition[p], recs...)
		}
	}
	if err := w.produce(ctx, byPartition); err != nil {
		return err // written stays as it was: the next write tries again
	}
	w.written = next
	return nil
}

// tombstones are the records that delete the offsets was has and now has
// not.
func tombstones(group string, was *writtenGroup, now map[topicPartition]kfake.GroupCommit, at time.Time) []offsetsRecord {
	var recs []offsetsRecord
	for tp := range was.commits {
		if _, ok := now[tp]; !ok {
			recs = append(recs, offsetsRecord{key: offsetCommitKey(group, tp.topic, tp.partition), at: at})
		}
	}
	return recs
}

// metadataOf is a group's metadata record from its description and kfake's
// view of it. Neither says who the leader is, when the group last changed
// state, or the members' timeouts: those are written as unknown (null, -1
// and 0).
func metadataOf(d kmsg.DescribeGroupsResponseGroup, info *kfake.GroupInfo) groupMetadata {
	g := groupMetadata{protocolType: d.ProtocolType, generation: info.Epoch, stateTimestamp: -1}
	if d.Protocol != "" {
		g.protocol = kmsg.StringPtr(d.Protocol)
	}
	for _, m := range d.Members {
		g.members = append(g.members, memberMetadata{
			memberID:     m.MemberID,
			instanceID:   m.InstanceID,
			clientID:     m.ClientID,
			clientHost:   m.ClientHost,
			subscription: m.ProtocolMetadata,
			assignment:   m.MemberAssignment,
		})
	}
	return g
}

// produce writes each partition's records as one batch.
func (w *offsetsWriter) produce(ctx context.Context, byPartition map[int32][]offsetsRecord) error {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 30_000
	t := kmsg.NewProduceRequestTopic()
	t.Topic, t.TopicID = OffsetsTopic, w.topicID
	var batches []string
	for _, p := range slices.Sorted(maps.Keys(byPartition)) {
		if len(byPartition[p]) == 0 {
			continue
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = p
		rp.Records = recordBatch(byPartition[p])
		t.Partitions = append(t.Partitions, rp)
		batches = append(batches, string(rp.Records))
	}
	if len(t.Partitions) == 0 {
		return nil
	}
	req.Topics = append(req.Topics, t)
	w.mu.Lock()
	for _, b := range batches {
		w.ours[b] = true
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		for _, b := range batches {
			delete(w.ours, b)
		}
		w.mu.Unlock()
	}()
	resp, err := req.RequestWith(ctx, w.cl)
	if err != nil {
		return err
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return fmt.Errorf("partition %d: %w", rp.Partition, err)
			}
		}
	}
	return nil
}
