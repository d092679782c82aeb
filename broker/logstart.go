package broker

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// logStarts keeps, for every partition of a compacted topic, the log start
// offset a real Kafka would have, and shows it to clients in place of
// kfake's.
//
// kfake's compactor sets a partition's log start to the first batch it
// keeps; Kafka's log cleaner leaves the log start alone, and only
// DeleteRecords and retention (on topics whose cleanup.policy includes
// "delete") move it. Eddy treats a store whose changelog position is below
// the log start as having missed deleted records and rebuilds it, so on
// kfake every restart after a compaction rebuilt stores a real cluster lets
// restore their tail.
//
// The broker runs compaction itself (kfake's own cleaner is left idle) and,
// around each run, records kfake's log start: whatever moves kfake's start
// outside a compaction (DeleteRecords, retention, a recovery) moves the
// Kafka-like start with it, a compaction does not. Clients then see:
//
//   - ListOffsets for the earliest offset answers the Kafka-like start;
//   - a Fetch from an offset between the Kafka-like start and kfake's start
//     (records the cleaner removed) is served from the first record kept,
//     as Kafka serves a fetch into a compacted gap;
//   - a Fetch below the Kafka-like start fails with OFFSET_OUT_OF_RANGE,
//     which kfake answers itself;
//   - DeleteRecords to an offset inside the gap moves the Kafka-like start.
type logStarts struct {
	cluster *kfake.Cluster
	cl      *kgo.Client // lists topics for compaction; never used under mu
	opts    []kgo.Opt   // the broker's own client options, for abortMarkers
	path    string      // the persisted state; empty without a data dir
	logger  *slog.Logger

	// compactMu serialises compaction runs.
	compactMu sync.Mutex

	// mu guards the tracked partitions. It is held across calls into the
	// cluster's admin functions (which kfake serves even while it waits
	// for a control function), never across requests sent to the broker,
	// which a control function waiting on mu would keep from being served.
	mu     sync.Mutex
	topics map[string]*trackedTopic
	byID   map[[16]byte]string

	// holding is set while a compaction decides and runs: transactional
	// produce requests are then refused with a retriable error
	// (holdProduce), so that no transaction writes between the check that
	// none is open and the compaction. refused counts them, for tests.
	holding atomic.Bool
	refused atomic.Int64
	// beforeCompact, if set, runs just before kfake compacts (tests).
	beforeCompact func()
}

// trackedTopic is a compacted topic whose partitions' log starts are kept.
type trackedTopic struct {
	id    [16]byte
	parts map[int32]*trackedPart
}

type trackedPart struct {
	// start is the log start offset a Kafka broker would report.
	start int64
	// seen is kfake's log start as the broker last left it: after its
	// own compaction or a DeleteRecords it passed on. kfake's start
	// differing from seen means something else moved it, and Kafka's
	// start moved to the same place.
	seen int64
}

// logStartsFile is the persisted state's file name in the data dir, and
// logStartsVersion the version of its format this code writes and reads.
const (
	logStartsFile    = "eddy-log-starts.json"
	logStartsVersion = 1
)

type persistedStarts struct {
	Version    int                `json:"version"`
	Partitions []persistedStartTP `json:"partitions"`
}

type persistedStartTP struct {
	Topic     string `json:"topic"`
	TopicID   string `json:"topic_id"`
	Partition int32  `json:"partition"`
	LogStart  int64  `json:"log_start"`
}

