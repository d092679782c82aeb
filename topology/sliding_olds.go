package topology

import (
	"bytes"
	"fmt"
)

// The old value of a sliding window's update is, as Kafka Streams'
// sliding aggregate sends it, the aggregate the update started from: for
// a window the store holds, its stored aggregate (storedOld); for a new
// window, the one it was derived from (derivedOld: a left window's
// neighbour's aggregate, or initialOld), but null for a record's right
// window, which Kafka Streams creates as a copy with no old value
// (newOld). Under the record cache a new window's is null, as Kafka
// Streams' caching window store reads the old value from its underlying
// store, which holds nothing for it; tableUpdates then keeps a window's
// first pending old value until the flush. With FoldKeptRecords a new
// window holding the record starts, for its old value, from its records
// without the record (slidingAggProc.createdOld).

// openOlds takes the node's old-value settings.
func (p *slidingResults[K, A]) openOlds(c *nodeInstance) {
	p.sendOld, p.fullOld = c.node.sendOld && !p.final, c.node.fullOld
}

// storedOld is the old value of an update of a window whose stored
// aggregate is vb, decoded apart from the one the step folds into, which
// may change in place.
func (p *slidingResults[K, A]) storedOld(vb []byte) (*prior, error) {
	if !p.sendOld {
		return nil, nil
	}
	if !p.fullOld {
		return &prior{}, nil
	}
	old, err := p.aggSerde.Decode(bytes.Clone(vb))
	if err != nil {
		return nil, fmt.Errorf("decode aggregate in store %q: %w", p.store, err)
	}
	return &prior{value: old}, nil
}

// derivedOld is the old value of a new window derived from the aggregate
// stored as vb.
func (p *slidingResults[K, A]) derivedOld(c *nodeInstance, vb []byte) (*prior, error) {
	if p.sendOld && c.holds() {
		return p.newOld(), nil
	}
	return p.storedOld(vb)
}

// initialOld is the old value of a new window started from the initial
// aggregate.
func (p *slidingResults[K, A]) initialOld(c *nodeInstance) *prior {
	if !p.sendOld || p.initial == nil || c.holds() {
		return p.newOld()
	}
	v, ok := p.initial()
	return &prior{value: v, null: !ok}
}

// newOld is the old value of a new window that did not exist: null.
func (p *slidingResults[K, A]) newOld() *prior {
	if !p.sendOld {
		return nil
	}
	return &prior{null: true}
}
