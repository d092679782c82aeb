package iq

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
)

func encodeEntries(c StoreCodec, pe PartitionEntries[[]byte, []byte]) (wirePartitionRange, error) {
	out := wirePartitionRange{Partition: pe.Provenance.Partition, ServedBy: servedBy(pe.Provenance), Entries: make([]wireEntry, 0, len(pe.Entries)), Truncated: pe.Truncated}
	for _, e := range pe.Entries {
		var k any = string(e.Key)
		var err error
		if c.DecodeKey != nil {
			if k, err = c.DecodeKey(e.Key); err != nil {
				return out, fmt.Errorf("iq: store %q partition %d: decode key: %w", c.Name, out.Partition, err)
			}
		}
		v, err := c.DecodeValue(e.Value)
		if err != nil {
			return out, fmt.Errorf("iq: store %q partition %d: decode value: %w", c.Name, out.Partition, err)
		}
		we := wireEntry{TimestampMs: e.Timestamp}
		if we.Key, err = json.Marshal(k); err == nil {
			we.Value, err = json.Marshal(v)
		}
		if err != nil {
			return out, fmt.Errorf("iq: store %q partition %d: %w", c.Name, out.Partition, err)
		}
		out.Entries = append(out.Entries, we)
	}
	return out, nil
}

// encodeAnswered turns a local multi-partition answer into its wire form:
// each answered partition encoded, each refused one listed as a failure.
func encodeAnswered[P, W any](answered []P, refused []PartitionError, encode func(P) (W, error)) ([]W, []wirePartitionError, error) {
	out := make([]W, 0, len(answered))
	for _, p := range answered {
		wp, err := encode(p)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, wp)
	}
	var failed []wirePartitionError
	for _, f := range refused {
		failed = append(failed, partitionFailure(f.Partition, f.Err))
	}
	return out, failed, nil
}

func partitionFailure(p int32, err error) wirePartitionError {
	_, we := toWireError(err)
	return wirePartitionError{Partition: p, wireError: we}
}

// admitRange starts a range-like request (range, all keys' windows) on
// store: its codec, a place among MaxConcurrentRanges (release gives it
// back) and its parameters, bounded by MaxRangeEntries and not routed by
// default. Without ok the refusal is written.
func (s *Server) admitRange(w http.ResponseWriter, r *http.Request, store string) (c StoreCodec, p params, release func(), ok bool) {
	if c, ok = s.codec(w, store); !ok {
		return c, p, nil, false
	}
	release, err := acquire(s.ranges, "range queries")
	if err != nil {
		s.writeErr(w, err)
		return c, p, nil, false
	}
	if p, err = parseParams(r.URL.Query(), false, s.cfg.MaxRangeEntries); err != nil {
		writeErr(w, err)
		release()
		return c, p, nil, false
	}
	return c, p, release, true
}