func newLogStarts(c *kfake.Cluster, clientOpts []kgo.Opt, dataDir string, logger *slog.Logger) (*logStarts, error) {
	cl, err := kgo.NewClient(clientOpts...)
	if err != nil {
		return nil, err
	}
	ls := &logStarts{
		cluster: c,
		cl:      cl,
		opts:    clientOpts,
		logger:  logger,
		topics:  make(map[string]*trackedTopic),
		byID:    make(map[[16]byte]string),
	}
	if dataDir != "" {
		ls.path = filepath.Join(dataDir, logStartsFile)
		if err := ls.load(); err != nil {
			cl.Close()
			return nil, err
		}
	}
	c.ControlKey(int16(kmsg.ListOffsets), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if resp := ls.listEarliest(r.(*kmsg.ListOffsetsRequest)); resp != nil {
			return resp, nil, true
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		ls.fetch(r.(*kmsg.FetchRequest))
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if resp := ls.holdProduce(r.(*kmsg.ProduceRequest)); resp != nil {
			return resp, nil, true
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.DeleteRecords), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		ls.deleteRecords(r.(*kmsg.DeleteRecordsRequest))
		return nil, nil, false
	})
	return ls, nil
}

func (ls *logStarts) close() { ls.cl.Close() }

// reconcile brings p up to date with kfake's current log start cur.
func (p *trackedPart) reconcile(cur int64) {
	if cur != p.seen {
		p.start, p.seen = cur, cur
	}
}

// gap reports whether offset lies where Kafka still has the log but kfake
// has moved its start past: records removed by compaction.
func (p *trackedPart) gap(offset int64) bool {
	return offset >= p.start && offset < p.seen
}

// compact applies retention and compacts every compacted topic, keeping the
// Kafka-like log starts where Kafka's cleaner would leave them.
func (ls *logStarts) compact(ctx context.Context) error {
	ls.compactMu.Lock()
	defer ls.compactMu.Unlock()

	// Retention alone first: it moves log starts on Kafka too, so what it
	// moves is taken as Kafka's start before compaction moves kfake's
	// further. (Cluster.Compact applies retention again, after
	// compacting; by then nearly nothing is left for it to do.)
	ls.cluster.ApplyRetention()

	// The topic list comes from a request, made before taking mu.
	req := kmsg.NewPtrMetadataRequest()
	resp, err := req.RequestWith(ctx, ls.cl)
	if err != nil {
		return fmt.Errorf("broker: listing topics to compact: %w", err)
	}
	names := make([]string, 0, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic != nil && t.ErrorCode == 0 {
			names = append(names, *t.Topic)
		}
	}
	// kfake compacts everything before a partition's last batch, past its
	// last stable offset: an open transaction's records then supersede
	// committed records of the same keys, and if the transaction aborts, a
	// read-committed reader (a store restoring its changelog) finds
	// neither. Kafka's cleaner stops at the first unstable offset. So the
	// broker compacts only at a moment no compacted partition has a
	// transaction open; under exactly-once a changelog partition is in a
	// transaction only while a commit is under way, so such a moment comes
	// soon, and otherwise at the next interval.
	if !ls.awaitStable(ctx, names) {
		return nil
	}
	// From here until kfake has compacted, no transaction writes (see
	// holdProduce): one opened after the check below could otherwise
	// write batches before its partition's last, which kfake would clean,
	// and if it then aborted, a read-committed reader would find neither
	// its records nor the committed ones they superseded.
	ls.holding.Store(true)
	defer ls.holding.Store(false)
	// Read with no lock held: the reads pass through ls.fetch, which
	// takes mu.
	before, err := ls.abortMarkers(ctx, names)
	if err != nil {
		return fmt.Errorf("broker: listing ABORT markers before compacting: %w", err)
	}
	compacted, err := ls.compactLocked(names)
	if err != nil || !compacted {
		return err
	}
	after, err := ls.abortMarkers(ctx, names)
	if err != nil {
		return fmt.Errorf("broker: listing ABORT markers after compacting: %w", err)
	}
	n, err := ls.keepAbortMarkers(ctx, before, after)
	if n > 0 {
		ls.logger.Debug("wrote again the ABORT markers compaction removed", "markers", n)
	}
	return err
}

