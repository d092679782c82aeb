package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A transaction open when the broker's process dies has data batches in
// the log and no marker after them. kfake, replaying such a log, counts the
// transaction as aborted in memory but writes no ABORT marker, and that
// breaks what a marker-less log means to everyone else:
//
//   - A read_committed client drops a producer's batches from the first
//     batch of an aborted transaction until that producer's next marker,
//     so the producer's next transaction in the partition, committed, is
//     dropped as well.
//   - A reader that waits to reach the end offset never gets there when the
//     log ends with such a transaction: nothing it is given lies past it.
//   - At the next restart, kfake's replay takes the transaction for the
//     start of the producer's next one, and the next COMMIT marker makes
//     the aborted records committed.
//
// So before serving clients, the broker writes the ABORT markers kfake
// left out: it lists the producers whose transactional batches no marker
// follows, starts kfake on a private port, writes an ABORT marker for each
// transaction kfake does not hold open (a graceful shutdown keeps a
// transaction open across the restart), and closes that kfake again.

// openTxn is a producer's transaction with no marker in one partition.
type openTxn struct {
	topic     string
	partition int32
	pid       int64
	epoch     int16
}

// Record batch header fields (Kafka's v2 format) read by scanOpenTxns.
const (
	batchLengthAt    = 8  // int32, after the 8-byte first offset
	batchMagicAt     = 16 // int8
	batchAttrsAt     = 21 // int16
	batchPIDAt       = 43 // int64
	batchEpochAt     = 51 // int16
	batchHeaderBytes = 61
	attrTransacted   = 0x10
	attrControl      = 0x20
)

// scanOpenTxns lists the transactions with no marker in the segment files
// kfake keeps under dataDir (partitions/<escaped topic>-<partition>/<base
// offset>.dat, record batches back to back), reading them as kfake's
// replay does: it stops at the first batch cut short.
func scanOpenTxns(dataDir string) ([]openTxn, error) {
	var out []openTxn
	err := eachPartitionDir(dataDir, func(topic string, partition int32, dir string) error {
		open, err := scanPartition(dir)
		for pid, epoch := range open {
			out = append(out, openTxn{topic: topic, partition: partition, pid: pid, epoch: epoch})
		}
		return err
	})
	return out, err
}

// eachPartitionDir calls fn with every partition directory kfake keeps
// under dataDir (partitions/<escaped topic>-<partition>), stopping at the
// first error.
func eachPartitionDir(dataDir string, fn func(topic string, partition int32, dir string) error) error {
	root := filepath.Join(dataDir, "partitions")
	dirs, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, d := range dirs {
		dash := strings.LastIndexByte(d.Name(), '-')
		if !d.IsDir() || dash < 0 {
			continue
		}
		topic, err := url.PathUnescape(d.Name()[:dash])
		if err != nil {
			continue
		}
		p, err := strconv.ParseInt(d.Name()[dash+1:], 10, 32)
		if err != nil {
			continue
		}
		if err := fn(topic, int32(p), filepath.Join(root, d.Name())); err != nil {
			return err
		}
	}
	return nil
}

// scanPartition returns the producers (and their epochs) whose last
// transactional batch in the partition's segments no marker follows. It
// reads only the batches' headers: the broker does this at every start,
// and a data directory's segments can be large.
func scanPartition(dir string) (map[int64]int16, error) {
	open := make(map[int64]int16)
	err := eachBatchHeader(dir, func(hdr []byte) {
		attrs := binary.BigEndian.Uint16(hdr[batchAttrsAt:])
		pid := int64(binary.BigEndian.Uint64(hdr[batchPIDAt:]))
		switch {
		case attrs&attrControl != 0:
			delete(open, pid)
		case attrs&attrTransacted != 0:
			if _, ok := open[pid]; !ok {
				open[pid] = int16(binary.BigEndian.Uint16(hdr[batchEpochAt:]))
			}
		}
	})
	return open, err
}

// abortCrashedTxns writes the ABORT markers a crash left out (see above),
// on a kfake started with opts on a private port (its listener wrapped
// by secure), reached with the broker's own client options internal. It returns how many it wrote (one per producer and partition).
func abortCrashedTxns(dataDir string, opts []kfake.Opt, secure func(net.Listener) net.Listener, internal []kgo.Opt) (int, error) {
	open, err := scanOpenTxns(dataDir)
	if err != nil || len(open) == 0 {
		return 0, err
	}
	private := func(network, _ string) (net.Listener, error) {
		l, err := net.Listen(network, "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		return secure(l), nil
	}
	c, err := kfake.NewCluster(append(slices.Clip(opts), kfake.ListenFn(private))...)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	cl, err := kgo.NewClient(append(slices.Clip(internal), kgo.SeedBrokers(c.ListenAddrs()...))...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Transactions kfake restored as open are its producers' to end.
	describe := kmsg.NewPtrDescribeProducersRequest()
	byTopic := make(map[string][]int32)
	for _, o := range open {
		if !slices.Contains(byTopic[o.topic], o.partition) {
			byTopic[o.topic] = append(byTopic[o.topic], o.partition)
		}
	}
	for topic, parts := range byTopic {
		t := kmsg.NewDescribeProducersRequestTopic()
		t.Topic, t.Partitions = topic, parts
		describe.Topics = append(describe.Topics, t)
	}
	resp, err := describe.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("describe producers: %w", err)
	}
	type tpp struct {
		topic     string
		partition int32
		pid       int64
	}
	held := make(map[tpp]bool)
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			for _, ap := range p.ActiveProducers {
				held[tpp{t.Topic, p.Partition, ap.ProducerID}] = true
			}
		}
	}

	var aborts []openTxn
	for _, o := range open {
		if !held[tpp{o.topic, o.partition, o.pid}] {
			aborts = append(aborts, o)
		}
	}
	return len(aborts), writeAbortMarkers(ctx, cl, aborts)
}

// writeAbortMarkers writes an ABORT marker for each of aborts, in order.
func writeAbortMarkers(ctx context.Context, cl *kgo.Client, aborts []openTxn) error {
	if len(aborts) == 0 {
		return nil
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	for _, o := range aborts {
		m := kmsg.NewWriteTxnMarkersRequestMarker()
		m.ProducerID, m.ProducerEpoch, m.Committed = o.pid, o.epoch, false
		t := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		t.Topic, t.Partitions = o.topic, []int32{o.partition}
		m.Topics = []kmsg.WriteTxnMarkersRequestMarkerTopic{t}
		req.Markers = append(req.Markers, m)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("write abort markers: %w", err)
	}
	var errs []error
	for _, m := range resp.Markers {
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				// A topic deleted since has no log left to mend.
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
					errs = append(errs, fmt.Errorf("abort marker for producer %d in %s/%d: %w", m.ProducerID, t.Topic, p.Partition, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}