func (s *Server) handleRange(w http.ResponseWriter, r *http.Request) {
	store := r.PathValue("store")
	c, p, release, ok := s.admitRange(w, r, store)
	if !ok {
		return
	}
	defer release()
	v := r.URL.Query()
	_, err := s.q.requireKind(store, KindKeyValue)
	if err != nil {
		writeErr(w, err)
		return
	}
	var from, to []byte
	for _, b := range []struct {
		name string
		dst  *[]byte
	}{{"from", &from}, {"to", &to}} {
		if t := v.Get(b.name); t != "" {
			if *b.dst, err = c.EncodeKey(t); err != nil {
				writeErr(w, invalidf("malformed %s=%q for store %q: %v", b.name, t, store, err))
				return
			}
		}
	}
	ctx := r.Context()
	out := wireRange{Store: store, Partitions: []wirePartitionRange{}}
	if !p.route || s.isGlobal(store) {
		res, err := s.q.RangeBytes(ctx, store, from, to, p.options()...)
		if err != nil {
			writeErr(w, err)
			return
		}
		out.Partitions, out.Failed, err = encodeAnswered(res.Partitions, res.Refused, func(pe PartitionEntries[[]byte, []byte]) (wirePartitionRange, error) {
			return encodeEntries(c, pe)
		})
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	parts, err := s.partitionsAsked(store, p)
	if err != nil {
		writeErr(w, err)
		return
	}
	out.Partitions, out.Failed = fanOut(s.cfg.FanOut, parts, func(part int32) (wirePartitionRange, error) {
		return s.rangePartition(ctx, c, store, part, from, to, v, p)
	})
	writeJSON(w, http.StatusOK, out)
}

// partitionsAsked lists the partitions a routed range-like query covers:
// the one its partition parameter names, or all of the store's.
func (s *Server) partitionsAsked(store string, p params) ([]int32, error) {
	m, err := s.b.Metadata()
	if err != nil {
		return nil, &UnavailableError{Store: store, Partition: -1, Bound: p.bound, Cause: err}
	}
	n, err := m.partitionsOf(store)
	if err != nil {
		return nil, err
	}
	if p.hasPartition {
		if p.partition < 0 || p.partition >= n {
			return nil, fmt.Errorf("%w: store %q has %d partitions, asked for %d", ErrUnknownPartition, store, n, p.partition)
		}
		return []int32{p.partition}, nil
	}
	parts := make([]int32, 0, n)
	for i := int32(0); i < n; i++ {
		parts = append(parts, i)
	}
	return parts, nil
}

// askRecovered asks one partition, turning a panic into the partition's
// error. fanOut asks on goroutines of its own, where a panic would end the
// process, not just the request as in a handler (net/http recovers those):
// a store whose files were damaged after it was opened makes badger panic
// when a read reaches the damaged block.
func askRecovered[T any](part int32, ask func(int32) (T, error)) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("iq: partition %d: reading it panicked: %v", part, r)
		}
	}()
	return ask(part)
}

// fanOut asks every partition with ask, at most width at once, and returns
// the answers and the failures, each in partition order.
func fanOut[T any](width int, parts []int32, ask func(int32) (T, error)) ([]T, []wirePartitionError) {
	type slot struct {
		ok   T
		fail *wirePartitionError
	}
	slots := make([]slot, len(parts))
	sem := make(chan struct{}, width)
	var wg sync.WaitGroup
	for i, part := range parts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			v, err := askRecovered(part, ask)
			if err != nil {
				f := partitionFailure(part, err)
				slots[i].fail = &f
				return
			}
			slots[i].ok = v
		}()
	}
	wg.Wait()
	oks := make([]T, 0, len(parts)) // an answer lists no partitions as [], not null
	var fails []wirePartitionError
	for _, sl := range slots {
		if sl.fail != nil {
			fails = append(fails, *sl.fail)
		} else {
			oks = append(oks, sl.ok)
		}
	}
	return oks, fails
}

// rangePartition answers one partition of a routed range
// (routePartition).
func (s *Server) rangePartition(ctx context.Context, c StoreCodec, store string, part int32, from, to []byte, v url.Values, p params) (wirePartitionRange, error) {
	p.partition, p.hasPartition = part, true
	readLocal := func() (wirePartitionRange, error) {
		res, err := s.q.RangeBytes(ctx, store, from, to, p.options()...)
		if err != nil {
			return wirePartitionRange{}, err
		}
		return encodeEntries(c, res.Partitions[0])
	}
	q := p.forwardQuery()
	q.Set("limit", strconv.Itoa(p.limit))
	for _, k := range []string{"from", "to"} {
		if t := v.Get(k); t != "" {
			q.Set(k, t)
		}
	}
	pathQuery := "/v1/stores/" + url.PathEscape(store) + "/range?" + q.Encode()
	return routePartition(ctx, s, store, part, p, pathQuery, readLocal,
		func(w wirePartitionRange) *wireServedBy { return w.ServedBy })
}