// compactLocked compacts, unless a transaction has opened, and keeps the
// Kafka-like log starts; it reports whether it compacted.
func (ls *logStarts) compactLocked(names []string) (bool, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	compacted := make(map[string]*kfake.TopicInfo)
	for _, name := range names {
		ti := ls.cluster.TopicInfo(name)
		if ti == nil || !isCompacted(ti) {
			continue
		}
		compacted[name] = ti
		tt := ls.topics[name]
		if tt == nil || tt.id != ti.TopicID {
			tt = &trackedTopic{id: ti.TopicID, parts: make(map[int32]*trackedPart)}
		}
		for _, pi := range ls.cluster.PartitionInfos(name) {
			if p := tt.parts[pi.Partition]; p != nil {
				p.reconcile(pi.LogStartOffset)
			} else {
				// Not compacted under this broker's watch yet, so kfake's
				// start is Kafka's.
				tt.parts[pi.Partition] = &trackedPart{start: pi.LogStartOffset, seen: pi.LogStartOffset}
			}
		}
		ls.topics[name] = tt
	}
	// Topics deleted, recreated or no longer compacted are kfake's alone.
	for name, tt := range ls.topics {
		if ti := compacted[name]; ti == nil || ti.TopicID != tt.id {
			delete(ls.topics, name)
		}
	}
	ls.reindexLocked()

	// Checked again just before: a transaction that wrote since the
	// first check, before writes were held, is open.
	if ls.openTransaction(names) {
		return false, nil
	}
	if ls.beforeCompact != nil {
		ls.beforeCompact()
	}
	ls.cluster.Compact()

	for name, tt := range ls.topics {
		for _, pi := range ls.cluster.PartitionInfos(name) {
			if p := tt.parts[pi.Partition]; p != nil {
				p.seen = pi.LogStartOffset
			}
		}
	}
	return true, ls.saveLocked()
}

// stableWait bounds how long a compaction waits for a moment with no
// transaction open on a compacted partition.
const stableWait = time.Second

