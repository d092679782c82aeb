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
// Lifting the response limit of read_committed fetches means a response
// fills up only partition by partition, each bounded by its
// partition_max_bytes, and kfake always looks the list up. Responses to
// read_uncommitted fetches, which ignore the list, keep their limit.
func keepAbortedTxns(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req := r.(*kmsg.FetchRequest); req.IsolationLevel == 1 {
			req.MaxBytes = math.MaxInt32
		}
		return nil, nil, false
	})
}
