package broker

import (
	"math"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// keepAbortedTxns makes read_committed fetches carry the aborted
// transactions of every partition they return records of.
//
// kfake stops filling a fetch response when it reaches the request's
// max_bytes, and when that happens inside a partition it returns the
// batches it already took from that partition without looking up the
// aborted transactions among them (the per-partition limit has no such
// flaw). A read_committed client knows a transactional batch is aborted only
// from that list, so it takes those records for committed ones. Kafka
// computes the list for whatever it returns of a partition.
//
// So a read_committed fetch gets no response limit, and kfake always looks
// the list up; instead, where the partitions the request names could give
// more than max_bytes between them, each one's partition_max_bytes is cut
// to its share of max_bytes, which keeps a response near the size its
// client asked for. (An incremental fetch names only the partitions whose
// offsets moved; those it leaves out keep the share they last had.)
// Responses to read_uncommitted fetches, which ignore the list, are left
// alone.
func keepAbortedTxns(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req := r.(*kmsg.FetchRequest); req.IsolationLevel == 1 {
			shareResponseLimit(req)
		}
		return nil, nil, false
	})
}

// shareResponseLimit lifts req's max_bytes and shares it out among the
// partitions req names, in proportion to their own limits.
func shareResponseLimit(req *kmsg.FetchRequest) {
	var sum int64
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			sum += int64(max(p.PartitionMaxBytes, 0))
		}
	}
	if limit := int64(req.MaxBytes); limit > 0 && sum > limit {
		for i := range req.Topics {
			ps := req.Topics[i].Partitions
			for j := range ps {
				ps[j].PartitionMaxBytes = int32(max(1, int64(ps[j].PartitionMaxBytes)*limit/sum))
			}
		}
	}
	req.MaxBytes = math.MaxInt32
}