// holdProduce answers a transactional produce request with a retriable
// error while a compaction holds writes, and returns nil otherwise: only
// a transaction can abort, so only its batches must not be cleaned before
// it ends. REQUEST_TIMED_OUT has the producer send the same batch again
// after its retry backoff, where other retriable errors would have it wait
// for a metadata refresh first. It runs on kfake's request loop, so it
// takes no lock.
func (ls *logStarts) holdProduce(req *kmsg.ProduceRequest) kmsg.Response {
	if !ls.holding.Load() || req.TransactionID == nil {
		return nil
	}
	ls.refused.Add(1)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, kerr.RequestTimedOut.Code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// awaitStable waits, at most stableWait, until no compacted partition among
// the named topics has a transaction open, and reports whether that came.
func (ls *logStarts) awaitStable(ctx context.Context, names []string) bool {
	deadline := time.Now().Add(stableWait)
	for ls.openTransaction(names) {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}

// openTransaction reports whether a partition of a compacted topic among
// names has a transaction open: its last stable offset is below its high
// watermark.
func (ls *logStarts) openTransaction(names []string) bool {
	for _, name := range names {
		if ti := ls.cluster.TopicInfo(name); ti == nil || !isCompacted(ti) {
			continue
		}
		for _, pi := range ls.cluster.PartitionInfos(name) {
			if pi.LastStableOffset < pi.HighWatermark {
				return true
			}
		}
	}
	return false
}

// isCompacted reports whether a topic's cleanup.policy includes compact.
// kfake only knows topic-level policies; the broker default is delete.
func isCompacted(ti *kfake.TopicInfo) bool {
	v := ti.Configs["cleanup.policy"]
	return v != nil && slices.Contains(strings.Split(*v, ","), "compact")
}

func (ls *logStarts) reindexLocked() {
	clear(ls.byID)
	for name, tt := range ls.topics {
		ls.byID[tt.id] = name
	}
}

// listEarliest answers a ListOffsets request asking the earliest offset of
// partitions where the Kafka-like start differs from kfake's, and returns
// nil for every other request, which kfake answers itself. It answers only
// requests it can answer whole: every partition asking the earliest
// offset, each named once, from a consumer or the debug replica.
func (ls *logStarts) listEarliest(req *kmsg.ListOffsetsRequest) *kmsg.ListOffsetsResponse {
	if req.Version < 1 || (req.ReplicaID != -1 && req.ReplicaID != -2) {
		return nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	type tp struct {
		t string
		p int32
	}
	named := make(map[tp]bool)
	diverges := false
	for _, rt := range req.Topics {
		tt := ls.topics[rt.Topic]
		for _, rp := range rt.Partitions {
			if rp.Timestamp != -2 || named[tp{rt.Topic, rp.Partition}] {
				return nil
			}
			named[tp{rt.Topic, rp.Partition}] = true
			if tt != nil {
				if p := tt.parts[rp.Partition]; p != nil && p.start < p.seen {
					diverges = true
				}
			}
		}
	}
	if !diverges {
		return nil
	}

	node := ls.cluster.CurrentNode()
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		ti := ls.cluster.TopicInfo(rt.Topic)
		infos := make(map[int32]*kfake.PartitionInfo)
		if ti != nil {
			for _, pi := range ls.cluster.PartitionInfos(rt.Topic) {
				infos[pi.Partition] = pi
			}
		}
		tt := ls.topics[rt.Topic]
		if tt != nil && (ti == nil || ti.TopicID != tt.id) {
			tt = nil // an older topic of that name
		}
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			pi := infos[rp.Partition]
			switch {
			case pi == nil:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case req.Version >= 4 && rp.CurrentLeaderEpoch != -1 && rp.CurrentLeaderEpoch < pi.Epoch:
				sp.ErrorCode = kerr.FencedLeaderEpoch.Code
			case req.Version >= 4 && rp.CurrentLeaderEpoch != -1 && rp.CurrentLeaderEpoch > pi.Epoch:
				sp.ErrorCode = kerr.UnknownLeaderEpoch.Code
			case pi.Leader != node && req.ReplicaID != -2:
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
			default:
				sp.Offset = pi.LogStartOffset
				if tt != nil {
					if p := tt.parts[rp.Partition]; p != nil {
						p.reconcile(pi.LogStartOffset)
						sp.Offset = p.start
					}
				}
				sp.Timestamp = -1
				// The epoch of the record at the start would be exact;
				// with one node and no leader moves, it is the
				// partition's epoch.
				sp.LeaderEpoch = pi.Epoch
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// fetch raises the fetch offset of partitions asked from inside a compacted
// gap to the first offset kfake kept, so kfake serves them from the next
// record there is, as Kafka does. Only partitions in the request are
// touched: those an incremental fetch session leaves out were sent, and
// raised if need be, in an earlier request.
func (ls *logStarts) fetch(req *kmsg.FetchRequest) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.topics) == 0 {
		return
	}
	for i := range req.Topics {
		rt := &req.Topics[i]
		name := rt.Topic
		if req.Version >= 13 {
			name = ls.byID[rt.TopicID]
		}
		tt := ls.topics[name]
		if tt == nil {
			continue
		}
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			p := tt.parts[rp.Partition]
			if p == nil || !p.gap(rp.FetchOffset) {
				continue
			}
			pi := ls.cluster.PartitionInfo(name, rp.Partition)
			if pi == nil {
				continue
			}
			p.reconcile(pi.LogStartOffset)
			if p.gap(rp.FetchOffset) {
				rp.FetchOffset = pi.LogStartOffset
			}
		}
	}
}

// deleteRecords moves the Kafka-like start of the partitions a
// DeleteRecords request truncates. Kafka accepts any offset up to the high
// watermark, one below the log start doing nothing; kfake refuses offsets
// below its own start, so such an offset is raised to kfake's start (a
// no-op there) and the request passed on.
func (ls *logStarts) deleteRecords(req *kmsg.DeleteRecordsRequest) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	changed := false
	for i := range req.Topics {
		rt := &req.Topics[i]
		tt := ls.topics[rt.Topic]
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			pi := ls.cluster.PartitionInfo(rt.Topic, rp.Partition)
			if pi == nil {
				continue // kfake answers UNKNOWN_TOPIC_OR_PARTITION
			}
			to := rp.Offset
			if to == -1 {
				to = pi.HighWatermark
			}
			if to < 0 || to > pi.HighWatermark {
				continue // OFFSET_OUT_OF_RANGE, from kfake as from Kafka
			}
			var p *trackedPart
			if tt != nil {
				p = tt.parts[rp.Partition]
			}
			if p != nil {
				p.reconcile(pi.LogStartOffset)
				if to > p.start {
					p.start = to
					changed = true
				}
			}
			if to < pi.LogStartOffset {
				rp.Offset = pi.LogStartOffset
			} else if p != nil {
				p.seen = to
			}
		}
	}
	if changed {
		if err := ls.saveLocked(); err != nil {
			ls.logger.Error("saving log start offsets", "err", err)
		}
	}
}

// load reads the persisted starts and reconciles them with the cluster as
// it came back: entries of topics that are gone or recreated are dropped,
// and a deletion kfake lost (its log start is only snapshotted on a clean
// shutdown) is applied again.
func (ls *logStarts) load() error {
	data, err := os.ReadFile(ls.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("broker: reading log starts: %w", err)
	}
	var ps persistedStarts
	if err := json.Unmarshal(data, &ps); err != nil {
		return fmt.Errorf("broker: reading log starts %s: %w", ls.path, err)
	}
	if ps.Version != logStartsVersion {
		return fmt.Errorf("broker: log starts %s: version %d, this broker reads version %d", ls.path, ps.Version, logStartsVersion)
	}
	for _, e := range ps.Partitions {
		raw, err := hex.DecodeString(e.TopicID)
		if err != nil || len(raw) != 16 {
			return fmt.Errorf("broker: log starts %s: bad topic ID %q", ls.path, e.TopicID)
		}
		id := [16]byte(raw)
		ti := ls.cluster.TopicInfo(e.Topic)
		if ti == nil || ti.TopicID != id {
			continue
		}
		pi := ls.cluster.PartitionInfo(e.Topic, e.Partition)
		if pi == nil {
			continue
		}
		cur := pi.LogStartOffset
		if e.LogStart > cur && e.LogStart <= pi.HighWatermark {
			if err := ls.cluster.DeleteRecords(e.Topic, e.Partition, e.LogStart); err != nil {
				return fmt.Errorf("broker: restoring log start of %s[%d]: %w", e.Topic, e.Partition, err)
			}
			cur = e.LogStart
		}
		tt := ls.topics[e.Topic]
		if tt == nil {
			tt = &trackedTopic{id: id, parts: make(map[int32]*trackedPart)}
			ls.topics[e.Topic] = tt
		}
		tt.parts[e.Partition] = &trackedPart{start: min(e.LogStart, cur), seen: cur}
	}
	ls.reindexLocked()
	return nil
}

// saveLocked writes the tracked starts, replacing the file whole so a crash
// leaves either the old state or the new one.
func (ls *logStarts) saveLocked() error {
	if ls.path == "" {
		return nil
	}
	ps := persistedStarts{Version: logStartsVersion, Partitions: []persistedStartTP{}}
	for _, name := range slices.Sorted(maps.Keys(ls.topics)) {
		tt := ls.topics[name]
		for _, p := range slices.Sorted(maps.Keys(tt.parts)) {
			ps.Partitions = append(ps.Partitions, persistedStartTP{
				Topic: name, TopicID: hex.EncodeToString(tt.id[:]), Partition: p, LogStart: tt.parts[p].start,
			})
		}
	}
	data, err := json.MarshalIndent(ps, "", "  ")
	if err != nil {
		return err
	}
	tmp := ls.path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("broker: writing log starts: %w", err)
	}
	if err := os.Rename(tmp, ls.path); err != nil {
		return fmt.Errorf("broker: writing log starts: %w", err)
	}
	return nil
}
